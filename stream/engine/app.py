"""The Faust app: ``inbox``, ``ticks``, ``schedules`` and ``schedule-runs``
(co-partitioned: every lemongraph topic has the inbox's partition count) consumed in batches
(stream/runtime/fetch.py), job state in a RocksDB-backed table, a leader-only ticker,
and the engine between (a :class:`Worker`, whose named methods are the batch
handler and the assignment hook). A batch's outputs and changelog records are
produced as record batches (stream/runtime/produce.py)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import faust
from opentelemetry.trace import SpanKind

from compiler import to_iso
from stream.engine.batch import Batch, Mark, Record, watermark_key
from stream.engine.engine import Engine
from stream.engine.registry import Registry
from stream.engine.schedules import Schedules
from stream.engine.table import JobTable
from stream.engine.timers import DUE_PREFIX, INDEX_MARK
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.faust_tuning import (
    BoundedRocksDBOptions,
    bound_rocksdb,
    common_settings,
    fetch_max_wait,
    set_fetch_max_wait,
)
from stream.runtime.fetch import BatchApp, BatchConsumer, StopWorker
from stream.runtime.kafka import bootstrap_of
from stream.runtime.metrics import (
    BATCH_RECORDS,
    CONSUMER_LAG,
    DEADLETTERS,
    DECISION_SECONDS,
    DECISIONS,
    SCHEDULE_RUNS,
    TIMERS_PENDING,
)
from stream.runtime.produce import Produced, produce_batches
from stream.runtime.resets import ClusterWatch, find_resets
from stream.runtime.tracing import carried, context_of, headers_of, tracer
from topics import TickRecord, Topics, encode

__all__ = ["EngineApp", "EngineStats", "Worker", "build_app"]

log = logging.getLogger("lemongraph.worker")

#: How many records one batch (and one fetch) may hold. Measured on the
#: onboarding burst: 5,000 decided ~15% more events/s than 2,000, and its peak
#: while a batch is in flight held ~125 MB more (482 against 357 MB RSS for a
#: worker with 100,000 jobs). Latency at low rates does not depend on it.
BATCH_MAX = 5000
#: Rows of the table read per part when a partition's due-time index is written.
INDEX_PART = 20_000


@dataclass
class EngineStats:
    """Counters a status line can show."""

    started: float = field(default_factory=time.monotonic)
    batches: int = 0
    records: int = 0
    decisions: int = 0
    deadletters: int = 0
    skipped: int = 0
    duplicates: int = 0
    forwarded: int = 0
    bounded: int = 0
    ticks_sent: int = 0
    #: Seconds spent per phase of a batch, and waiting between batches.
    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("wait", "decide", "produce", "store"), 0.0)
    )
    last_end: float | None = None
    first_start: float | None = None

    def count(self, records: int, batch: Batch) -> None:
        """Add a stored batch of ``records`` records to the counters."""
        self.batches += 1
        self.records += records
        self.decisions += batch.decisions
        self.deadletters += batch.deadletters
        self.skipped += batch.skipped
        self.duplicates += batch.duplicates
        self.forwarded += batch.forwarded
        self.bounded += batch.bounded

    def rate(self) -> str:
        """Records per second from the first batch's start to the last's end."""
        if self.first_start is None or self.last_end is None:
            return "no batches"
        span = self.last_end - self.first_start
        return f"{self.records / span:,.0f} records/s over {span:.1f}s" if span > 0 else "-"

    def phases(self) -> str:
        """Where the time went, as percentages."""
        total = sum(self.seconds.values()) or 1.0
        return ", ".join(f"{k} {v:.1f}s ({100 * v / total:.0f}%)" for k, v in self.seconds.items())


@dataclass(frozen=True)
class EngineApp:
    """The Faust app and the parts a runner or a test looks at."""

    app: faust.App
    engine: Engine
    stats: EngineStats
    table: JobTable


def faust_settings(settings: Settings, tansu: bool) -> dict[str, Any]:
    """Faust settings that work against both Apache Kafka and the embedded broker."""
    options = common_settings(
        settings.kafka_url,
        settings.data_dir / "faust",
        settings.partitions,
        tansu,
        settings.kafka_security,
    )
    options.update(
        {
            "store": "rocksdb://",
            "table_standby_replicas": 0,
            "producer_linger_ms": 5,
            # A fetch hands the engine at most one batch: holding a whole prefetch
            # (megabytes per partition) as messages cost ~80 MB of peak memory.
            "broker_max_poll_records": BATCH_MAX,
            # A batch of decisions produces thousands of records at once; with the
            # default 16 KB batches every send waited for the broker (measured: a
            # third of a worker's time).
            "producer_max_batch_size": 1 << 20,
            "producer_max_request_size": 4 << 20,
        }
    )
    return options


def build_app(settings: Settings, registry: Registry, **options: Any) -> EngineApp:
    """A Faust app that runs the engine: a :class:`Worker`'s (``options`` are
    its keyword arguments)."""
    worker = Worker(settings, registry, **options)
    return EngineApp(worker.app, worker.engine, worker.stats, worker.table)


class Worker:
    """The engine in a Faust app: its batch handler (:meth:`on_batch`), the
    hook of partition assignments (:meth:`on_partitions_assigned`, acted on at
    the next batch: :meth:`on_assigned`) and the leader's ticker (:meth:`tick`).
    ``settings.kafka_url`` must be set; ``cluster`` is the broker's cluster id
    as it was when the worker started (empty: not checked)."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        tansu: bool = False,
        ticker: bool = True,
        stats: EngineStats | None = None,
        cluster: str = "",
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        topics = self.topics = Topics(settings.topic_prefix)
        # Apache Kafka answers a fetch when data is there; Tansu waits out the whole
        # fetch wait, so keep it short there (see stream/runtime/faust_tuning.py).
        set_fetch_max_wait(fetch_max_wait(tansu))
        # Faust names the table's changelog `<app id>-jobstate-changelog`: with
        # this id it is ``Topics.jobstate``, which the gateway reads.
        app_name = f"{settings.topic_prefix}engine"
        app = self.app = BatchApp(app_name, **faust_settings(settings, tansu))
        self.stats = stats if stats is not None else EngineStats()
        source = app.topic(
            topics.inbox,
            topics.ticks,
            topics.schedules,
            topics.schedule_runs,
            key_type=bytes,
            value_type=bytes,
        )
        #: The order in which one fetch's records are decided, by topic (see records).
        self.rank = {
            name: i
            for i, name in enumerate(
                (topics.schedules, topics.schedule_runs, topics.inbox, topics.ticks)
            )
        }
        faust_table = app.Table(
            "jobstate", partitions=settings.partitions, key_type=bytes, value_type=bytes
        )
        # One block cache and one memtable budget for every partition database
        # (docs/operations.md, "Memory"), before any is opened.
        bound_rocksdb(faust_table.data, BoundedRocksDBOptions(settings.rocksdb))
        table = self.table = JobTable(faust_table)
        self.engine = Engine(
            topics,
            registry,
            table.get,
            partitions=settings.partitions,
            cache_size=settings.state_cache,
            max_skew_ms=round(settings.max_clock_skew * 1000),
            cluster=cluster,
            schedules=Schedules(topics, enabled=settings.schedules_enabled),
            scan=table.scan,
        )
        self.bootstrap = bootstrap_of(settings.kafka_url or "")
        self.watch = ClusterWatch(self.bootstrap, cluster, settings.kafka_security)
        #: Assignments seen, and the one the engine was last reset for.
        self.assignments = 1
        self.handled = 0
        app.on_partitions_assigned.connect(self.on_partitions_assigned)
        app.consume_in_batches(
            source, self.on_batch, BATCH_MAX, linger=settings.batch_linger_ms / 1000
        )
        CONSUMER_LAG.add(self.lag)
        if ticker:
            self.ticks = app.topic(
                topics.ticks, partitions=settings.partitions, key_type=bytes, value_type=bytes
            )
            app.timer(settings.tick_interval, on_leader=True, name="ticker")(self.tick)

    # -- assignments ------------------------------------------------------------------

    def on_partitions_assigned(
        self, sender: Any, /, *args: Any, signal: Any, **kwargs: Any
    ) -> None:
        """Partitions were (re)assigned: the next batch resets the engine first."""
        self.assignments += 1

    async def on_assigned(self) -> None:
        """Partitions were (re)assigned since the last batch: another worker may
        have decided for them meanwhile, and Faust has recovered their table
        from the changelog. Drop what is cached; the due-time index is in the
        table (stream/engine/timers.py), restored with it."""
        self.handled = self.assignments
        settings, table = self.settings, self.table
        mine = [
            tp.partition
            for tp in self.app.assignor.assigned_actives()
            if tp.topic == self.topics.inbox
        ]
        late, last_keys = await table.catch_up(self.bootstrap, mine, settings.kafka_security)
        if late:
            log.warning("changelog: applied %d rows Faust's recovery had not", late)
        await self.check_logs(mine)
        self.engine.assigned()
        for partition in mine:
            if table.get(INDEX_MARK, partition) is None:
                await self.index_partition(partition)
            elif last_keys.get(partition, INDEX_MARK) != INDEX_MARK:
                # Written last by a worker that keeps no index (an older
                # version, rolled back to): its timers may be missing from it.
                log.warning(
                    "partition %d: its changelog ends with %r, not the due-time index's "
                    "mark: a worker without the index wrote to it; indexing it again",
                    partition,
                    last_keys[partition],
                )
                await self.index_partition(partition)
        await self.count_timers(mine)
        log.info("partitions assigned: %s", ", ".join(map(str, sorted(mine))) or "none")

    async def count_timers(self, partitions: Iterable[int]) -> None:
        """Set ``lemongraph_timers_pending`` to the index rows of ``partitions``
        (then each batch moves it by the rows it adds and deletes): read at each
        assignment, a part at a time like the indexing, about 1 s per 1,000,000
        timers on a 2-core machine."""
        total = 0
        for partition in partitions:
            rows = self.table.scan(partition, DUE_PREFIX, DUE_PREFIX[:-1] + "0")
            while True:
                counted = sum(1 for _ in itertools.islice(rows, INDEX_PART))
                total += counted
                if counted < INDEX_PART:
                    break
                await asyncio.sleep(0)
        TIMERS_PENDING.set(total)

    def lag(self) -> dict[tuple[str, int], int]:
        """The consumer lag of this worker's partitions (``lemongraph_consumer_lag``)."""
        consumer = self.app.consumer
        return consumer.lag() if isinstance(consumer, BatchConsumer) else {}

    async def check_logs(self, partitions: Iterable[int]) -> None:
        """Stop the worker (nothing of the batch acknowledged) when the inbox log
        of one of ``partitions`` is not the one the state applied
        (stream/runtime/resets.py)."""
        marks = {}
        for partition in partitions:
            raw = self.table.get(watermark_key(partition), partition)
            if raw is not None:
                marks[partition] = Mark.decode(raw)
        resets = await find_resets(
            self.bootstrap,
            self.topics.inbox,
            marks,
            self.cluster,
            security=self.settings.kafka_security,
        )
        if resets:
            raise StopWorker("\n".join(f"worker: stopped: {r}" for r in resets), ExitCode.LOG_RESET)

    async def check_rewinds(self, records: list[Record]) -> None:
        """Offsets that went back since the last assignment: a reset log, or
        (rarely) a re-delivery the broker can vouch for."""
        rewinds = self.engine.rewound(records)
        consumer = self.app.consumer
        dropped = consumer.rewound if isinstance(consumer, BatchConsumer) else {}
        for (topic, partition), seen in list(dropped.items()):
            del dropped[(topic, partition)]
            if topic == self.topics.inbox:
                rewinds.setdefault(partition, seen)
        if not rewinds:
            return
        await self.check_logs(rewinds)
        for partition, (before, now) in sorted(rewinds.items()):
            log.warning(
                "inbox partition %d went back from offset %d to %d; its log is the one "
                "applied, so that is a re-delivery",
                partition,
                before,
                now,
            )
        self.engine.forget_seen(rewinds)

    async def index_partition(self, partition: int) -> None:
        """Write the due-time index of a partition stored before it existed (or
        a new one's mark), through the changelog like a batch's rows, once: a
        part of the table at a time, so that the worker's loop (heartbeats
        included) runs between parts, with the mark last."""
        began = time.monotonic()
        table = self.table
        changelog = table.changelog_topic
        producer = self.app.kafka_producer()
        stored = table.partition_items(partition)
        timers = 0
        while True:
            part = list(itertools.islice(stored, INDEX_PART))
            rows = self.engine.index_rows(partition, part, mark=len(part) < INDEX_PART)
            last = await produce_batches(
                producer, [(changelog, p, key.encode(), raw, None, None) for key, p, raw in rows]
            )
            table.write(rows, {p: offset for (t, p), offset in last.items() if t == changelog})
            timers += sum(1 for key, _p, _raw in rows if key != INDEX_MARK)
            if len(part) < INDEX_PART:
                break
            await asyncio.sleep(0)
        if timers:
            log.warning(
                "partition %d: due-time index written for %d timers stored before it existed "
                "(%.1fs, once)",
                partition,
                timers,
                time.monotonic() - began,
            )

    # -- batches ----------------------------------------------------------------------

    def records(self, messages: Sequence[Any]) -> list[Record]:
        """A fetch's messages as the engine's records, in the order they are decided.

        Kafka orders records within a partition of one topic, not between
        topics. Of what one fetch brought, definitions are decided first, then
        reports, then the inbox, then ticks (a stable sort: each partition's
        order is kept), so that a wake or a tick fetched with the definition
        written before it sees that definition (docs/schedules.md, "Order
        between topics")."""
        rank = self.rank
        return [
            # Faust keeps the timestamp in seconds; round back to the record's ms.
            Record(
                m.topic,
                m.partition,
                m.offset,
                m.key,
                m.value,
                round(m.timestamp * 1000),
                _headers(m.headers),
            )
            for m in sorted(messages, key=lambda m: rank.get(m.topic, len(rank)))
        ]

    async def on_batch(self, messages: Sequence[Any]) -> None:
        """Decide one fetch's records; produce the outputs and the state's
        changelog, acknowledged; then write the state (see stream/engine/engine.py
        for why this order). After this, the consumer may commit."""
        stats = self.stats
        started = time.monotonic()
        if stats.last_end is not None:
            stats.seconds["wait"] += started - stats.last_end
        else:
            stats.first_start = started
        if self.assignments != self.handled:
            await self.on_assigned()
        records = self.records(messages)
        other = await self.watch.changed()
        if other is not None:
            raise StopWorker(
                f"worker: stopped: the broker is now cluster {other!r}, not {self.cluster!r} "
                "(the one this worker started against): it was reset or replaced, and its "
                "logs are not the ones this worker's state applied. Nothing of it is decided: "
                "see docs/operations.md, 'When the broker was reset'",
                ExitCode.LOG_RESET,  # EX_CONFIG: an operator decides what the state is
            )
        await self.check_rewinds(records)
        batch = self.engine.process(records)
        if batch.traced:
            trace_batch(batch, self.topics.tasks, started)
        rows = batch.writes()
        table = self.table
        changelog = table.changelog_topic
        produce: list[Produced] = [
            (o.topic, o.partition, o.key, o.value, o.timestamp_ms, o.headers) for o in batch.outputs
        ]
        produce.extend(
            (changelog, partition, key.encode(), raw, None, None) for key, partition, raw in rows
        )
        decided = time.monotonic()
        # Outputs and the state's changelog first, acknowledged; then the state
        # in RocksDB; then (after this batch) the consumer may commit.
        last = await produce_batches(self.app.kafka_producer(), produce)
        acked = time.monotonic()
        table.write(rows, {p: offset for (t, p), offset in last.items() if t == changelog})
        self.engine.committed(batch)
        stats.last_end = ended = time.monotonic()
        stats.seconds["decide"] += decided - started
        stats.seconds["produce"] += acked - decided
        stats.seconds["store"] += ended - acked
        stats.count(len(records), batch)
        BATCH_RECORDS.observe(len(records))
        count_batch(batch, time.time_ns() // 1_000_000 - round((ended - acked) * 1000))

    # -- the ticker -------------------------------------------------------------------

    async def tick(self) -> None:
        """The leader's tick: a tick record to every partition of ``ticks``."""
        settings = self.settings
        at = to_iso(datetime.now(UTC))
        for partition in range(settings.partitions):
            record = TickRecord(partition=partition, at=at)
            await self.ticks.send(key=b"tick", value=encode(record), partition=partition)
        self.stats.ticks_sent += settings.partitions


def count_batch(batch: Batch, acked_ms: int) -> None:
    """Hand a stored batch's tallies to the worker's metrics, once per batch
    (docs/operations.md, "Metrics"); ``acked_ms``: when its outputs were
    acknowledged, the decisions' instant for ``lemongraph_decision_seconds``."""
    for (playbook, outcome), n in batch.tally.items():
        DECISIONS.labels(playbook, outcome).inc(n)
    for (topic, reason), n in batch.dead.items():
        DEADLETTERS.labels(topic, reason).inc(n)
    for status, n in batch.runs.items():
        SCHEDULE_RUNS.labels(status).inc(n)
    if batch.stamps:
        DECISION_SECONDS.observe_since(acked_ms, batch.stamps)
    if batch.timers_delta:
        TIMERS_PENDING.inc(batch.timers_delta)


def trace_batch(batch: Batch, tasks_topic: str, started: float) -> None:
    """The spans of a batch's decisions on inbox records that carry a trace
    (docs/operations.md, "Tracing"): each a ``decide PLAYBOOK`` span, the child
    of its record's context, from the batch's start (``started``, monotonic) to
    now; its task records carry it on to ``tasks`` in their headers. A worker
    that does not trace makes no span and carries the record's own context on,
    so the trace stays whole. Nothing of an event's content is recorded."""
    found = tracer("worker")
    start_ns = time.time_ns() - round((time.monotonic() - started) * 1e9)
    for record, playbook, outcome, outputs in batch.traced:
        headers = carried(record.headers)
        if headers is None:
            continue
        if found is not None:
            tasks = sum(o.topic == tasks_topic for o in outputs)
            span = found.start_span(
                f"decide {playbook}".rstrip(),
                context=context_of(headers),
                kind=SpanKind.CONSUMER,
                start_time=start_ns,
                attributes={
                    "messaging.system": "kafka",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": record.topic,
                    "messaging.destination.partition.id": str(record.partition),
                    "messaging.kafka.offset": record.offset,
                    "lemongraph.job.key": (record.key or b"").decode("utf-8", "replace"),
                    "lemongraph.playbook": playbook,
                    "lemongraph.decision.outcome": outcome,
                    "lemongraph.decision.tasks": tasks,
                },
            )
            headers = headers_of(span)
            span.end()
        for output in outputs:
            if output.topic == tasks_topic:
                output.headers = [*(output.headers or ()), *headers]


def _headers(headers: Any) -> list[tuple[str, bytes]]:
    """A Faust message's headers as (name, value) pairs (Faust may hand a mapping)."""
    if not headers:
        return []
    items = headers.items() if hasattr(headers, "items") else headers
    return [(str(name), bytes(value or b"")) for name, value in items]
