"""Is the inbox log still the one this worker's state was built from?

A worker skips an inbox record whose offset is at or below its partition's
watermark: it was applied before the last commit. That is only true while the
log is the same log. A broker that comes back empty (the embedded broker forgets
everything when it stops), or a topic deleted and recreated, starts its offsets
again at 0, and every new record would be skipped as a "re-delivery" without a
trace. So whenever partitions are assigned, the worker reads the record at each
watermark back from the broker and compares it with what it stored (offset,
timestamp, crc32 of key and value, and the cluster id; see ``engine.Mark``). A
log that ends before the watermark, or holds another record there, or a broker
of another cluster, is a reset: the worker stops with an error naming the
partition and the offsets, and decides nothing from it (docs/operations.md,
"When the broker was reset").

Between assignments, two more checks run before every batch is decided: a
partition whose offsets go back (``Engine.rewound``) is checked as above, and
:class:`ClusterWatch` asks the broker for its cluster id, which the embedded
broker makes new at every start: a broker that restarted empty is noticed at
the first batch read from it, before a record of it is skipped or decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.structs import TopicPartition

from stream.engine.batch import Mark, fingerprint
from stream.runtime.kafka import KafkaSecurity, client_kwargs, new_consumer

__all__ = ["ClusterWatch", "LogReset", "find_resets"]


@dataclass(frozen=True)
class LogReset:
    """A partition whose log is not the one the worker's state has applied."""

    topic: str
    partition: int
    applied: int  # the last offset this worker's state applied
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
    marks: dict[int, Mark],
    cluster: str,
    timeout: float = 15.0,
    *,
    security: KafkaSecurity,
) -> list[LogReset]:
    """The partitions of ``topic`` whose log does not hold, at the watermark
    ``marks`` gives, the record that was applied there (or that were applied
    from another cluster than ``cluster``). Raises ``TimeoutError`` when the
    broker does not answer in ``timeout`` seconds."""
    pending = {p: m for p, m in marks.items() if m.offset >= 0}
    found: list[LogReset] = []
    for p, mark in sorted(pending.items()):
        if mark.cluster and cluster and mark.cluster != cluster:
            what = f"the broker is now cluster {cluster!r}, not {mark.cluster!r}"
            found.append(LogReset(topic, p, mark.offset, what))
            del pending[p]
    if not pending:
        return found
    consumer = new_consumer(bootstrap, security, offsets="none", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tps = {p: TopicPartition(topic, p) for p in pending}
        consumer.assign(list(tps.values()))
        starts = await consumer.beginning_offsets(list(tps.values()))
        for p in list(pending):
            if starts[tps[p]] > pending[p].offset:
                # Retention removed what was applied: every record left is newer
                # than the watermark, so none can be skipped.
                del pending[p]
            else:
                consumer.seek(tps[p], pending[p].offset)
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
                out = [
                    tp
                    for tp in (exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {})
                    if tp.partition in pending
                ]
                # Out of range below the log's start is retention that ran since
                # the first look, not a reset: every record left is newer.
                starts = await consumer.beginning_offsets(out) if out else {}
                for tp in out:
                    mark = pending.pop(tp.partition)
                    if starts.get(tp, 0) <= mark.offset:
                        found.append(
                            LogReset(topic, tp.partition, mark.offset, "its log ends before that")
                        )
                await asyncio.sleep(0.05)
                continue
            for tp, records in batches.items():
                if tp.partition not in pending or not records:
                    continue
                mark = pending.pop(tp.partition)
                first = records[0]
                problem = _differs(mark, first.offset, first.timestamp, first.key, first.value)
                if problem:
                    found.append(LogReset(topic, tp.partition, mark.offset, problem))
            for p in list(pending):
                high = consumer.highwater(tps[p])
                if high is not None and high <= pending[p].offset:
                    found.append(
                        LogReset(topic, p, pending.pop(p).offset, f"its log now ends at {high}")
                    )
    finally:
        await consumer.stop()
    return sorted(found, key=lambda r: r.partition)


def _differs(
    mark: Mark, offset: int, timestamp: int, key: bytes | None, value: bytes | None
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
    the worker started against."""

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
                described = await self._admin.describe_cluster()
                break
            except Exception:
                await self.close()
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
        now = str(described.get("cluster_id") or "")
        return None if now == self.expected else now

    async def close(self) -> None:
        """Close the connection, if one was opened."""
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                await admin.close()
