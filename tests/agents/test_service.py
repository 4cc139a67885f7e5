"""The agents service against a real broker: a real engine worker, the real
``lemongraph agents`` process, the stand-in model over HTTP and a local tool
endpoint. A task opens, the agent talks and books; only the tool's confirmed
result becomes evidence."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agents.dev.standin import StandinScript, build_standin
from tests.lanes import Lane, WorkerProcess

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


def with_catalog(lane: Lane, booking_timeout: float | None = None) -> None:
    """The bundled catalog (and its skills) in the lane's playbooks folder; with
    ``booking_timeout``, schedule_meeting's timeout is that many seconds."""
    catalog = yaml.safe_load((ROOT / "examples" / "catalog.yaml").read_text())
    if booking_timeout is not None:
        catalog["tools"]["schedule_meeting"]["http"]["timeout"] = booking_timeout
    (lane.playbooks / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    shutil.copytree(ROOT / "examples" / "skills", lane.playbooks / "skills")


def start_loop(
    lane: Lane, serve: Callable[[Any], str], script: StandinScript, **env: str
) -> WorkerProcess:
    """The engine worker, and ``lemongraph agents`` on a stand-in with ``script``."""
    lane.start_worker()
    env.setdefault("OPENAI_API_KEY", "sk-test")
    model = serve(build_standin(script))
    return lane.start(["agents"], "agents: ready", OPENAI_BASE_URL=f"{model}/v1", **env)


def calendar() -> FastAPI:
    app = FastAPI()
    app.state.calls = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls.append((request.headers.get("idempotency-key"), body))
        return {"status": "confirmed", "when": body["when"], "id": "B-1"}

    return app


def test_a_task_becomes_a_conversation_and_only_the_tool_result_counts(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    with_catalog(lane)
    tools = calendar()
    start_loop(lane, serve, SCRIPT, OPENAI_API_KEY="sk-test-secret-key", CALENDAR_URL=serve(tools))
    lane.send(
        {"type": "job.start", "key": "c-1", "playbook_key": "onboarding"},
        {"type": "event", "key": "c-1", "action": "id_uploaded", "idempotency_key": "id-1"},
    )

    decisions = lane.wait_until("decisions", lambda rs: bool(applied(rs)), timeout=120)
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


def slow_calendar(slow: int = 1, gate: threading.Event | None = None) -> FastAPI:
    """Answers the first ``slow`` bookings only after a while (long enough to
    kill the service mid-call), later ones at once. With ``gate``, the first
    booking is answered only once the gate is set (55 s at the most): a call
    that stays out until the test has seen what it waits for, however slowly the
    machine gets there."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls.append(request.headers.get("idempotency-key"))
        if gate is not None and len(app.state.calls) == 1:
            deadline = time.monotonic() + 55
            while not gate.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        elif len(app.state.calls) <= slow:
            await asyncio.sleep(4)
        return {"status": "confirmed", "when": body["when"], "id": "B-1"}

    return app


def agents_env(serve: Callable[[Any], str], calendar: FastAPI) -> dict[str, str]:
    """What `lemongraph agents` needs here: the stand-in with SCRIPT, and ``calendar``."""
    return {
        "OPENAI_BASE_URL": f"{serve(build_standin(SCRIPT))}/v1",
        "OPENAI_API_KEY": "sk-test",
        "CALENDAR_URL": serve(calendar),
    }


def onboard(lane: Lane, key: str) -> None:
    """Start an onboarding job and upload its ID: bookCall opens."""
    lane.send(
        {"type": "job.start", "key": key, "playbook_key": "onboarding"},
        {"type": "event", "key": key, "action": "id_uploaded", "idempotency_key": f"id-{key}"},
    )


def wait_calls(app: FastAPI, n: int) -> None:
    deadline = time.monotonic() + 90
    while len(app.state.calls) < n:
        assert time.monotonic() < deadline, f"the tool was called {app.state.calls}"
        time.sleep(0.1)


def applied(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decisions that applied a tool's fact."""
    return [
        r["value"] for r in records
        if r["value"]["input"].get("source") == "tool" and r["value"]["outcome"] == "applied"
    ]  # fmt: skip


def ran_after_its_fact(records: list[dict[str, Any]]) -> bool:
    """A journal.run record after the first journaled tool call with a fact (one
    job: one partition, in order)."""
    kinds = [(r["offset"], r["value"]["type"], r["value"].get("fact")) for r in records]
    facts = [offset for offset, kind, fact in kinds if kind == "journal.tool_call" and fact]
    return bool(facts) and any(o > facts[0] and k == "journal.run" for o, k, _ in kinds)


def test_a_service_killed_mid_call_resumes_and_records_the_fact_once(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    with_catalog(lane)
    tools = slow_calendar()
    env = agents_env(serve, tools)
    lane.start_worker()
    agents = lane.start(["agents"], "agents: ready", **env)
    onboard(lane, "c-2")
    wait_calls(tools, 1)
    agents.stop(signal.SIGKILL)  # mid-call: the booking has no answer yet
    lane.start(["agents"], "agents: ready", **env)

    lane.wait_until("decisions", lambda rs: bool(applied(rs)), timeout=120)
    # A run's facts are on the inbox (acknowledged) before its journal.run
    # record; decided before the end markers.
    lane.wait_until("journal", ran_after_its_fact)
    lane.drain()
    facts = applied(lane.read("decisions"))
    assert len(facts) == 1, facts
    calls = tools.state.calls
    assert len(calls) >= 2, calls  # the resumed run called again...
    assert set(calls) == {facts[0]["input"]["idempotency_key"]}  # ...with the same key
    # The resumed run replayed the model's reply it had paid for (the call to
    # book) instead of asking again: the run holds two model calls, not three.
    journal = lane.wait_until(
        "journal",
        lambda rs: any(r["value"]["type"] == "journal.run" and r["value"]["replayed"] for r in rs),
    )
    [resumed] = [r["value"] for r in journal if r["value"]["type"] == "journal.run"
                 and r["value"]["replayed"]]  # fmt: skip
    assert resumed["replayed"] == 1
    model_calls = [
        r for r in journal
        if r["value"]["type"] == "journal.model_call" and r["value"]["run_id"] == resumed["run_id"]
    ]  # fmt: skip
    assert len(model_calls) == 2


DESK = """\
key: desk
version: 1
instructions: Book the customer, then activate the account.
milestones:
  - id: book
    instructions: Book a call with the customer.
    condition: meeting_scheduled
    integrations: [calendar]
  - id: activate
    needs: [book]
    instructions: Activate the account.
    condition: account_activated
    integrations: [crm]
"""
DESK_SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"agent": "crm_agent", "tool_result": "activate_account"},
             "say": "The account is active."},
            {"when": {"agent": "crm_agent"}, "call": {"tool": "activate_account", "args": {}}},
            {"when": {"tool_failed": "schedule_meeting"},
             "call": {"tool": "schedule_meeting", "args": {"when": "tomorrow 10:00"}}},
            {"when": {"tool_result": "schedule_meeting"}, "say": "Your meeting is booked."},
            {"when": {"tool_result": "crm_agent"}, "say": "Your account is active."},
            {"when": {"closing": True}, "say": "All done: your account is active."},
            {"when": {"next_step": "book"},
             "call": {"tool": "schedule_meeting", "args": {"when": "tomorrow 10:00"}}},
            {"when": {"next_step": "activate"},
             "call": {"tool": "crm_agent", "args": {"request": "Activate the account."}}},
            {"say": "Hello."},
        ]
    }
)  # fmt: skip


