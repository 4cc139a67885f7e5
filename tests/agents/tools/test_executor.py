"""The trusted executor against a real local HTTP endpoint: refusals, schema
checks, the derived key, the recorded fact, failures and unknown outcomes, and
what success is: a 2xx whose JSON body passes the tool's rule (docs/agents.md,
"What success is")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agents.catalog import load_catalog
from agents.tools.executor import Executor, Outcome, derived_key, redact_url, response_path

CATALOG = load_catalog(
    """\
integrations:
  calendar: {tools: [schedule_meeting, flaky, slow_book, slow_charge, book, charge, confirm]}
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
  book:
    description: Answers with the canned reply named by REPLY, safe to retry.
    http: {url: "${TOOLS_URL}/reply/${REPLY}"}
    idempotent: true
    records: {fact: meeting_scheduled, properties: {when: "$.when"}}
  charge:
    description: Answers with the canned reply named by REPLY, not safe to retry.
    http: {url: "${TOOLS_URL}/reply/${REPLY}"}
    records: {fact: charged}
  confirm:
    description: Answers with the canned reply named by REPLY; confirmed only by its status.
    http: {url: "${TOOLS_URL}/reply/${REPLY}"}
    idempotent: true
    records: {fact: meeting_scheduled, properties: {when: "$.when"}}
    success: {path: "$.status", in: [confirmed, booked]}
""",
    "c.yaml",
)
GRANTED = {"schedule_meeting", "flaky", "slow_book", "slow_charge", "book", "charge", "confirm"}
HTML = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>" + "x" * 5000
#: What /reply/{name} answers, each with HTTP 200 (204 for "empty").
REPLIES: dict[str, Any] = {
    "html": HTML,
    "ok_false": {"ok": False},
    "declined": {"ok": False, "error": "declined"},
    "error": {"error": "declined"},
    "error_object": {"when": "10:00", "error": {"code": 7}},
    "list": [{"when": "10:00"}],
    "string": "booked",
    "number": 1,
    "null": None,
    "empty": b"",
    "plain": {"when": "10:00"},
    "null_error": {"when": "10:00", "ok": True, "error": None},
    "confirmed": {"status": "confirmed", "when": "10:00", "error": "a warning"},
    "booked": {"status": "booked", "when": "10:00"},
    "pending": {"status": "pending", "when": "10:00"},
}


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

    @app.post("/reply/{name}", response_model=None)
    async def reply(name: str) -> Response:
        app.state.seen.append(name)
        answer = REPLIES[name]
        if answer == b"":
            return Response(status_code=204)
        if isinstance(answer, str) and answer.startswith("<"):
            return Response(answer, media_type="text/html")
        return JSONResponse(answer)

    return app


@pytest.fixture
def run(serve: Callable[[Any], str]) -> Callable[..., tuple[Outcome, FastAPI]]:
    app = endpoint()
    base = serve(app)
    env = {"TOOLS_URL": base, "TOOLS_TOKEN": "s3cret", "TEAM": "blue"}

    def call(
        name: str,
        arguments: str,
        granted: set[str] = GRANTED,
        occurrence: int = 1,
        reply: str = "",
    ) -> Any:
        async def go() -> Outcome:
            async with httpx2.AsyncClient() as client:
                executor = Executor(CATALOG, client, {**env, "REPLY": reply})
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


def told(outcome: Outcome) -> str:
    """The error the model was told."""
    body = orjson.loads(outcome.output)
    assert body["ok"] is False
    return str(body["error"])


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("html", "the answer is not JSON: <!DOCTYPE html><html><head><title>502 Bad Gateway"),
        ("ok_false", 'the answer says "ok": false: {"ok":false}'),
        ("declined", 'the answer says "ok": false: {"ok":false,"error":"declined"}'),
        ("error", 'the answer carries an error: "declined": {"error":"declined"}'),
        ("error_object", 'the answer carries an error: {"code":7}: '),
        ("list", 'the answer is not a JSON object: [{"when":"10:00"}]'),
        ("string", 'the answer is not a JSON object: "booked"'),
        ("number", "the answer is not a JSON object: 1"),
        ("null", "the answer is not a JSON object: null"),
        ("empty", "the answer is not JSON: (no body)"),
    ],
)
def test_a_2xx_that_does_not_say_it_happened_records_nothing(
    run: Any, reply: str, why: str
) -> None:
    outcome, app = run("book", "{}", reply=reply)
    assert app.state.seen == [reply]
    assert (outcome.status, outcome.fact, outcome.data) == ("failed", None, None)
    status = 204 if reply == "empty" else 200
    assert outcome.http_status == status
    assert told(outcome).startswith(f"HTTP {status}, but {why}"), told(outcome)
    assert "do not repeat" not in outcome.output  # an idempotent call may be retried


def test_the_opening_of_the_body_is_bounded(run: Any) -> None:
    outcome, _ = run("book", "{}", reply="html")
    body = told(outcome).split("not JSON: ", 1)[1]
    assert body.startswith("<!DOCTYPE html>")
    assert len(body) == 300
    assert body.endswith("xxx...")


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        # The body says it did not happen: a failure, as for any tool.
        ("declined", "failed"),
        ("error", "failed"),
        # The body says nothing readable: like a timeout, it may have happened.
        ("html", "outcome_unknown"),
        ("list", "outcome_unknown"),
        ("empty", "outcome_unknown"),
    ],
)
def test_a_non_idempotent_tool_fails_when_told_and_is_unknown_when_not(
    run: Any, reply: str, status: str
) -> None:
    outcome, _ = run("charge", "{}", reply=reply)
    assert (outcome.status, outcome.fact) == (status, None)
    assert told(outcome).endswith("do not repeat it") == (status == "outcome_unknown")


@pytest.mark.parametrize("reply", ["plain", "null_error"])
def test_the_default_rule_passes_an_object_that_says_no_failure(run: Any, reply: str) -> None:
    outcome, _ = run("book", "{}", reply=reply)
    assert outcome.status == "done"
    assert outcome.fact is not None
    assert (outcome.fact.action, outcome.fact.properties) == (
        "meeting_scheduled",
        {"when": "10:00"},
    )
    assert outcome.data == REPLIES[reply]


@pytest.mark.parametrize("reply", ["confirmed", "booked"])
def test_a_success_rule_that_passes_confirms_whatever_else_the_body_says(
    run: Any, reply: str
) -> None:
    # "confirmed" also carries an error: a tool with `success:` is judged by it only.
    outcome, _ = run("confirm", "{}", reply=reply)
    assert outcome.status == "done"
    assert outcome.fact is not None
    assert outcome.fact.properties == {"when": "10:00"}


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("pending", '$.status is "pending", not one of ["confirmed","booked"]'),
        ("plain", "the answer has no $.status"),
        ("declined", 'the answer says "ok": false'),
        ("html", "the answer is not JSON"),
    ],
)
def test_a_success_rule_that_fails_records_nothing(run: Any, reply: str, why: str) -> None:
    outcome, _ = run("confirm", "{}", reply=reply)
    assert (outcome.status, outcome.fact, outcome.http_status) == ("failed", None, 200)
    assert told(outcome).startswith(f"HTTP 200, but {why}: "), told(outcome)
