"""The agents service against a real broker: a real engine worker, the real
``lemongraph agents`` process, the stand-in model over HTTP and a local tool
endpoint. A task opens, the agent talks and books; only the tool's confirmed
result becomes evidence."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from agents.standin import StandinScript, build_standin
from tests.lanes import Lane

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"tool_result": "schedule_meeting"}, "say": "Your meeting is booked."},
            {"when": {"next_step": "bookCall"},
             "call": {"tool": "schedule_meeting", "args": {"when": "tomorrow 10:00"}}},
            {"say": "I have booked the meeting."},
        ]
    }
)  # fmt: skip


def with_catalog(lane: Lane) -> None:
    """The bundled catalog (and its skills) in the lane's playbooks folder."""
    shutil.copy(ROOT / "playbooks" / "catalog.yaml", lane.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "playbooks" / "skills", lane.playbooks / "skills")


def calendar() -> FastAPI:
    app = FastAPI()
    app.state.calls = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls.append((request.headers.get("idempotency-key"), body))
        return {"when": body["when"], "id": "B-1"}

    return app


def test_a_task_becomes_a_conversation_and_only_the_tool_result_counts(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    with_catalog(lane)
    model = serve(build_standin(SCRIPT))
    tools = calendar()
    tools_url = serve(tools)
    lane.start_worker()
    lane.start(
        ["agents"],
        "agents: ready",
        OPENAI_BASE_URL=f"{model}/v1",
        OPENAI_API_KEY="sk-test-secret-key",
        CALENDAR_URL=tools_url,
    )
    lane.send(
        {"type": "job.start", "key": "c-1", "playbook_key": "onboarding"},
        {"type": "event", "key": "c-1", "action": "id_uploaded", "idempotency_key": "id-1"},
    )

    def by_tool(records: list[dict[str, Any]]) -> bool:
        return any(
            r["value"]["input"].get("source") == "tool" and r["value"]["outcome"] == "applied"
            for r in records
        )

    decisions = lane.wait_until("decisions", by_tool, timeout=120)
    inputs = [r["value"]["input"] for r in decisions]
    [fact] = [i for i in inputs if i.get("source") == "tool"]
    assert fact["action"] == "meeting_scheduled"
    assert fact["properties"] == {"when": "tomorrow 10:00"}
    assert fact["idempotency_key"].startswith("lg-")
    [(sent_key, body)] = tools.state.calls
    assert sent_key == fact["idempotency_key"]
    assert body == {"when": "tomorrow 10:00"}
    # What the agent said is an agent event: decided, counted for nothing.
    said = lane.wait_until(
        "decisions",
        lambda rs: any(r["value"]["input"].get("action") == "agent_said" for r in rs),
    )
    [claim, *_] = [r["value"] for r in said if r["value"]["input"].get("action") == "agent_said"]
    assert claim["input"]["source"] == "agent"
    journal = lane.wait_until(
        "journal", lambda rs: any(r["value"]["type"] == "journal.run" for r in rs)
    )
    kinds = [r["value"]["type"] for r in journal]
    assert "journal.model_call" in kinds
    [tool] = [r["value"] for r in journal if r["value"]["type"] == "journal.tool_call"]
    assert (tool["tool"], tool["outcome"], tool["fact"]) == (
        "schedule_meeting",
        "done",
        "meeting_scheduled",
    )
    # collectIdentity's run (if bookCall was not open yet when it called the
    # model) only talked; bookCall opened owes a run of its own, which booked.
    texts = [m["value"]["text"] for m in lane.read("messages")]
    assert texts[-1] == "Your meeting is booked."
    assert set(texts) <= {"I have booked the meeting.", "Your meeting is booked."}
    # the API key appears on no topic
    for topic in ("journal", "messages", "decisions", "inbox", "conversations"):
        assert all("sk-test-secret-key" not in str(r["value"]) for r in lane.read(topic))


def slow_calendar() -> FastAPI:
    """Answers the first booking only after a while (long enough to kill the
    service mid-call), later ones at once."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls.append(request.headers.get("idempotency-key"))
        if len(app.state.calls) == 1:
            await asyncio.sleep(4)
        return {"when": body["when"], "id": "B-1"}

    return app


def test_a_service_killed_mid_call_resumes_and_records_the_fact_once(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    with_catalog(lane)
    model = serve(build_standin(SCRIPT))
    tools = slow_calendar()
    env = {
        "OPENAI_BASE_URL": f"{model}/v1",
        "OPENAI_API_KEY": "sk-test",
        "CALENDAR_URL": serve(tools),
    }
    lane.start_worker()
    agents = lane.start(["agents"], "agents: ready", **env)
    lane.send(
        {"type": "job.start", "key": "c-2", "playbook_key": "onboarding"},
        {"type": "event", "key": "c-2", "action": "id_uploaded", "idempotency_key": "id-2"},
    )
    deadline = time.monotonic() + 60
    while not tools.state.calls:
        assert time.monotonic() < deadline, "the tool was never called"
        time.sleep(0.1)
    agents.stop(signal.SIGKILL)  # mid-call: the booking has no answer yet
    lane.start(["agents"], "agents: ready", **env)

    def applied(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            r["value"]
            for r in records
            if r["value"]["input"].get("source") == "tool" and r["value"]["outcome"] == "applied"
        ]

    lane.wait_until("decisions", lambda rs: bool(applied(rs)), timeout=120)
    time.sleep(2)  # give a second fact, if there were one, time to arrive
    facts = applied(lane.read("decisions"))
    assert len(facts) == 1, facts
    calls = tools.state.calls
    assert len(calls) >= 2, calls  # the resumed run called again...
    assert set(calls) == {facts[0]["input"]["idempotency_key"]}  # ...with the same key