def flaky_tools() -> FastAPI:
    """The calendar fails (500), then hangs past the tool's timeout, then books;
    the CRM activates."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/{name}", response_model=None)
    async def tool(name: str, request: Request) -> Any:
        body = await request.json()
        app.state.calls.append((name, request.headers.get("idempotency-key")))
        tries = sum(1 for n, _ in app.state.calls if n == name)
        if name == "book" and tries == 1:
            return JSONResponse({"error": "calendar down"}, status_code=500)
        if name == "book" and tries == 2:
            await asyncio.sleep(3)  # the tool's timeout is 1 s
        return {"status": "confirmed", "when": body.get("when"), "active": True}

    return app


def test_failures_are_told_and_retried_a_delegate_activates_and_a_bad_task_is_dead_lettered(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    with_catalog(lane, booking_timeout=1)
    (lane.playbooks / "desk.yaml").write_text(DESK)
    tools = flaky_tools()
    url = serve(tools)
    start_loop(lane, serve, DESK_SCRIPT, CALENDAR_URL=url, CRM_URL=url)
    hostile = b"\xff\xfe{not a task"
    lane.produce([(b"d-1", hostile)], topic="tasks")
    lane.send({"type": "job.start", "key": "d-1", "playbook_key": "desk"})

    def done(records: list[dict[str, Any]]) -> bool:
        return any(r["value"]["status"] == "done" for r in records)

    decisions = lane.wait_until("decisions", done, timeout=150)
    facts = applied(decisions)
    assert [f["input"]["action"] for f in facts] == ["meeting_scheduled", "account_activated"]
    # each milestone's verdict names the tool event that completed it as its evidence
    for fact, milestone in zip(facts, ["book", "activate"], strict=True):
        [verdict] = [v for v in fact["verdicts"] if v["milestone"] == milestone]
        assert verdict["verdict"] == "TRUE"
        assert fact["input"]["idempotency_key"] in verdict["atoms"][0]["evidence"]
    # The booking failed twice, the model was told and tried again: the same key
    # each time (nothing was done), and one fact.
    books = [key for name, key in tools.state.calls if name == "book"]
    assert len(books) == 3
    assert set(books) == {facts[0]["input"]["idempotency_key"]}
    delegated = lane.wait_until(
        "journal", lambda rs: any(r["value"].get("outcome") == "delegated" for r in rs)
    )
    journal = [r["value"] for r in delegated]
    calls = [
        (j["agent"], j["tool"], j["outcome"]) for j in journal if j["type"] == "journal.tool_call"
    ]
    assert calls == [
        ("conversation", "schedule_meeting", "failed"),
        ("conversation", "schedule_meeting", "failed"),
        ("conversation", "schedule_meeting", "done"),
        ("crm_agent", "activate_account", "done"),
        ("conversation", "crm_agent", "delegated"),
    ]
    failures = [j for j in journal if j["type"] == "journal.tool_call" and j["outcome"] == "failed"]
    assert failures[0]["http_status"] == 500
    assert "timed out" in failures[1]["result"]
    # The job may be done (and the task closed) before the agent's next turn:
    # then its closing turn tells the person; either way, one message more.
    said = [m["value"]["text"] for m in lane.wait_until("messages", lambda rs: len(rs) >= 2)]
    assert said[0] == "Your meeting is booked."
    assert said[1:] in (["Your account is active."], ["All done: your account is active."])
    # the hostile tasks record: dead-lettered byte for byte, and the service went on
    [letter] = lane.read("deadletter")
    assert letter["key"] == "d-1"
    assert letter["value"]["topic"] == lane.topics.tasks
    assert base64.b64decode(letter["value"]["value_b64"]) == hostile
    assert "not a task record" in letter["value"]["reason"]


def test_a_second_process_takes_over_a_run_from_the_changelog(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    """Two agents processes in one group. The first holds every partition and is
    mid-call when the second joins (the partitions are shared out: the run is
    stopped where it was and resumed by whichever now owns its partition), and
    is then killed (the second owns everything, and reads back what the first
    wrote). One fact, one key, and the run's paid model reply replayed."""
    # The first call stays out until the first process stopped the run for the
    # rebalance (it once took four seconds, and a second process slow to join
    # found the run done and nothing to resume); the tool waits for it as long
    # (its 10 s timeout once ended the call first, on a busy machine).
    with_catalog(lane, booking_timeout=60)
    shared_out = threading.Event()
    app = slow_calendar(slow=2, gate=shared_out)
    env = agents_env(serve, app)
    lane.start_worker()
    first = lane.start(["agents"], "agents: ready", **env)
    onboard(lane, "c-3")
    wait_calls(app, 1)  # the first process is mid-call
    # (another machine: a data folder of its own)
    second = lane.start(
        ["agents"], "agents: ready", LEMONGRAPH_DATA_DIR=str(lane.root / "data-2"), **env
    )
    # (the first process's own word: with the second's assignment taken as the
    # sign instead, the call was let go before the first stopped the run, twice)
    first.wait_for("runs stopped", timeout=90)
    shared_out.set()
    wait_calls(app, 2)  # the run was stopped and resumed by the partition's owner
    first.stop(signal.SIGKILL)

    lane.wait_until("decisions", lambda rs: bool(applied(rs)), timeout=120)
    lane.wait_until("journal", ran_after_its_fact)  # its facts are on the inbox by then
    lane.drain()
    [fact] = applied(lane.read("decisions"))
    assert set(app.state.calls) == {fact["input"]["idempotency_key"]}
    journal = lane.wait_until(
        "journal",
        lambda rs: any(r["value"]["type"] == "journal.run" and r["value"]["replayed"] for r in rs),
    )
    assert any(r["value"].get("replayed") == 1 for r in journal)
    assert any(re.search(r", [1-9]\d* runs resumed", line) for line in second.lines), second.lines


