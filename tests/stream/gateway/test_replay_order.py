"""The order a gateway re-reads its topics in after a restart
(stream/gateway/readmodels/follow.py, "The order of the catch-up"): an answer on
``messages`` is never applied before the question it answers on ``journal``,
however the fetches interleave the two topics, so an answered question does
not stand open after a restart."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import httpx
import pytest
from aiokafka.structs import TopicPartition

from compiler import JobGraph, Start, compile_playbook, from_iso
from stream.engine.store import NOTHING_APPLIED, encode_stored
from stream.gateway.readmodels import follow
from stream.gateway.readmodels.follow import Replay
from tests.stream.gateway.conftest import Lane, launch_gateway
from topics import JournalInterrupt, MessageRecord, PlaybookRecord, encode

pytestmark = [pytest.mark.timeout(180)]

KEY = "replay-1"
AT = "2026-12-04T10:00:00Z"
#: Journal records before the question: more than one fetch of the partition
#: holds (1 MiB), so the answer on ``messages`` arrives fetches ahead of it.
FILLER = 4000


def interrupt(interrupt_id: str, status: Literal["open", "expired"]) -> JournalInterrupt:
    return JournalInterrupt(
        job_key=KEY, run_id=f"{KEY}#1", flow="approve-refund", node="ask", kind="ask",
        interrupt_id=interrupt_id, at=AT, status=status,
        question="Which order is it about? " + "x" * 200,
    )  # fmt: skip


def open_questions(client: httpx.Client) -> list[str]:
    response = client.get(f"/v1/jobs/{KEY}/interrupts")
    assert response.status_code == 200, response.text
    return [i["interrupt_id"] for i in response.json()["interrupts"]]


@pytest.mark.broker
def test_an_answered_question_stays_answered_after_a_restart(module_lane: Lane) -> None:
    lane = module_lane
    # The job, as a worker stores it (the gateway builds its view from its state).
    playbook = compile_playbook(
        {"key": "replay-order", "version": 1,
         "milestones": [{"id": "ask", "condition": "answered WITHIN 7d"}]}
    )  # fmt: skip
    registered = PlaybookRecord(key="replay-order", version=1, spec=playbook.to_json())
    lane.produce([(b"replay-order@v1", encode(registered))], "playbooks")
    state = JobGraph(playbook).next(None, from_iso(AT), Start(KEY, "replay-order")).state
    assert state is not None
    row = encode_stored(0, NOTHING_APPLIED, state)
    lane.produce([(KEY.encode(), row)], "engine-jobstate-changelog")
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


JOURNAL, MESSAGES = TopicPartition("journal", 0), TopicPartition("messages", 0)


class _Catchup:
    """A :class:`Replay` of journal and messages (at most 2 records held per
    partition), fed fetches of records with the timestamps given."""

    def __init__(self, high: dict[TopicPartition, int]) -> None:
        self.replay = Replay([JOURNAL, MESSAGES], ["journal", "messages"])
        self.consumer = _Consumer(high)
        self.taken: list[tuple[str, int]] = []

    def take(self, tp: TopicPartition, key: bytes | None, value: bytes | None, at: int) -> None:
        self.taken.append((tp.topic, at))

    def fetch(self, tp: TopicPartition, *stamps: int) -> None:
        start = self.consumer.read.get(tp, 0)
        records = [_Record(start + n, stamp) for n, stamp in enumerate(stamps)]
        self.consumer.read[tp] = start + len(records)
        self.replay.add(tp, records)
        asyncio.run(self.replay.release(self.consumer, self.take))


@pytest.fixture
def held_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "REPLAY_HELD", 2)


@pytest.mark.usefixtures("held_two")
def test_the_catch_up_takes_records_in_timestamp_order_across_partitions() -> None:
    catchup = _Catchup(high={JOURNAL: 4, MESSAGES: 1})
    # The answer (at 30) is fetched first: it waits while the journal may
    # still hold older records.
    catchup.fetch(MESSAGES, 30)
    assert catchup.taken == []
    catchup.fetch(JOURNAL, 10, 20)
    assert catchup.taken == [("journal", 0), ("journal", 1)]
    assert catchup.consumer.paused == set()  # one held: under the bound
    catchup.fetch(JOURNAL, 25, 40)  # the question at 25, then a later record
    assert catchup.taken[2:] == [("journal", 2), ("messages", 0), ("journal", 3)]
    assert catchup.replay.holding == 0


@pytest.mark.usefixtures("held_two")
def test_a_partition_holding_too_much_is_paused_until_the_others_catch_up() -> None:
    catchup = _Catchup(high={JOURNAL: 3, MESSAGES: 1})
    catchup.fetch(JOURNAL, 10, 11, 12)
    assert catchup.taken == []  # messages not read yet: it may hold older records
    assert catchup.consumer.paused == {JOURNAL}  # fetched no further meanwhile
    catchup.fetch(MESSAGES, 99)
    assert catchup.taken == [("journal", 0), ("journal", 1), ("journal", 2), ("messages", 0)]
    assert catchup.consumer.paused == set()
    assert catchup.replay.holding == 0
