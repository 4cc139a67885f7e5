"""Outputs over their bounds never wedge a job (issue 29, point 1), against a
real broker: the engine worker, the real ``lemongraph agents`` process, the
stand-in model over HTTP and a local tool endpoint, shared by the module's
tests (each test its own jobs). A 1.5 MB reply, 2 MB of tool-call arguments, a
3 MB tool answer and a task record whose checkpoint cannot be written: each
time the job still answers the person's next message (docs/agents.md, "Output
bounds")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request

from agents.dev.serving import AppThread
from agents.dev.standin import StandinScript, build_standin
from stream.runtime.broker import free_port
from tests.agents.test_conversation_walk import write
from tests.lanes import Lane

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

ADA = {"name": "Ada", "email": "ada@example.com"}
CATALOG = """\
integrations:
  email: {}
  desk: {tools: [book]}
agents:
  conversation: {instructions: Help the person.}
tools:
  book:
    description: Book a call.
    parameters:
      type: object
      properties: {when: {type: string}}
      required: [when]
    http: {url: "${DESK_URL}/book", method: POST}
    idempotent: true
    records: {fact: booked, properties: {when: "$.when"}}
    success: {path: "$.status", equals: confirmed}
"""
PLAYBOOK = """\
key: bounded
version: 1
instructions: Book a call, then keep talking.
milestones:
  - id: work
    instructions: Book a call with the person.
    condition: booked
    integrations: [desk, email]
  - id: chat
    needs: [work]
    instructions: Answer the person.
    condition: finished
    integrations: [email]
"""
#: 1.5 MB of text, 2 MB of arguments, 3 MB of tool answer.
HUGE_TEXT = "t" * 1_500_000
HUGE_ARGS = "a" * 2_000_000
HUGE_ANSWER = "p" * 3_000_000
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"last_message_contains": "huge text"}, "say": HUGE_TEXT},
            {"when": {"last_message_contains": "huge args"},
             "call": {"tool": "book", "args": {"when": HUGE_ARGS}}},
            {"when": {"last_message_contains": "book it"},
             "call": {"tool": "book", "args": {"when": "tomorrow 10:00"}}},
            {"when": {"tool_result": "book"}, "say": "Booked."},
            {"when": {"last_message_contains": "thanks"}, "say": "You are welcome."},
            {"when": {"last_message_contains": "are you there"}, "say": "Yes, here."},
            {"when": {"closing": True}, "say": "All done."},
            {"say": "Hello."},
        ]
    }
)  # fmt: skip


def desk() -> FastAPI:
    """Books, and answers with 3 MB of padding beside what it booked."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls.append(request.headers.get("idempotency-key"))
        return {"status": "confirmed", "when": body["when"], "padding": HUGE_ANSWER}

    return app


@pytest.fixture(scope="module")
def loop(module_lane: Lane) -> Iterator[tuple[Lane, FastAPI]]:
    """The module's worker and agents service on the stand-in and the desk."""
    tools = desk()
    servers = [
        AppThread(app, "127.0.0.1", free_port(), "test server").start()
        for app in (build_standin(SCRIPT), tools)
    ]
    model, url = (s.url for s in servers)
    (module_lane.playbooks / "catalog.yaml").write_text(CATALOG)
    (module_lane.playbooks / "bounded.yaml").write_text(PLAYBOOK)
    module_lane.start_worker()
    module_lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{model}/v1", OPENAI_API_KEY="sk-test",
        DESK_URL=url,
    )  # fmt: skip
    yield module_lane, tools
    for server in servers:
        server.stop()


def start(lane: Lane, key: str) -> None:
    lane.send({"type": "job.start", "key": key, "playbook_key": "bounded", "contacts": [ADA]})
    said(lane, key, "Hello.")


def said(lane: Lane, key: str, words: str, after: str | None = None) -> list[dict[str, Any]]:
    """The job's messages once the agent said ``words`` (after the person's
    message ``after``: a job's messages are on one partition, in order)."""

    def found(records: list[dict[str, Any]]) -> bool:
        ours = [r["value"] for r in records if r["value"]["job_key"] == key]
        ids = [m["message_id"] for m in ours]
        if after is not None:
            ours = ours[ids.index(after) + 1 :] if after in ids else []
        return any(m["direction"] == "out" and m["text"] == words for m in ours)

    records = lane.wait_until("messages", found, timeout=120)
    return [r["value"] for r in records if r["value"]["job_key"] == key]


def journal(lane: Lane, key: str) -> list[dict[str, Any]]:
    return [r["value"] for r in lane.read("journal") if r["key"] == key]


