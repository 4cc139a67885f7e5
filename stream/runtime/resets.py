"""Is a log still the one a process's state was built from?

A worker skips an inbox record whose offset is at or below its partition's
watermark: it was applied before the last commit. The agents service reads the
``conversations`` changelog back from where its store last read it. Both are
only right while the log is the same log. A broker that comes back empty (the
embedded broker forgets everything when it stops), or a topic deleted and
recreated, starts its offsets again at 0, and every new record would be skipped
as a "re-delivery" (or never read back) without a trace. So whenever partitions
are assigned, the process reads the record at each watermark back from the
broker and compares it with what it stored (offset, timestamp, crc32 of key and
value, and the cluster id: a :class:`Watermark`, the engine's ``Mark``). A log
that ends before the watermark, or holds another record there, or a broker of
another cluster, is a reset (docs/operations.md, "When the broker was reset"):
the worker stops with an error naming the partition and the offsets, and
decides nothing from it; the agents service forgets what its store holds of
that partition and reads it again (its store is a copy of the changelog).

Between assignments, more checks run: the worker looks for offsets that go
back before every batch (``Engine.rewound``), and :class:`ClusterWatch` asks
the broker for its cluster id (before every batch of the worker, every record
of the agents service), which the embedded broker makes new at every start: a
broker that restarted empty is noticed at the first record read from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.structs import TopicPartition

from stream.runtime.kafka import KafkaSecurity, client_kwargs, cluster_id_of, new_consumer

__all__ = ["ClusterWatch", "LogReset", "Watermark", "find_resets", "fingerprint"]


class Watermark(Protocol):
    """The last record a process took of a partition, and what identifies it
    (the worker's is ``stream.engine.batch.Mark``)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ms(self) -> int: ...  # -1: not known
    @property
    def fingerprint(self) -> int: ...  # :func:`fingerprint` of key and value; -1: not known
    @property
    def cluster(self) -> str: ...  # the broker's cluster id; "": not known


def fingerprint(key: bytes | None, value: bytes | None) -> int:
    """crc32 of a record's key and value."""
    return zlib.crc32(value or b"", zlib.crc32(key or b"\x00"))


@dataclass(frozen=True)
class LogReset:
    """A partition whose log is not the one a process's state was built from
    (its ``str`` says it in the worker's words)."""

    topic: str
    partition: int
    applied: int  # the last offset the state applied (read)
    found: str  # what the broker has instead, in words

    def __str__(self) -> str:
        return (
            f"{self.topic} partition {self.partition} was reset or recreated: this worker's "
            f"state has applied it up to offset {self.applied}, but {self.found}. Records "
            "there now would be skipped as re-deliveries, so none is decided: see "
            "docs/operations.md, 'When the broker was reset'"
        )


async def find_resets(
    bootstrap: str,
    topic: str,
    marks: Mapping[int, Watermark],
    cluster: str,
    timeout: float = 15.0,
    *,
    security: KafkaSecurity,
    compacted: bool = False,
) -> list[LogReset]:
    """The partitions of ``topic`` whose log does not hold, at the watermark
    ``marks`` gives, the record that was applied there (or that were applied
    from another cluster than ``cluster``). Of a ``compacted`` topic, a log that
    holds a later record instead is not a reset (compaction keeps each key's
    latest record only), one that ends before the watermark or holds another
    record there is. Raises ``TimeoutError`` when the broker does not answer in
    ``timeout`` seconds."""
    pending = {p: m for p, m in marks.items() if m.offset >= 0}
    found = _other_cluster(topic, pending, cluster)
    if not pending:
        return found
    consumer = new_consumer(bootstrap, security, offsets="none", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tps = {p: TopicPartition(topic, p) for p in pending}
        consumer.assign(list(tps.values()))
        await _seek_to_marks(consumer, tps, pending)
        found += await _read_at_marks(consumer, topic, tps, pending, timeout, compacted)
    finally:
        await consumer.stop()
    return sorted(found, key=lambda r: r.partition)


def _other_cluster(topic: str, pending: dict[int, Watermark], cluster: str) -> list[LogReset]:
    """The partitions applied from another cluster than ``cluster``: reset
    without reading them (they leave ``pending``)."""
    found: list[LogReset] = []
    for p, mark in sorted(pending.items()):
        if mark.cluster and cluster and mark.cluster != cluster:
            what = f"the broker is now cluster {cluster!r}, not {mark.cluster!r}"
            found.append(LogReset(topic, p, mark.offset, what))
            del pending[p]
    return found


async def _seek_to_marks(
    consumer: AIOKafkaConsumer, tps: dict[int, TopicPartition], pending: dict[int, Watermark]
) -> None:
    """Seek each pending partition to its watermark; one whose log now starts
    past it leaves ``pending``."""
    starts = await consumer.beginning_offsets(list(tps.values()))
    for p in list(pending):
        if starts[tps[p]] > pending[p].offset:
            # Retention removed what was applied: every record left is newer
            # than the watermark, so none can be skipped.
            del pending[p]
        else:
            consumer.seek(tps[p], pending[p].offset)


async def _read_at_marks(
    consumer: AIOKafkaConsumer,
    topic: str,
    tps: dict[int, TopicPartition],
    pending: dict[int, Watermark],
    timeout: float,
    compacted: bool,
) -> list[LogReset]:
    """Read the record at each pending partition's watermark until none is
    pending; the resets found on the way."""
    found: list[LogReset] = []
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            names = ", ".join(str(p) for p in sorted(pending))
            raise TimeoutError(f"could not read {topic} partitions {names} to check them")
        try:
            batches = await consumer.getmany(
                *(tps[p] for p in pending), timeout_ms=200, max_records=1
            )
        except OffsetOutOfRangeError as exc:
            found += await _out_of_range(consumer, topic, pending, exc)
            await asyncio.sleep(0.05)
            continue
        found += _first_records_differ(topic, pending, batches, compacted)
        found += _logs_ended(consumer, topic, tps, pending)
    return found


async def _out_of_range(
    consumer: AIOKafkaConsumer,
    topic: str,
    pending: dict[int, Watermark],
    exc: OffsetOutOfRangeError,
) -> list[LogReset]:
    """The partitions whose watermark the broker called out of range leave
    ``pending``: a reset when their log ends before it."""
    out = [
        tp
        for tp in (exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {})
        if tp.partition in pending
    ]
    # Out of range below the log's start is retention that ran since
    # the first look, not a reset: every record left is newer.
    starts = await consumer.beginning_offsets(out) if out else {}
    found: list[LogReset] = []
    for tp in out:
        mark = pending.pop(tp.partition)
        if starts.get(tp, 0) <= mark.offset:
            found.append(LogReset(topic, tp.partition, mark.offset, "its log ends before that"))
    return found


def _first_records_differ(
    topic: str,
    pending: dict[int, Watermark],
    batches: dict[TopicPartition, list[Any]],
    compacted: bool,
) -> list[LogReset]:
    """The partitions read (they leave ``pending``) whose first record is not
    the one applied at the watermark (of a compacted topic: a later one is)."""
    found: list[LogReset] = []
    for tp, records in batches.items():
        if tp.partition not in pending or not records:
            continue
        mark = pending.pop(tp.partition)
        first = records[0]
        if compacted and first.offset > mark.offset:
            continue  # compacted away: the log goes on past it
        problem = _differs(mark, first.offset, first.timestamp, first.key, first.value)
        if problem:
            found.append(LogReset(topic, tp.partition, mark.offset, problem))
    return found


def _logs_ended(
    consumer: AIOKafkaConsumer,
    topic: str,
    tps: dict[int, TopicPartition],
    pending: dict[int, Watermark],
) -> list[LogReset]:
    """The pending partitions whose log now ends at or before the watermark
    (they leave ``pending``)."""
    found: list[LogReset] = []
    for p in list(pending):
        high = consumer.highwater(tps[p])
        if high is not None and high <= pending[p].offset:
            found.append(LogReset(topic, p, pending.pop(p).offset, f"its log now ends at {high}"))
    return found


def _differs(
    mark: Watermark, offset: int, timestamp: int, key: bytes | None, value: bytes | None
) -> str | None:
    if offset != mark.offset:
        return f"the log has no record at offset {mark.offset} (the next is {offset})"
    if mark.timestamp_ms >= 0 and timestamp != mark.timestamp_ms:
        return f"the record at offset {mark.offset} is another one (timestamp {timestamp})"
    if mark.fingerprint >= 0 and fingerprint(key, value) != mark.fingerprint:
        return f"the record at offset {mark.offset} is another one (different content)"
    return None


class ClusterWatch:
    """Asks the broker for its cluster id (one small request on a kept
    connection, ~0.2 ms on loopback), to notice a broker that is not the one
    the process started against (``expected``)."""

    def __init__(self, bootstrap: str, expected: str, security: KafkaSecurity) -> None:
        self.bootstrap = bootstrap
        self.expected = expected
        self.security = security
        self._admin: AIOKafkaAdminClient | None = None

    async def changed(self, patience: float = 60.0) -> str | None:
        """None while the cluster id is the expected one; else what it is now.
        A broker that does not answer is asked again (a broker restarting, a
        slow answer) for up to ``patience`` seconds before the error is raised."""
        if not self.expected:
            return None
        now = await self.current(patience)
        return None if now == self.expected else now

    async def current(self, patience: float = 60.0) -> str:
        """The broker's cluster id now (asked again for up to ``patience``
        seconds while the broker does not answer, then the error is raised)."""
        deadline = time.monotonic() + patience
        pause = 0.2
        while True:
            try:
                if self._admin is None:
                    admin = AIOKafkaAdminClient(
                        **client_kwargs(self.bootstrap, self.security), request_timeout_ms=10_000
                    )
                    await admin.start()
                    self._admin = admin
                return await cluster_id_of(self._admin._client)
            except Exception:
                await self.close()
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)

    async def close(self) -> None:
        """Close the connection, if one was opened."""
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                await admin.close()
