"""The order a gateway re-reads its topics in after a restart
(stream/gateway/follow.py, "The order of the catch-up"): an answer on
``messages`` is never applied before the question it answers on ``journal``,
however the fetches interleave the two topics, so an answered question does
not stand open after a restart."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx
import pytest
from aiokafka.structs import TopicPartition

from stream.gateway import follow
from stream.gateway.follow import Replay
from tests.stream.gateway.conftest import Lane, launch_gateway, wait_for
from topics import JobSnapshot, JournalInterrupt, MessageRecord, encode

pytestmark = [pytest.mark.timeout(180)]

KEY = "replay-1"
AT = "2026-12-04T10:00:00Z"
#: Journal records before the question: more than one fetch of the partition
#: holds (1 MiB), so the answer on ``messages`` arrives fetches ahead of it.
FILLER = 4000


def interrupt(interrupt_id: str, status: str) -> JournalInterrupt:
    return JournalInterrupt(
        job_key=KEY, run_id=f"{KEY}#1", flow="approve-refund", node="ask", kind="ask",
        interrupt_id=interrupt_id, at=AT, status=status,  # type: ignore[arg-type]
        question="Which order is it about? " + "x" * 200,
    )  # fmt: skip


def open_questions(client: httpx.Client) -> list[str]:
    response = client.get(f"/v1/jobs/{KEY}/interrupts")
    assert response.status_code == 200, response.text
    return [i["interrupt_id"] for i in response.json()["interrupts"]]


@pytest.mark.broker
def test_an_answered_question_stays_answered_after_a_restart(module_lane: Lane) -> None:
    lane = module_lane
    snapshot = JobSnapshot(
        key=KEY, status="running", playbook_key="onboarding", playbook_version=1, seq=1,
        started_at=AT, updated_at=AT, milestones={}, detail={}, frontier=[], timers=[],
        state_hash="0",
    )  # fmt: skip
    lane.produce([(KEY.encode(), encode(snapshot))], "jobs")
    # Questions that expired, then the one answered below (no journal record
    # says it was answered: the answer on messages is all that closes it).
    filler = [(KEY.encode(), encode(interrupt(f"old-{n}", "expired"))) for n in range(FILLER)]
    lane.produce([*filler, (KEY.encode(), encode(interrupt("q-1", "open")))], "journal")
    answer = MessageRecord(
        job_key=KEY, message_id="answer-q-1", direction="in", channel="web", text="A-17",
        at=AT, interrupt_id="q-1", answer="A-17",
    )  # fmt: skip
    lane.produce([(KEY.encode(), encode(answer))], "messages")
    for _restart in range(2):
        gateway = launch_gateway(lane)  # healthy: caught up with every topic
        try:
            with gateway.client(gateway.token()) as client:
                wait_for(lambda c=client: c.get(f"/v1/jobs/{KEY}").status_code == 200, what="job")
                assert open_questions(client) == []
        finally:
            gateway.stop()


@dataclass
class _Record:
    offset: int
    timestamp: int
    key: bytes | None = None
    value: bytes | None = None


@dataclass
class _Consumer:
    """What :class:`Replay` asks of a consumer: how far each partition was read."""

    high: dict[TopicPartition, int]
    read: dict[TopicPartition, int] = field(default_factory=dict)
    paused: set[TopicPartition] = field(default_factory=set)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        return self.read.get(tp, 0)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)


def test_the_catch_up_takes_records_in_timestamp_order_across_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal, messages = TopicPartition("journal", 0), TopicPartition("messages", 0)
    monkeypatch.setattr(follow, "REPLAY_HELD", 2)
    replay = Replay([journal, messages], ["journal", "messages"])
    consumer = _Consumer(high={journal: 4, messages: 1})
    taken: list[tuple[str, int]] = []

    def take(tp: TopicPartition, key: bytes | None, value: bytes | None, offset: int) -> None:
        taken.append((tp.topic, offset))

    async def fetch(tp: TopicPartition, *stamps: int) -> None:
        start = consumer.read.get(tp, 0)
        records = [_Record(start + n, stamp) for n, stamp in enumerate(stamps)]
        consumer.read[tp] = start + len(records)
        replay.add(tp, records)  # type: ignore[arg-type]
        await replay.release(consumer, take)  # type: ignore[arg-type]

    async def run() -> None:
        # The answer (at 30) is fetched first: it waits while the journal may
        # still hold older records.
        await fetch(messages, 30)
        assert taken == []
        await fetch(journal, 10, 20)
        assert taken == [("journal", 0), ("journal", 1)]
        assert consumer.paused == set()  # one held: under the bound
        await fetch(journal, 25, 40)  # the question at 25, then a later record
        assert taken[2:] == [("journal", 2), ("messages", 0), ("journal", 3)]
        assert replay.holding == 0

    asyncio.run(run())


def test_a_partition_holding_too_much_is_paused_until_the_others_catch_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = TopicPartition("journal", 0), TopicPartition("messages", 0)
    monkeypatch.setattr(follow, "REPLAY_HELD", 2)
    replay = Replay([a, b], ["journal", "messages"])
    consumer = _Consumer(high={a: 3, b: 1}, read={a: 3})
    replay.add(a, [_Record(n, 10 + n) for n in range(3)])  # type: ignore[list-item]

    async def run() -> None:
        await replay.release(consumer, lambda *_: None)  # type: ignore[arg-type]
        assert consumer.paused == {a}  # b not read yet: a waits, fetched no further
        consumer.read[b] = 1
        replay.add(b, [_Record(0, 99)])  # type: ignore[list-item]
        await replay.release(consumer, lambda *_: None)  # type: ignore[arg-type]
        assert consumer.paused == set()
        assert replay.holding == 0

    asyncio.run(run())
