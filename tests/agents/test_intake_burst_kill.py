"""The real ``lemongraph agents`` process taking records in batches
(docs/agents.md, "Taking a burst"): a second process joins its group under
steady traffic and the partitions are shared out (a rebalance waits for every
record handed out to be acknowledged, so a batch must never wait open); and a
burst of tasks, SIGKILLed part way through it and started again: every task is
answered, and each job once (docs/agents.md, "Crash safety"). The kill
finds most runs owed and not yet run (checkpointed at their batch's end, their
records acknowledged) and, when it falls inside a batch, records taken but not
yet acknowledged, which the restarted process takes again: a task taken again
owes nothing new."""

from __future__ import annotations

import asyncio
import signal
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from agents.dev.standin import StandinScript, build_standin
from stream.runtime.kafka import new_consumer
from tests.lanes import Lane, wait_for
from topics import TaskOpenedRecord, encode

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

TASKS = 300
SCRIPT = StandinScript.model_validate({"rules": [{"say": "Hello, we are on it."}]})


CATALOG = "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n"


def opened(key: str) -> bytes:
    record = TaskOpenedRecord(
        task_id=f"{key}/first", job_key=key, milestone="first", at="2026-01-05T09:00:00Z",
        instructions="Greet the customer.", playbook_instructions="Be brief.",
        integrations=["email"], deadline="2026-01-08T09:00:00Z", frontier=["first"],
        playbook_key="p",
    )  # fmt: skip
    return encode(record)


class Slowed:
    """The stand-in, each answer 40 ms late (as a model is, only less): four runs
    at once take the burst in seconds, so the kill finds most of it taken and
    owed, not yet answered."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:  # fmt: skip
        if scope["type"] == "http":
            await asyncio.sleep(0.04)
        await self.app(scope, receive, send)


def produced(lane: Lane, topic: str) -> int:
    """The records on ``topic`` so far, from its partitions' end offsets."""
    name = lane.topics.name(topic)

    async def go() -> int:
        consumer = new_consumer(lane.bootstrap)
        await consumer.start()
        try:
            count = int(lane.env()["LEMONGRAPH_PARTITIONS"])
            ends = await consumer.end_offsets([TopicPartition(name, p) for p in range(count)])
            return sum(ends.values())
        finally:
            await consumer.stop()

    return asyncio.run(go())


def setting_up(lane: Lane, serve: Callable[[Any], str]) -> dict[str, str]:
    """The catalog in the lane's playbooks folder; the environment of an agents
    process on the slowed stand-in, four runs at once."""
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    return {
        "OPENAI_BASE_URL": f"{serve(Slowed(build_standin(SCRIPT)))}/v1",
        "OPENAI_API_KEY": "sk-t",
        "LEMONGRAPH_AGENT_CONCURRENCY": "4",
    }


def replies(messages: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per job, the ids of the messages the agent sent (a re-published one has
    the same id)."""
    out: dict[str, set[str]] = {}
    for record in messages:
        value = record["value"]
        if value.get("direction") == "out":
            out.setdefault(value["job_key"], set()).add(value["message_id"])
    return out


def test_a_burst_cut_by_sigkill_is_answered_once_per_job(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    env = setting_up(lane, serve)
    agents = lane.start(["agents"], "agents: ready", **env)
    keys = [f"burst-{n:03d}" for n in range(TASKS)]
    lane.produce([(key.encode(), opened(key)) for key in keys], topic="tasks")
    # Killed part way: some jobs answered, most not yet.
    # (Reading the topic would wait for the burst to end: its end offsets do not.)
    wait_for(lambda: produced(lane, "messages") >= 20, 120, 0.05, "20 replies")
    agents.stop(signal.SIGKILL)
    answered_before = len(replies(lane.read("messages")))
    assert answered_before < TASKS, "the kill came after the whole burst: nothing was cut"
    lane.start(["agents"], "agents: ready", **env)
    messages = lane.wait_until("messages", lambda rs: set(replies(rs)) >= set(keys), timeout=180)
    sent = replies(messages)
    twice = {job: ids for job, ids in sent.items() if len(ids) != 1}
    assert twice == {}, f"jobs answered more than once: {sorted(twice.items())[:5]}"
    assert lane.read("deadletter") == []


def test_a_second_process_joins_under_steady_traffic(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    env = setting_up(lane, serve)
    first = lane.start(["agents"], "agents: ready", **env)
    stop = threading.Event()

    def feed() -> None:  # more tasks than the service answers: its queue is never empty
        n = 0
        while not stop.is_set():
            keys = [f"steady-{n + i:06d}" for i in range(100)]
            lane.produce([(k.encode(), opened(k)) for k in keys], topic="tasks")
            n += len(keys)
            time.sleep(0.05)

    feeder = threading.Thread(target=feed, name="feed", daemon=True)
    feeder.start()
    try:
        wait_for(lambda: produced(lane, "conversations") >= 200, 60, 0.05, "200 checkpoints")
        folder = tempfile.mkdtemp(dir=lane.root)
        second = lane.start(["agents"], "agents: ready", **env, LEMONGRAPH_DATA_DIR=folder)
        # The first gives up some of its partitions, the second takes them.
        wait_for(
            lambda: (
                sum("assigned" in line for line in first.lines) >= 2
                and any("assigned" in line for line in second.lines)
            ),
            60,
            0.2,
            "the partitions shared out between the two processes",
        )
    finally:
        stop.set()
        feeder.join(30)
    assert not any("wait_empty" in line for line in first.lines)