def test_a_declined_booking_answered_with_a_200_records_no_meeting(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    """The red team's case (issue 27): the calendar answers HTTP 200 with
    ``{"ok": false, "error": "declined"}``. Nothing is recorded, the milestone
    stays open, and the journal says the call failed with what the calendar said
    (docs/agents.md, "What success is")."""
    with_catalog(lane)
    app = FastAPI()
    app.state.calls = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        app.state.calls.append(request.headers.get("idempotency-key"))
        return {"ok": False, "error": "declined"}

    script = StandinScript.model_validate(
        {
            "rules": [
                {"when": {"tool_failed": "schedule_meeting"}, "say": "The calendar declined."},
                *SCRIPT.model_dump(exclude_none=True, by_alias=True)["rules"],
            ]
        }
    )
    start_loop(lane, serve, script, CALENDAR_URL=serve(app))
    onboard(lane, "c-9")

    def told(records: list[dict[str, Any]]) -> bool:
        return any(r["value"]["text"] == "The calendar declined." for r in records)

    lane.wait_until("messages", told, timeout=120)
    runs = lane.wait_until(
        "journal", lambda rs: any(r["value"]["type"] == "journal.run" for r in rs)
    )
    tools = [r["value"] for r in runs if r["value"]["type"] == "journal.tool_call"]
    assert tools
    for tool in tools:
        assert (tool["tool"], tool["outcome"], tool["http_status"], tool["fact"]) == (
            "schedule_meeting",
            "failed",
            200,
            None,
        )
        assert '\\"error\\":\\"declined\\"' in tool["result"]
    # A fact, had one been made, is on the inbox (acknowledged) before the run's
    # journal.run record; decided before the end markers.
    lane.drain()
    assert [r for r in lane.read("inbox") if r["value"].get("source") == "tool"] == []
    assert applied(lane.read("decisions")) == []
    assert app.state.calls
    said = [m["value"]["text"] for m in lane.read("messages")]
    assert "Your meeting is booked." not in said
