"""Job state in a Faust table backed by RocksDB (one database per partition,
changelogged to Kafka so a partition can move to another worker).

Faust decides a table write's partition, and its changelog partition, from the
event being processed (a context variable). A batch from ``take_events`` has no
current event, so every access here sets that variable to an event of the
partition concerned — the one place lemongraph reaches into Faust's private API
(``faust.streams._current_event``), pinned by tests/test_stream_table.py.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from faust.streams import _current_event

__all__ = ["JobTable"]


class JobTable:
    """Stored jobs (bytes) by job key, in the partition their records arrive on."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._events: dict[int, Any] = {}

    def use_events(self, events_by_partition: Mapping[int, Any]) -> None:
        """Remember an event of each partition of the current batch."""
        self._events = dict(events_by_partition)

    @contextmanager
    def _partition(self, partition: int) -> Iterator[None]:
        event = self._events.get(partition)
        if event is None:
            raise RuntimeError(f"no event of partition {partition} in this batch")
        token = _current_event.set(weakref.ref(event))
        try:
            yield
        finally:
            _current_event.reset(token)

    def get(self, key: str, partition: int) -> bytes | None:
        """The stored job, or None."""
        with self._partition(partition):
            value = self.table.get(key.encode())
        return value if value is None else bytes(value)

    def put(self, key: str, partition: int, raw: bytes) -> None:
        """Store a job (written to RocksDB now, to the changelog when flushed)."""
        with self._partition(partition):
            self.table[key.encode()] = raw

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every stored job of the partitions this worker owns."""
        for key, value in self.table.items():
            yield key.decode(), bytes(value)
