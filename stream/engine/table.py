"""Job state in a Faust table backed by RocksDB (one database per partition,
changelogged to Kafka so that a partition can move to another worker, where
Faust's recovery rebuilds it from the changelog).

Faust's own write path (``table[key] = value``) costs a RocksDB put, a
changelog send through Faust's producer buffer, and a second put for the
changelog offset, per write, and takes the partition from the event being
processed. Measured on the engine's workload it was most of a batch's time. So
the engine writes a batch the way Faust's recovery does: its changelog records
are produced with the batch's outputs and acknowledged with them, then one
RocksDB WriteBatch per partition is applied and the partition's persisted
changelog offset advanced — exactly what Faust reads back on recovery.

This module, ``stream/runtime/fetch.py`` and ``stream/runtime/faust_tuning.py`` are the only
places that reach into Faust's internals (here: the store's per-partition
databases and its persisted offsets); tests/stream/runtime/test_stream_faust.py pins them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import rocksdict
from faust.types import TP

if TYPE_CHECKING:
    from stream.runtime.kafka import KafkaSecurity

__all__ = ["JobTable"]


class JobTable:
    """Stored jobs (bytes) by job key, in the partition their records arrive on."""

    def __init__(self, table: Any) -> None:
        self.table = table

    @property
    def changelog_topic(self) -> str:
        """The table's changelog topic, ``Topics.jobstate`` (created with the other
        topics, else by Faust at start)."""
        return str(self.table.changelog_topic_name)

    def _db(self, partition: int) -> Any:
        return self.table.data._db_for_partition(partition)

    def get(self, key: str, partition: int) -> bytes | None:
        """The stored job, or None."""
        value = self._db(partition).get(key.encode())
        return value if value is None else bytes(value)

    def write(
        self, rows: Iterable[tuple[str, int, bytes | None]], changelog_offsets: dict[int, int]
    ) -> None:
        """Apply ``(key, partition, value)`` rows (a None value deletes the row,
        as a tombstone in the changelog does in Faust's recovery), one
        WriteBatch per partition, then record how far each partition's
        changelog is applied."""
        batches: dict[int, Any] = {}
        for key, partition, value in rows:
            if partition not in batches:
                batches[partition] = rocksdict.WriteBatch(raw_mode=True)
            if value is None:
                batches[partition].delete(key.encode())
            else:
                batches[partition].put(key.encode(), value)
        for partition, batch in batches.items():
            self._db(partition).write(batch)
        for partition, offset in changelog_offsets.items():
            self.table.data.set_persisted_offset(TP(self.changelog_topic, partition), offset)

    def persisted_offset(self, partition: int) -> int:
        """The last changelog offset applied to this partition's database (-1: none)."""
        offset = self.table.data.persisted_offset(TP(self.changelog_topic, partition))
        return -1 if offset is None else int(offset)

    async def catch_up(
        self, bootstrap: str, partitions: Iterable[int], security: KafkaSecurity
    ) -> tuple[int, dict[int, str]]:
        """Apply whatever the changelog holds past each partition's persisted
        offset, reading up to the high watermark that fetches report.

        Faust's recovery stops at the end offset the broker's ListOffsets gives,
        and the embedded Tansu broker gives the start of its last batch: the
        last batch of state written by the previous owner of a partition would
        be missing. On Apache Kafka this finds nothing to do.

        Returns the rows applied, and the key of each partition's last changelog
        record (read again from the persisted offset itself; a partition whose
        changelog is empty has none): whoever wrote last, a batch of this
        version ends with the due-time index's mark (``stream/engine/engine.py``).
        """
        from aiokafka.structs import TopicPartition

        from stream.runtime.kafka import caught_up, new_consumer

        tps = [TopicPartition(self.changelog_topic, p) for p in sorted(partitions)]
        last_keys: dict[int, str] = {}
        if not tps:
            return 0, last_keys
        consumer = new_consumer(bootstrap, security, fetch_max_wait_ms=50)
        await consumer.start()
        applied = 0
        persisted = {tp.partition: self.persisted_offset(tp.partition) for tp in tps}
        try:
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, max(persisted[tp.partition], 0))
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=5000)
                rows: list[tuple[str, int, bytes | None]] = []
                offsets: dict[int, int] = {}
                for tp, records in batches.items():
                    for r in records:
                        last_keys[tp.partition] = r.key.decode() if r.key is not None else ""
                        if r.offset <= persisted[tp.partition]:
                            continue  # applied already: read for its key only
                        if r.key is not None:  # a None value: a tombstone, deleted
                            rows.append((r.key.decode(), tp.partition, r.value))
                        offsets[tp.partition] = r.offset
                if offsets:
                    self.write(rows, offsets)
                    applied += len(rows)
                if not batches and await caught_up(consumer, tps):
                    return applied, last_keys
        finally:
            await consumer.stop()

    def scan(self, partition: int, low: str, high: str) -> Iterator[tuple[str, bytes]]:
        """The rows of ``partition`` whose keys are in [low, high), in key order
        (RocksDB's iterator, bounded above: it reads nothing past ``high``)."""
        options = rocksdict.ReadOptions()
        options.set_iterate_upper_bound(high.encode())
        for key, value in self._db(partition).items(from_key=low.encode(), read_opt=options):
            yield key.decode(), bytes(value)

    def partition_items(self, partition: int) -> Iterator[tuple[str, bytes]]:
        """Every row stored in ``partition`` (not Faust's own persisted offset)."""
        offset_key = self.table.data.offset_key
        for key, value in self._db(partition).items():
            if key != offset_key:
                yield key.decode(), bytes(value)

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every stored job of the partitions this worker owns."""
        for key, value in self.table.items():
            yield key.decode(), bytes(value)
