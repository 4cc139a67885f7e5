"""The Faust app: one agent over ``inbox`` and ``ticks`` (co-partitioned), job
state in a RocksDB-backed table, a leader-only ticker, and the engine between."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import faust

from compiler._time import to_iso
from topics import TickRecord, Topics, encode

from .config import Settings
from .engine import Engine, Record
from .registry import Registry
from .table import JobTable

__all__ = ["EngineApp", "EngineStats", "build_app"]

log = logging.getLogger("lemongraph.worker")

#: How many records one batch may hold, and how long to wait to fill it.
BATCH_MAX = 500
BATCH_WITHIN = 0.05


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
    ticks_sent: int = 0
    first_decision_at: float | None = None


@dataclass(frozen=True)
class EngineApp:
    """The Faust app and the parts a runner or a test looks at."""

    app: faust.App
    engine: Engine
    stats: EngineStats
    table: JobTable


def faust_settings(settings: Settings, tansu: bool) -> dict[str, Any]:
    """Faust settings that work against both Apache Kafka and the embedded broker."""
    options: dict[str, Any] = {
        "broker": settings.kafka_url,
        "datadir": str(settings.data_dir / "faust"),
        "store": "rocksdb://",
        "web_enabled": False,
        "topic_partitions": settings.partitions,
        "topic_replication_factor": 1,
        "consumer_auto_offset_reset": "earliest",
        "table_standby_replicas": 0,
        "broker_commit_interval": 1.0,
        "producer_linger_ms": 5,
        "key_serializer": "raw",
        "value_serializer": "raw",
        # Rejoining a group waits about the rebalance timeout; Faust's defaults
        # (tens of seconds) make every start slow.
        "broker_rebalance_timeout": 3.0,
        "broker_session_timeout": 6.0,
        "broker_heartbeat_interval": 1.0,
    }
    if tansu:
        # Tansu reports the end offset of a partition as the base offset of its
        # last batch + 1, which trips Faust's recovery consistency check.
        options["recovery_consistency_check"] = False
    return options


def build_app(
    settings: Settings,
    registry: Registry,
    *,
    app_id: str | None = None,
    tansu: bool = False,
    ticker: bool = True,
    stats: EngineStats | None = None,
) -> EngineApp:
    """A Faust app that runs the engine. ``settings.kafka_url`` must be set."""
    topics = Topics(settings.topic_prefix)
    app = faust.App(app_id or f"{settings.topic_prefix}engine", **faust_settings(settings, tansu))
    stats = stats if stats is not None else EngineStats()
    source = app.topic(topics.inbox, topics.ticks, key_type=bytes, value_type=bytes)
    table = JobTable(
        app.Table("jobstate", partitions=settings.partitions, key_type=bytes, value_type=bytes)
    )
    engine = Engine(topics, registry, table.get)
    assigned: list[frozenset[int]] = [frozenset()]

    async def handle(events: Sequence[Any]) -> None:
        by_partition = {ev.message.partition: ev for ev in events}
        table.use_events(by_partition)
        mine = frozenset(
            tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topics.inbox
        )
        if mine != assigned[0]:
            assigned[0] = mine
            count = engine.rebuild_timers(table.items())
            log.info("partitions %s: timer index rebuilt, %d jobs waiting", sorted(mine), count)
        records = [
            Record(
                ev.message.topic,
                ev.message.partition,
                ev.message.offset,
                ev.message.key,
                ev.message.value,
                int(ev.message.timestamp * 1000),
            )
            for ev in events
        ]
        batch = engine.process(records)
        producer = app.producer
        for out in batch.outputs:
            await producer.send(out.topic, out.key, out.value, out.partition, None, None)
        # Outputs first, acknowledged; then state; then (after this batch) the
        # consumer may commit. See stream/engine.py for why this order.
        await producer.flush()
        for key, partition, raw in batch.writes():
            table.put(key, partition, raw)
        engine.committed(batch)
        stats.batches += 1
        stats.records += len(records)
        stats.decisions += batch.decisions
        stats.deadletters += batch.deadletters
        stats.skipped += batch.skipped
        stats.duplicates += batch.duplicates
        if batch.decisions and stats.first_decision_at is None:
            stats.first_decision_at = time.monotonic()

    @app.agent(source, name="decide")
    async def decide(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN):
            try:
                await handle(events)
            except BaseException:
                # take_events acks a batch even when its body raises, and an acked
                # offset gets committed: carrying on would lose the batch. Stop
                # the process instead; the batch is re-delivered on restart.
                log.exception("batch failed; exiting so that it is re-delivered")
                logging.shutdown()
                os._exit(70)

    if ticker:
        ticks = app.topic(
            topics.ticks, partitions=settings.partitions, key_type=bytes, value_type=bytes
        )

        @app.timer(settings.tick_interval, on_leader=True, name="ticker")  # type: ignore[untyped-decorator]
        async def tick() -> None:
            at = to_iso(datetime.now(UTC))
            for partition in range(settings.partitions):
                record = TickRecord(partition=partition, at=at)
                await ticks.send(key=b"tick", value=encode(record), partition=partition)
            stats.ticks_sent += settings.partitions

    return EngineApp(app, engine, stats, table)
