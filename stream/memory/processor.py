"""``lemongraph memory``: the memory processor (docs/memory.md, "How it is
built"). It consumes ``memory-facts`` as the consumer group ``<prefix>memory``,
folds each subject's records in order (stream/memory/fold.py) and, per batch:

1. produces each changed profile (or a tombstone, for an erased subject) to the
   compacted ``memory`` topic, keyed by subject, and waits for the broker's
   acknowledgement;
2. then writes the profiles, the erasure instants and every partition's next
   offset to its RocksDB table in one write batch (stream/memory/table.py).

A SIGKILL between the two folds the same records again from the stored
offsets, into the same profiles, produced again byte for byte: compaction keeps
one. On start, and when the group assigns it a partition, it reads each from
the offset its table stored (the beginning when none).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError
from pydantic import TypeAdapter, ValidationError

from stream.memory.fold import Bounds, Profile, fold_record
from stream.memory.table import MemoryTable
from stream.runtime.config import Settings
from stream.runtime.faust_tuning import fetch_max_wait
from stream.runtime.kafka import bootstrap_of, new_consumer, producer, start_consumer
from stream.runtime.metrics import MEMORY_RECORDS, serve_metrics
from topics import MemoryErase, MemoryFact, MemoryNote, Topics

__all__ = ["BATCH_MAX", "Changes", "MemoryProcessor", "fold_batch"]

log = logging.getLogger("lemongraph.memory")

_RECORD: TypeAdapter[MemoryFact | MemoryNote | MemoryErase] = TypeAdapter(
    MemoryFact | MemoryNote | MemoryErase
)
#: The most records one batch folds (``LEMONGRAPH_MEMORY_BATCH``).
BATCH_MAX = 2000


@dataclass
class Changes:
    """What one batch folded: the changed profiles (None: a tombstone), the
    erasure instants, each partition's next offset, and the records skipped
    because they were not a fact, a note or an erasure."""

    #: subject → (its profile, its floor), None for a tombstone
    profiles: dict[str, tuple[bytes, bytes | None] | None] = field(default_factory=dict)
    erasures: dict[str, str] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)
    invalid: int = 0
    facts: int = 0
    notes: int = 0


def fold_batch(
    table: MemoryTable, records: Iterable[tuple[int, int, bytes | None]], bounds: Bounds
) -> Changes:
    """Fold ``records`` ((partition, offset, value), in each partition's order)
    onto what ``table`` holds; nothing is written (see :meth:`MemoryTable.write`)."""
    changes = Changes()
    live: dict[str, tuple[Profile | None, str | None]] = {}
    changed: set[str] = set()
    for partition, offset, value in records:
        changes.offsets[partition] = offset + 1
        try:
            record = _RECORD.validate_json(value or b"")
        except ValidationError as exc:
            changes.invalid += 1
            log.warning("memory-facts p%d@%d skipped: %s", partition, offset, exc.errors()[0])
            continue
        subject = record.subject
        if subject not in live:
            raw = table.profile(subject)
            stored = Profile.decode(raw, table.floor(subject)) if raw else None
            live[subject] = (stored, table.erased(subject))
        profile, erased = live[subject]
        profile, after, moved = fold_record(profile, erased, record.model_dump(), bounds)
        live[subject] = (profile, after)
        changes.facts += isinstance(record, MemoryFact)
        changes.notes += isinstance(record, MemoryNote)
        if after is not None and after != erased:
            changes.erasures[subject] = after
        if moved:
            changed.add(subject)
    for subject in sorted(changed):
        profile = live[subject][0]
        changes.profiles[subject] = (
            (profile.encode(), profile.encode_floor()) if profile is not None else None
        )
    return changes


class _Resume(ConsumerRebalanceListener):  # type: ignore[misc]
    """Each partition the group assigns is read from the offset the table stored."""

    def __init__(self, processor: MemoryProcessor) -> None:
        self.processor = processor

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Nothing to do: every batch is stored before the next is read."""

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Seek to the stored offsets."""
        await self.processor.resume(assigned)


class MemoryProcessor:
    """The processor's loop (:meth:`run`) over ``table``."""

    def __init__(
        self,
        settings: Settings,
        table: MemoryTable,
        bounds: Bounds,
        say: Callable[[str], None],
        batch_max: int = BATCH_MAX,
        *,
        tansu: bool = False,
    ) -> None:
        assert settings.kafka_url is not None
        self.batch_max = batch_max
        # The embedded broker holds every fetch for the whole wait, data or not.
        self.fetch_wait_ms = fetch_max_wait(tansu)
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.table = table
        self.bounds = bounds
        self.say = say
        self.consumer: Any = None
        self.folded = 0
        #: By kind, for ``lemongraph_memory_records`` (docs/operations.md, "Metrics").
        self.counts = {"fact": 0, "note": 0, "erasure": 0, "invalid": 0}

    async def resume(self, assigned: list[TopicPartition]) -> None:
        """Read each of ``assigned`` from the table's offset for it."""
        stored = self.table.offsets()
        for tp in assigned:
            if tp.partition in stored:
                self.consumer.seek(tp, stored[tp.partition])
            else:
                await self.consumer.seek_to_beginning(tp)
        where = ", ".join(f"p{tp.partition}@{stored.get(tp.partition, 0)}" for tp in assigned)
        self.say(f"memory: reading {self.topics.memory_facts} from {where or 'no partition'}")

    async def run(self, stop: asyncio.Event) -> None:
        """Fold until ``stop`` is set."""
        settings = self.settings
        bootstrap = bootstrap_of(settings.kafka_url or "")
        consumer = self.consumer = new_consumer(
            bootstrap,
            settings.kafka_security,
            group=f"{settings.topic_prefix}memory",
            offsets="earliest",
            fetch_max_wait_ms=self.fetch_wait_ms,
        )
        consumer.subscribe([self.topics.memory_facts], listener=_Resume(self))
        await start_consumer(consumer)
        try:
            async with producer(
                bootstrap,
                security=settings.kafka_security,
                compression=settings.kafka_compression,
            ) as out:
                while not stop.is_set():
                    batches = await consumer.getmany(timeout_ms=300, max_records=self.batch_max)
                    if batches:
                        await self.handle(out, batches)
        finally:
            await consumer.stop()

    async def handle(self, out: Any, batches: dict[TopicPartition, list[Any]]) -> None:
        """One batch: fold, produce the profiles and wait for them, then store."""
        records = [
            (tp.partition, r.offset, r.value)
            for tp in sorted(batches, key=lambda t: t.partition)
            for r in batches[tp]
        ]
        changes = fold_batch(self.table, records, self.bounds)
        sent = [
            await out.send(self.topics.memory, value=row[0] if row else None, key=subject.encode())
            for subject, row in changes.profiles.items()
        ]
        await asyncio.gather(*sent)  # acknowledged before the table moves on
        self.table.write(changes.profiles, changes.erasures, changes.offsets)
        self.folded += len(records)
        counts = self.counts
        counts["fact"] += changes.facts
        counts["note"] += changes.notes
        counts["invalid"] += changes.invalid
        counts["erasure"] += len(records) - changes.facts - changes.notes - changes.invalid
        try:
            # For the group's lag only: it resumes from the table's offsets.
            await self.consumer.commit(
                {
                    TopicPartition(self.topics.memory_facts, p): offset
                    for p, offset in changes.offsets.items()
                }
            )
        except (CommitFailedError, IllegalStateError) as exc:  # a rebalance took them
            log.info("memory: offsets not committed to the group: %s", exc)

    async def serve(self) -> None:
        """Run until SIGTERM or SIGINT, saying what it does."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        bounds = self.bounds
        self.say(
            f"memory: folding {self.topics.memory_facts} into {self.topics.memory} "
            f"(table {self.table.path}; {bounds.versions} versions per name, "
            f"{bounds.names} names per subject)"
        )
        MEMORY_RECORDS.sources.append(self.counts.copy)  # read at each scrape
        settings = self.settings
        metrics = serve_metrics("memory", settings.metrics_port, settings.metrics_host, self.say)
        try:
            await self.run(stop)
        finally:
            if metrics is not None:
                metrics.stop()
        self.say(f"memory: stopped after {self.folded} records")
