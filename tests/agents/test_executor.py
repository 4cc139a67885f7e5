"""The trusted executor against a real local HTTP endpoint: refusals, schema
checks, the derived key, the recorded fact, failures and unknown outcomes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agents.catalog import load_catalog
from agents.executor import Executor, Outcome, derived_key, redact_url, response_path

CATALOG = load_catalog(
    """\
integrations:
  calendar: {tools: [schedule_meeting, flaky, slow_book, slow_charge]}
agents:
  conversation: {instructions: Help.}
tools:
  schedule_meeting:
    description: Book a meeting.
    parameters:
      type: object
      properties: {when: {type: string}}
      required: [when]
      additionalProperties: false
    http: {url: "${TOOLS_URL}/book?token=${TOOLS_TOKEN}", headers: {X-Team: "${TEAM}"}}
    idempotent: true
    records: {fact: meeting_scheduled, properties: {when: "$.when", booking: "$.booking.id"}}
  flaky:
    description: Always fails.
    http: {url: "${TOOLS_URL}/fail"}
    idempotent: true
    records: {fact: never}
  slow_book:
    description: Too slow, but safe to retry.
    http: {url: "${TOOLS_URL}/slow", timeout: 0.3}
    idempotent: true
    records: {fact: never}
  slow_charge:
    description: Too slow, and not safe to retry.
    http: {url: "${TOOLS_URL}/slow", timeout: 0.3}
    idempotent: false
    records: {fact: never}
""",
    "c.yaml",
)
GRANTED = {"schedule_meeting", "flaky", "slow_book", "slow_charge"}


def endpoint() -> FastAPI:
    app = FastAPI()
    app.state.seen = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.seen.append((dict(request.headers), dict(request.query_params), body))
        return {"when": body["when"], "booking": {"id": "B-1"}}

    @app.post("/fail", response_model=None)
    async def fail() -> JSONResponse:
        return JSONResponse({"error": "calendar down"}, status_code=500)

    @app.post("/slow")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(2)
        return {}

    return app


@pytest.fixture
def run(serve: Callable[[Any], str]) -> Callable[..., tuple[Outcome, FastAPI]]:
    app = endpoint()
    base = serve(app)
    env = {"TOOLS_URL": base, "TOOLS_TOKEN": "s3cret", "TEAM": "blue"}

    def call(name: str, arguments: str, granted: set[str] = GRANTED, occurrence: int = 1) -> Any:
        async def go() -> Outcome:
            async with httpx.AsyncClient() as client:
                executor = Executor(CATALOG, client, env)
                return await executor.run(
                    job_key="job-1",
                    task_id="job-1/bookCall",
                    name=name,
                    arguments=arguments,
                    granted=granted,
                    occurrence=occurrence,
                )

        return asyncio.run(go()), app

    return call


def test_a_confirmed_call_records_its_fact_under_our_own_key(run: Any) -> None:
    outcome, app = run("schedule_meeting", '{"when": "tomorrow 10:00"}')
    key = derived_key("job-1/bookCall", "schedule_meeting", {"when": "tomorrow 10:00"}, 1)
    assert outcome.status == "done"
    assert outcome.key == key
    fact = outcome.fact
    assert fact is not None
    assert (fact.key, fact.action, fact.source, fact.idempotency_key) == (
        "job-1",
        "meeting_scheduled",
        "tool",
        key,
    )
    assert fact.properties == {"when": "tomorrow 10:00", "booking": "B-1"}
    [(headers, query, body)] = app.state.seen
    assert headers["idempotency-key"] == key
    assert headers["x-team"] == "blue"
    assert query == {"token": "s3cret"}
    assert body == {"when": "tomorrow 10:00"}
    assert outcome.url is not None
    assert "s3cret" not in outcome.url  # the journal sees the redacted URL
    assert outcome.url.endswith("/book?token=***")
    assert '"ok":true' in outcome.output


def test_the_key_depends_on_our_data_only() -> None:
    one = derived_key("job-1/bookCall", "schedule_meeting", {"when": "10:00", "x": 1}, 1)
    same = derived_key("job-1/bookCall", "schedule_meeting", {"x": 1, "when": "10:00"}, 1)
    assert one == same  # canonical arguments
    assert one != derived_key("job-1/bookCall", "schedule_meeting", {"when": "10:00", "x": 1}, 2)
    assert one != derived_key("job-1/other", "schedule_meeting", {"when": "10:00", "x": 1}, 1)


def test_a_tool_the_open_tasks_do_not_grant_is_refused_and_not_called(run: Any) -> None:
    outcome, app = run("schedule_meeting", '{"when": "now"}', granted={"flaky"})
    assert outcome.status == "refused"
    assert "not granted" in outcome.output
    assert outcome.fact is None
    assert app.state.seen == []


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ("{not json", "not JSON"),
        ("{}", "'when' is a required property"),
        ('{"when": 5}', "when: 5 is not of type 'string'"),
        ('{"when": "x", "room": 1}', "Additional properties are not allowed"),
    ],
)
def test_arguments_that_fail_the_schema_are_refused(run: Any, arguments: str, words: str) -> None:
    outcome, app = run("schedule_meeting", arguments)
    assert outcome.status == "refused"
    assert words in outcome.output
    assert app.state.seen == []


def test_a_failed_call_records_nothing_and_tells_the_model(run: Any) -> None:
    outcome, _ = run("flaky", "{}")
    assert (outcome.status, outcome.http_status, outcome.fact) == ("failed", 500, None)
    assert "HTTP 500" in outcome.output
    assert "calendar down" in outcome.output


def test_a_timeout_is_a_failure_for_an_idempotent_tool(run: Any) -> None:
    outcome, _ = run("slow_book", "{}")
    assert (outcome.status, outcome.fact) == ("failed", None)
    assert "timed out" in outcome.output


def test_a_timeout_of_a_non_idempotent_tool_is_an_unknown_outcome(run: Any) -> None:
    outcome, _ = run("slow_charge", "{}")
    assert (outcome.status, outcome.fact) == ("outcome_unknown", None)
    assert "do not repeat it" in outcome.output


def test_redaction_and_response_paths() -> None:
    assert (
        redact_url("https://user:pw@h:8443/p?a=1&key=sk-live") == "https://h:8443/p?a=***&key=***"
    )
    data = {"booking": {"id": "B-1", "slots": ["x", "y"]}}
    assert response_path(data, "$.booking.id") == (True, "B-1")
    assert response_path(data, "$.booking.slots.1") == (True, "y")
    assert response_path(data, "$.nope") == (False, None)
    assert response_path(data, "$") == (True, data)
