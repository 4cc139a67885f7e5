"""Following topics from their beginning: the one loop that feeds the gateway's
read models (stream/gateway/readmodels/jobs.py for jobs, stream/gateway/readmodels/schedules.py
for schedules).

A read model reads its topics from offset 0 with a consumer of its own (no
group) and keeps following until the gateway stops. It is *caught up* once
every partition's position has reached the high watermark the fetches report.
It also notices a log that went backwards (docs/operations.md, "When the broker
was reset"): an offset delivered again, or a high watermark below what was read.
What it holds then no longer matches the broker, so :attr:`Followed.reset`
names the problem and ``GET /healthz`` answers 503 until the gateway restarts.

**The order of the catch-up.** A model follows several topics, and what one
says depends on another: an answer on ``messages`` closes the question a
``journal.interrupt`` opened, a run on ``schedule-runs`` belongs to its
definition. Fetches return partitions in no set order, so read as they come an
answer could be applied before its question, which would stand open until a
later record closed it again (or for good). Until it has caught up, a model
applies the records of all its partitions merged by record timestamp
(:class:`Replay`): a record is taken only once every partition has shown what
it holds up to that instant, and a partition holding ``REPLAY_HELD`` records
not yet taken is paused so that the others catch up with it (memory stays
bounded). Caught up, records are taken as they arrive: live, they arrive in the
order they were written.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Callable
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from stream.runtime.kafka import KafkaSecurity, caught_up, new_consumer, topics_metadata

__all__ = ["REPLAY_HELD", "Followed", "Replay", "assign_from_start"]

log = logging.getLogger("lemongraph.gateway")

#: Records of one partition held during the catch-up before it is paused.
REPLAY_HELD = 5000

Record: TypeAlias = ConsumerRecord[bytes, bytes]


class Followed:
    """A read model fed by :meth:`follow`; a subclass names its topics and
    takes their records."""

    def __init__(self) -> None:
        self.caught_up = False
        self.following = False
        #: Set when a followed log went backwards (the broker was reset, or a
        #: topic recreated): what this model holds no longer matches the broker.
        self.reset: str | None = None
        self._next: dict[TopicPartition, int] = {}

    # -- what a read model says ------------------------------------------------------

    def followed(self) -> list[str]:
        """The topics it reads."""
        raise NotImplementedError

    def take(self, tp: TopicPartition, key: bytes | None, value: bytes | None, offset: int) -> None:
        """One record read."""
        raise NotImplementedError

    def assigned(self, tps: list[TopicPartition]) -> None:
        """Its partitions are known (before the first record)."""

    def between(self) -> None:
        """Called before every fetch."""

    def caught_up_line(self) -> str:
        """What is said once it has caught up."""
        raise NotImplementedError

    # -- the loop ------------------------------------------------------------------------

    def _check_order(self, tp: TopicPartition, offset: int, say: Callable[[str], None]) -> None:
        expected = self._next.get(tp, 0)
        if offset < expected:
            self._went_back(tp, f"it delivered offset {offset} again", say)
        self._next[tp] = max(expected, offset + 1)

    def _went_back(self, tp: TopicPartition, what: str, say: Callable[[str], None]) -> None:
        if self.reset is not None:
            return
        self.reset = (
            f"{tp.topic} partition {tp.partition} was reset or recreated: this gateway had read "
            f"it up to offset {self._next.get(tp, 0) - 1}, but {what}. Restart the gateway "
            "(and see docs/operations.md, 'When the broker was reset')"
        )
        say(f"gateway: {self.reset}")

    async def follow(
        self,
        bootstrap: str,
        security: KafkaSecurity,
        stopping: asyncio.Event,
        say: Callable[[str], None] = log.info,
    ) -> None:
        """Read the topics from the beginning and keep following until
        ``stopping`` is set (``security``: the gateway's settings', as its
        producer has them)."""
        consumer = new_consumer(bootstrap, security, offsets="earliest")
        await consumer.start()
        try:
            tps = await assign_from_start(consumer, self.followed(), stopping)
            if not tps:
                return
            self.assigned(tps)
            self.following = True
            replay = Replay(tps, self.followed())
            while not stopping.is_set():
                self.between()
                batches = await consumer.getmany(timeout_ms=200, max_records=2000)
                for tp, records in batches.items():
                    for r in records:
                        self._check_order(tp, r.offset, say)
                    if self.caught_up and not replay.holding:
                        for r in records:
                            self.take(tp, r.key, r.value, r.offset)
                    else:
                        replay.add(tp, records)
                if replay.holding:
                    await replay.release(consumer, self.take)
                for tp in tps:
                    high = consumer.highwater(tp)
                    if high is not None and high < self._next.get(tp, 0):
                        self._went_back(tp, f"its log now ends at offset {high}", say)
                now_caught_up = await caught_up(consumer, tps)
                if now_caught_up and not self.caught_up:
                    say(self.caught_up_line())
                self.caught_up = now_caught_up
        finally:
            self.following = False
            await consumer.stop()


class Replay:
    """The catch-up's records, taken across partitions in timestamp order (see
    the module's docstring)."""

    def __init__(self, tps: list[TopicPartition], topics: list[str]) -> None:
        self.held: dict[TopicPartition, deque[Record]] = {tp: deque() for tp in tps}
        #: Ties of timestamp go by topic in the order the model names them.
        self._rank = {tp: (topics.index(tp.topic), tp.partition) for tp in tps}
        self._paused: set[TopicPartition] = set()
        self.holding = 0  # records held

    def add(self, tp: TopicPartition, records: list[Record]) -> None:
        self.held[tp].extend(records)
        self.holding += len(records)

    async def release(
        self,
        consumer: AIOKafkaConsumer,
        take: Callable[[TopicPartition, bytes | None, bytes | None, int], None],
    ) -> None:
        """Take every record no partition can still precede: stop at the first
        partition read empty that may hold more (it may hold older records)."""
        done = {tp for tp in self.held if await _read_to_end(consumer, tp)}
        heads = [(q[0].timestamp, self._rank[tp], tp) for tp, q in self.held.items() if q]
        heapq.heapify(heads)
        starved = any(not q and tp not in done for tp, q in self.held.items())
        while heads and not starved:
            _, _, tp = heapq.heappop(heads)
            queue = self.held[tp]
            r = queue.popleft()
            self.holding -= 1
            take(tp, r.key, r.value, r.offset)
            if queue:
                heapq.heappush(heads, (queue[0].timestamp, self._rank[tp], tp))
            elif tp not in done:
                starved = True
        full = {tp for tp, q in self.held.items() if len(q) >= REPLAY_HELD}
        if full - self._paused:
            consumer.pause(*(full - self._paused))
        if self._paused - full:
            consumer.resume(*(self._paused - full))
        self._paused = full


async def _read_to_end(consumer: AIOKafkaConsumer, tp: TopicPartition) -> bool:
    """Has ``tp`` been fetched up to its high watermark (as fetches report it)?"""
    high = consumer.highwater(tp)
    return high is not None and await consumer.position(tp) >= high


async def assign_from_start(
    consumer: AIOKafkaConsumer, names: list[str], stopping: asyncio.Event
) -> list[TopicPartition]:
    """Wait until every topic of ``names`` exists, then assign all their
    partitions to ``consumer`` from the beginning; [] when ``stopping`` came
    first."""
    while not stopping.is_set():
        found = await topics_metadata(consumer._client, names)  # stream/runtime/kafka.py
        if all(found.get(n) for n in names):
            tps = [TopicPartition(n, p) for n in names for p in found[n]]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            return tps
        await asyncio.sleep(0.5)
    return []
