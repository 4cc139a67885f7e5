"""The conversation a person sees, walked over a real broker as ``lemongraph
dev`` runs it: the engine worker, the ``lemongraph agents`` process, the
stand-in model with its built-in policy and the demo tools, on the bundled
onboarding playbook. Read back from ``messages``: one agent message per
frontier change (the README's ``id_uploaded`` opens two tasks in one decision),
and a reply after the person's last message, the one that completes the job
(docs/agents.md, "Runs" and "The closing turn")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
from agents.dev.serving import AppThread
from agents.dev.standin import build_standin
from stream.runtime.broker import free_port
from tests.agents.test_service import with_catalog
from tests.lanes import Lane

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

ADA = {"name": "Ada", "email": "ada@example.com"}


class HeldModel:
    """The stand-in, except that the CRM agent's answer to its tool result
    (``activate_account``'s: only job w-2 calls it) waits until the agents service has
    taken w-2's ``task.closed`` of activateAccount: the task closes while the
    run is still going, as it does when the engine is quick (the README's step
    4), and the conversation agent's next turn finds nothing open."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.inner = build_standin()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message)
            if not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in chunks)
        answered = b"function_call_output" in body or b'"role":"tool"' in body
        if b"Agent: crm_agent" in body and b"activate_account" in body and answered:
            await asyncio.to_thread(self.closed_and_taken)
        replay = iter(chunks)

        async def again() -> Any:
            return next(replay, {"type": "http.disconnect"})

        await self.inner(scope, again, send)

    def closed_and_taken(self) -> None:
        def closed(records: list[dict[str, Any]]) -> bool:
            return any(r["value"].get("task_id") == "w-2/activateAccount"
                       and r["value"]["type"] == "task.closed" for r in records)  # fmt: skip

        records = [r for r in self.lane.wait_until("tasks", closed) if closed([r])]
        self.lane.wait_handled(f"{self.lane.prefix}agents", "tasks", records)


@pytest.fixture(scope="module")
def walk(module_lane: Lane) -> Iterator[Lane]:
    """The module's worker and agents service, on the stand-in's built-in
    policy (no script, as ``dev`` runs it) and the demo tools."""
    servers = [
        AppThread(app, "127.0.0.1", free_port(), "test server").start()
        for app in (HeldModel(module_lane), build_demo_tools())
    ]
    model, tools = (s.url for s in servers)
    with_catalog(module_lane)
    module_lane.start_worker()
    module_lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{model}/v1", OPENAI_API_KEY="sk-test",
        **{var: f"{tools}{path}" for var, path in TOOL_URLS.items()},
    )  # fmt: skip
    yield module_lane
    for server in servers:
        server.stop()


def start(lane: Lane, key: str, *events: str) -> None:
    lane.send(
        {"type": "job.start", "key": key, "playbook_key": "onboarding", "contacts": [ADA]},
        *({"type": "event", "key": key, "action": a, "idempotency_key": f"{key}-{a}"}
          for a in events),
    )  # fmt: skip


def write(lane: Lane, key: str, message_id: str, text: str) -> None:
    """What Ada writes, as the gateway or mail ingress puts it on ``messages``."""
    record = {
        "type": "message", "job_key": key, "message_id": message_id, "direction": "in",
        "channel": "email", "contact": ADA["email"], "text": text, "at": "2026-01-05T09:05:00Z",
    }  # fmt: skip
    lane.produce([(key.encode(), orjson.dumps(record))], topic="messages")


def messages(lane: Lane, key: str) -> list[dict[str, Any]]:
    return [r["value"] for r in lane.read("messages") if r["value"]["job_key"] == key]


def said_to(lane: Lane, key: str, words: str) -> None:
    lane.wait_until(
        "messages",
        lambda rs: any(r["value"]["job_key"] == key and words in r["value"]["text"] for r in rs),
        timeout=120,
    )


def said_after(lane: Lane, key: str, message_id: str, words: str) -> list[dict[str, Any]]:
    """The job's messages once the agent said ``words`` after ``message_id``
    (a job's messages are on one partition, in order)."""

    def found(records: list[dict[str, Any]]) -> bool:
        ours = [r["value"] for r in records if r["value"]["job_key"] == key]
        ids = [m["message_id"] for m in ours]
        after = ours[ids.index(message_id) + 1 :] if message_id in ids else []
        return any(m["direction"] == "out" and words in m["text"] for m in after)

    lane.wait_until("messages", found, timeout=120)
    return messages(lane, key)


def test_one_decision_opening_two_tasks_is_one_message(walk: Lane) -> None:
    start(walk, "w-1")
    said_to(walk, "w-1", "collectIdentity")
    # id_uploaded closes collectIdentity and opens bookCall and selfServe: one decision
    walk.send({"type": "event", "key": "w-1", "action": "id_uploaded", "idempotency_key": "w-1-id"})
    said_to(walk, "w-1", "bookCall")
    # The end marker: Ada's message, answered after whatever the agent had owed.
    write(walk, "w-1", "w-1-in-1", "Please book a call tomorrow at 10:00")
    said = said_after(walk, "w-1", "w-1-in-1", "schedule_meeting confirmed it")
    out = [m for m in said if m["direction"] == "out"]
    assert [m["text"] for m in out] == [
        "Hello! Let us work on collectIdentity together.",
        "Hello! Let us work on bookCall together.",
        "Done: schedule_meeting confirmed it.",
    ]
    assert {m["contact"] for m in out} == {ADA["email"]}


def test_the_message_that_completes_the_job_is_answered(walk: Lane) -> None:
    start(walk, "w-2", "id_uploaded", "self_service_completed")
    said_to(walk, "w-2", "activateAccount")
    write(walk, "w-2", "w-2-in-1", "Yes, please activate my account")
    decisions = walk.wait_until(
        "decisions",
        lambda rs: any(r["value"]["job_key"] == "w-2" and r["value"]["status"] == "done"
                       for r in rs),
        timeout=120,
    )  # fmt: skip
    assert any(d["value"]["job_key"] == "w-2" for d in decisions)
    # Ada is told, after her last message, what was done, on her channel.
    said = said_after(walk, "w-2", "w-2-in-1", "")
    ids = [m["message_id"] for m in said]
    [reply, *more] = [m for m in said[ids.index("w-2-in-1") + 1 :] if m["direction"] == "out"]
    assert more == []
    assert (reply["contact"], reply["channel"]) == (ADA["email"], "email")
    assert reply["text"] == "All done: collectIdentity, selfServe, activateAccount. Thank you!"
    runs = [
        r["value"] for r in walk.read("journal")
        if r["value"]["job_key"] == "w-2" and r["value"]["type"] == "journal.run"
    ]  # fmt: skip
    # the run the person's message owed ended with the tasks closed; the closing
    # turn is a run of its own, whose message it is
    assert [r["ended"] for r in runs[-2:]] == ["task_closed", "closing"]
    assert reply["message_id"] == f"{runs[-1]['run_id']}.1"
    texts = [m["text"] for m in said if m["direction"] == "out"]
    assert len(texts) == len(set(texts)), texts  # never the same message twice