def runs_ended(lane: Lane, key: str, count: int) -> list[dict[str, Any]]:
    """The job's journal once ``count`` of its runs ended."""

    def ended(records: list[dict[str, Any]]) -> bool:
        runs = [r for r in records if r["key"] == key and r["value"]["type"] == "journal.run"]
        return len(runs) >= count

    return [r["value"] for r in lane.wait_until("journal", ended, timeout=120) if r["key"] == key]


def refused_reply(lane: Lane, key: str, ask: str) -> dict[str, Any]:
    """Start the job, ask (``m-1``) for what the stand-in answers too large; once
    its run ended, write again (``m-2``). The refused model call's record."""
    start(lane, key)
    write(lane, key, "m-1", ask)
    entries = runs_ended(lane, key, 2)
    assert [j["ended"] for j in entries if j["type"] == "journal.run"] == ["done", "model_error"]
    calls = [j for j in entries if j["type"] == "journal.model_call"]
    assert [c["outcome"] for c in calls] == ["ok", "too_large"]
    write(lane, key, "m-2", "are you there?")
    return calls[1]


def test_a_huge_reply_ends_its_run_journaled_and_the_job_answers_the_next_message(
    loop: tuple[Lane, FastAPI],
) -> None:
    lane, _ = loop
    refused = refused_reply(lane, "big-text", "huge text please")
    assert "1,500,000 bytes, over LEMONGRAPH_MAX_REPLY_BYTES" in refused["response"]
    messages = said(lane, "big-text", "Yes, here.", after="m-2")
    assert all(len(m["text"]) < 1000 for m in messages)  # the 1.5 MB text was never sent


def test_huge_tool_call_arguments_are_refused_and_the_job_answers_the_next_message(
    loop: tuple[Lane, FastAPI],
) -> None:
    lane, tools = loop
    booked = len(tools.state.calls)
    refused = refused_reply(lane, "big-args", "huge args please")
    assert "(tool-call arguments) is 2,000,0" in refused["response"]
    said(lane, "big-args", "Yes, here.", after="m-2")
    assert not [j for j in journal(lane, "big-args") if j["type"] == "journal.tool_call"]
    assert len(tools.state.calls) == booked  # nothing was called with 2 MB


def test_a_huge_tool_answer_still_records_its_fact_and_the_job_answers(
    loop: tuple[Lane, FastAPI],
) -> None:
    lane, tools = loop
    start(lane, "big-answer")
    booked = len(tools.state.calls)
    write(lane, "big-answer", "m-1", "book it")
    said(lane, "big-answer", "Booked.", after="m-1")
    # the booking's fact reached the job: decided, and the milestone done
    decisions = lane.wait_until(
        "decisions",
        lambda rs: any(r["key"] == "big-answer" and r["value"]["input"].get("action") == "booked"
                       for r in rs),
        timeout=120,
    )  # fmt: skip
    inputs = [r["value"]["input"] for r in decisions if r["key"] == "big-answer"]
    [fact] = [i for i in inputs if i.get("action") == "booked"]
    assert fact["properties"] == {"when": "tomorrow 10:00"}
    [tool] = [j for j in journal(lane, "big-answer") if j["type"] == "journal.tool_call"]
    assert (tool["outcome"], tool["fact"]) == ("done", "booked")
    assert len(tools.state.calls) == booked + 1
    write(lane, "big-answer", "m-2", "thanks")
    said(lane, "big-answer", "You are welcome.", after="m-2")


def test_a_record_whose_checkpoint_cannot_be_written_is_dead_lettered_and_the_job_goes_on(
    loop: tuple[Lane, FastAPI],
) -> None:
    """A task.opened whose subject alone is over the checkpoint's bound (another
    producer wrote it): dead-lettered byte for byte with the reason, and the
    next record of the same job is taken."""
    lane, _ = loop
    opened = {
        "type": "task.opened", "task_id": "poison/work", "job_key": "poison", "milestone": "work",
        "at": "2026-01-05T09:00:00Z", "instructions": "Do it.", "playbook_instructions": "",
        "integrations": ["email"], "deadline": "2026-01-08T09:00:00Z", "frontier": ["work"],
        "playbook_key": "bounded", "subject": {"blob": "s" * 950_000},
    }  # fmt: skip
    poison = orjson.dumps(opened)
    lane.produce([(b"poison", poison)], topic="tasks")
    healthy = {**opened, "subject": {}}
    lane.produce([(b"poison", orjson.dumps(healthy))], topic="tasks")
    said(lane, "poison", "Hello.")
    [letter] = [r for r in lane.read("deadletter") if r["key"] == "poison"]
    assert letter["value"]["value_text"].encode() == poison
    assert "checkpoint" in letter["value"]["reason"]
