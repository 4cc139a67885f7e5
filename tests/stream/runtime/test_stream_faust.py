"""The places lemongraph reaches into Faust's internals, pinned: if a Faust
upgrade moves them, these tests fail before a worker misbehaves.

* stream/engine/table.py writes the job table as Faust's recovery does (per-partition
  RocksDB databases, WriteBatch, persisted changelog offsets);
* stream/runtime/faust_tuning.py lowers the fetch wait Faust hard-codes;
* stream/runtime/fetch.py replaces the per-record delivery of the engine's topics with
  batches, and hands Faust's aiokafka producer to stream/runtime/produce.py.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from pathlib import Path
from types import SimpleNamespace

import faust
import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from stream.engine.table import JobTable
from stream.engine.timers import DUE_VALUE, JOBS, SCHEDULES, due_key, due_range, parse_due_key
from stream.runtime.faust_tuning import set_fetch_max_wait


def test_job_table_writes_batches_and_persists_changelog_offsets(tmp_path: Path) -> None:
    app = faust.App("pin-table", datadir=str(tmp_path), store="rocksdb://", web_enabled=False)
    table = JobTable(app.Table("jobstate", partitions=4, key_type=bytes, value_type=bytes))
    rows = [("job-1", 2, b"one"), ("job-2", 3, b"two"), ("job-1", 2, b"one, later")]
    table.write(rows, {2: 41, 3: 7})
    assert table.get("job-1", 2) == b"one, later"
    assert table.get("job-2", 3) == b"two"
    assert table.get("job-2", 2) is None  # partitions are separate databases
    store = table.table.data
    changelog = table.changelog_topic
    assert changelog == "pin-table-jobstate-changelog"
    assert store.persisted_offset(TP(changelog, 2)) == 41
    assert store.persisted_offset(TP(changelog, 3)) == 7
    # Faust's recovery reads these databases under these file names.
    assert store.partition_path(2).exists()
    # A None value deletes the row (a schedule removed), as a changelog
    # tombstone does in Faust's recovery.
    table.write([("\x00schedule/s", 2, b"state"), ("job-2", 3, None)], {})
    table.write([("\x00schedule/s", 2, None)], {2: 42})
    assert table.get("\x00schedule/s", 2) is None
    assert table.get("job-2", 3) is None
    assert table.get("job-1", 2) == b"one, later"
    assert store.persisted_offset(TP(changelog, 2)) == 42


def test_the_due_time_index_is_scanned_in_order_and_restored_by_faust_recovery(
    tmp_path: Path,
) -> None:
    """The index rows are rows of the table (stream/engine/timers.py): a scan reads a
    partition's range in key order and nothing past its bound, and Faust's
    changelog recovery on another machine (``apply_changelog_batch``, the
    records as they were produced) restores them like any other row."""
    app = faust.App("pin-index", datadir=str(tmp_path / "a"), store="rocksdb://", web_enabled=False)
    table = JobTable(app.Table("jobstate", partitions=4, key_type=bytes, value_type=bytes))
    rows: list[tuple[str, int, bytes | None]] = [
        (due_key(JOBS, 300, "c"), 1, DUE_VALUE),
        (due_key(JOBS, 100, "a"), 1, DUE_VALUE),
        (due_key(JOBS, 200, "b"), 1, DUE_VALUE),
        (due_key(JOBS, 150, "gone"), 1, DUE_VALUE),
        ("a", 1, b"job a"),
        (due_key(SCHEDULES, 10, "s"), 1, DUE_VALUE),
        (due_key(JOBS, 50, "elsewhere"), 2, DUE_VALUE),
        (due_key(JOBS, 150, "gone"), 1, None),  # moved: its old row deleted
    ]
    table.write(rows, {1: 7})
    # Every row of a partition (what the index is written from once) but
    # Faust's own persisted offset.
    assert [k for k, _v in table.partition_items(1)] == sorted(
        {k for k, p, v in rows if p == 1} - {due_key(JOBS, 150, "gone")}
    )
    low, high = due_range(JOBS, 200)
    assert [parse_due_key(k) for k, _v in table.scan(1, low, high)] == [(100, "a"), (200, "b")]
    assert [parse_due_key(k) for k, _v in table.scan(2, low, high)] == [(50, "elsewhere")]
    other = faust.App(
        "pin-index", datadir=str(tmp_path / "b"), store="rocksdb://", web_enabled=False
    )
    restored = JobTable(other.Table("jobstate", partitions=4, key_type=bytes, value_type=bytes))
    tp = TP(restored.changelog_topic, 1)
    events = [
        SimpleNamespace(
            message=SimpleNamespace(tp=tp, offset=i, partition=1, key=k.encode(), value=v)
        )
        for i, (k, p, v) in enumerate(rows)
        if p == 1
    ]
    restored.table.data.apply_changelog_batch(events, None, None)
    everything = due_range(JOBS, 10**16)
    assert list(restored.scan(1, *everything)) == list(table.scan(1, *everything))
    assert len(list(restored.scan(1, *everything))) == 3


def test_the_fetch_wait_patch_reaches_the_consumer_faust_creates() -> None:
    source = inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer)
    assert "fetch_max_wait_ms=1500" in source, "Faust changed how it sets the fetch wait"
    original = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer
    try:
        made: list[object] = []

        class Consumer:
            _fetch_max_wait_ms = 1500

        def fake(self: object, transport: object) -> object:
            made.append(Consumer())
            return made[-1]

        faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = fake  # type: ignore[method-assign]
        import stream.runtime.faust_tuning as tuning

        tuning._ORIGINAL = fake
        set_fetch_max_wait(20)
        consumer = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer(None, None)  # type: ignore[arg-type]
        assert consumer is made[-1]
        assert consumer._fetch_max_wait_ms == 20  # type: ignore[attr-defined]
    finally:
        faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = original  # type: ignore[method-assign]
        tuning._ORIGINAL = original


def test_aiokafka_reads_the_fetch_wait_attribute_when_it_starts() -> None:
    from aiokafka import AIOKafkaConsumer

    source = inspect.getsource(AIOKafkaConsumer.start)
    assert "self._fetch_max_wait_ms" in source


def test_the_batch_app_makes_a_batch_consumer_for_its_topics(tmp_path: Path) -> None:
    from stream.runtime.fetch import BatchApp, BatchConsumer

    async def handler(messages: object) -> None:
        return None

    app = BatchApp("pin-batch", datadir=str(tmp_path), web_enabled=False)
    topic = app.topic("in-a", "in-b", key_type=bytes, value_type=bytes)
    app.consume_in_batches(topic, handler, 123, linger=0.005)
    # The consumer itself is made at start (every broker test runs through it).
    transport = app.transport
    assert transport.Consumer is BatchConsumer
    assert transport.batch == ({"in-a", "in-b"}, handler, 123, 0.005)  # type: ignore[attr-defined]
    assert topic in app.topics  # subscribed through the conductor, without an agent
    with pytest.raises(RuntimeError, match="already consumes in batches"):
        app.consume_in_batches(topic, handler, 1)


def test_faust_still_drains_and_produces_the_way_stream_fetch_mirrors() -> None:
    from faust.transport.consumer import Consumer as FaustConsumer

    drain = inspect.getsource(FaustConsumer._drain_messages)
    for step in ("getmany(timeout=1.0)", "_read_offset", "_add_gap", "_commit_every", "callback"):
        assert step in drain, (
            f"Faust's drain loop no longer has {step!r}: re-read stream/runtime/fetch.py"
        )
    assert "create_consumer" in inspect.getsource(faust.App._new_consumer)
    assert "self._new_transport()" in inspect.getsource(faust.App.transport.fget)  # type: ignore[attr-defined]
    assert callable(faust_aiokafka.Producer._ensure_producer)


def test_the_fetch_wait_is_the_brokers_default_unless_configured() -> None:
    from stream.runtime.faust_tuning import (
        FETCH_MAX_WAIT_MS,
        FETCH_MAX_WAIT_MS_TANSU,
        fetch_max_wait,
    )

    assert fetch_max_wait(True, {}) == FETCH_MAX_WAIT_MS_TANSU == 20
    assert fetch_max_wait(False, {}) == FETCH_MAX_WAIT_MS == 500
    assert fetch_max_wait(True, {"LEMONGRAPH_FETCH_MAX_WAIT_MS": " 100 "}) == 100
    assert fetch_max_wait(False, {"LEMONGRAPH_FETCH_MAX_WAIT_MS": "100"}) == 100
    for bad in ("0", "10001", "-5", "1.5", "soon"):
        with pytest.raises(ValueError, match="LEMONGRAPH_FETCH_MAX_WAIT_MS"):
            fetch_max_wait(True, {"LEMONGRAPH_FETCH_MAX_WAIT_MS": bad})


def test_tables_start_without_fausts_one_second_pause() -> None:
    # The replacement is Faust's own TableManager.on_start without its first line.
    import faust.tables.manager as manager

    from stream.runtime.faust_tuning import _start_tables_at_once, no_table_start_pause

    source = Path(manager.__file__).read_text(encoding="utf-8")
    start = source.index("    async def on_start(self) -> None:")
    body = source[start : source.index("\n    async def ", start + 10)]
    assert [line.strip() for line in body.splitlines()[2:] if line.strip()] == [
        "await self.sleep(1.0)",
        "if not self.should_stop:",
        "await self._update_channels()",
        "await self.recovery.start()",
    ], "Faust changed TableManager.on_start"
    no_table_start_pause()
    assert manager.TableManager.on_start is _start_tables_at_once


def test_every_group_member_takes_the_session_timeout_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stream.runtime.faust_tuning import common_settings
    from stream.runtime.kafka import GroupTimeouts, new_consumer

    assert GroupTimeouts.from_env({}) == GroupTimeouts(6000, 3000)
    assert GroupTimeouts.from_env({}).heartbeat_ms == 1000
    short = GroupTimeouts.from_env({"LEMONGRAPH_SESSION_TIMEOUT_MS": " 1500 "})
    assert (short.session_ms, short.heartbeat_ms) == (1500, 500)
    for bad in ("999", "60001", "1.5", "soon"):
        with pytest.raises(ValueError, match="LEMONGRAPH_SESSION_TIMEOUT_MS"):
            GroupTimeouts.from_env({"LEMONGRAPH_SESSION_TIMEOUT_MS": bad})

    monkeypatch.setenv("LEMONGRAPH_SESSION_TIMEOUT_MS", "2400")

    async def made() -> tuple[int, int]:
        member = new_consumer("127.0.0.1:9", group="g")  # an aiokafka consumer, not started
        try:
            return member._session_timeout_ms, member._heartbeat_interval_ms  # type: ignore[attr-defined]
        finally:
            await member.stop()

    assert asyncio.run(made()) == (2400, 800)
    options = common_settings("kafka://127.0.0.1:9", tmp_path, 4, tansu=True)
    assert (options["broker_session_timeout"], options["broker_heartbeat_interval"]) == (2.4, 0.8)


def test_a_worker_ends_its_stop_without_fausts_fixed_waits() -> None:
    from mode.worker import Worker as ModeWorker

    from stream.runtime.faust_tuning import PromptWorker

    # What PromptWorker replaces: mode's end of a stop, after the services stopped.
    source = inspect.getsource(ModeWorker._shutdown_loop)
    assert "self._gather_all()" in source, "mode changed Worker._shutdown_loop"
    assert "self._sentinel_task()" in source, "mode changed Worker._shutdown_loop"
    assert "await asyncio.sleep(1.0)" in inspect.getsource(ModeWorker._sentinel_task)
    assert "asyncio.sleep(0.1)" in inspect.getsource(ModeWorker._gather_all)

    loop = asyncio.new_event_loop()
    ended: list[str] = []

    async def never_ends() -> None:  # as an aiokafka client's metadata loop
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    async def ends_soon() -> None:
        await asyncio.sleep(0.01)
        ended.append("by itself")

    async def leaves_one_behind() -> None:  # made while the others unwind
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            asyncio.get_running_loop().create_task(never_ends())
            raise

    try:
        stuck = loop.create_task(never_ends())
        soon = loop.create_task(ends_soon())
        behind = loop.create_task(leaves_one_behind())
        worker = SimpleNamespace(loop=loop, SETTLE=0.1, UNWIND=1.0)
        PromptWorker._gather_all(worker)  # type: ignore[arg-type]
        assert stuck.cancelled()
        assert soon.done()
        assert not soon.cancelled()
        # and the task made while the others unwound was cancelled too
        assert behind.cancelled()
        assert sorted(ended) == ["by itself", "cancelled", "cancelled"]
        assert not asyncio.all_tasks(loop)
        PromptWorker._gather_all(worker)  # type: ignore[arg-type]  # nothing left: at once
    finally:
        loop.close()
    # The worker's and the agents service's Faust worker are this one.
    from stream.engine.worker import _worker_class

    assert issubclass(_worker_class(), PromptWorker)
    assert "PromptWorker(app" in inspect.getsource(importlib.import_module("agents.cli"))
