"""RocksDB's memory in a worker (issue 19): the LEMONGRAPH_ROCKSDB_* settings,
the options every partition database is opened with (one block cache, one
memtable budget, index and filter blocks in the cache), and the bench's
helpers that write sleeping jobs straight into a worker's databases
(stream/bench/idle.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import faust
import pytest
import rocksdict
from faust.transport.drivers import aiokafka as faust_aiokafka

from stream.bench.idle import job_rows, partition_databases, write_jobs
from stream.engine.store import decode_stored, peek_header
from stream.engine.table import JobTable
from stream.engine.timers import DUE_VALUE, INDEX_MARK, JOBS, due_range, parse_due_key
from stream.runtime.config import ConfigError, RocksDBMemory, Settings
from stream.runtime.faust_tuning import BoundedRocksDBOptions, bound_rocksdb, rocksdb_memory
from stream.runtime.partitions import home_partition
from topics import Topics

ROOT = Path(__file__).resolve().parents[3]
MB = 1 << 20


def test_the_defaults() -> None:
    memory = Settings.from_env({}, Path("/nonexistent/.env")).rocksdb
    assert memory == RocksDBMemory(
        block_cache_mb=64, write_buffer_mb=16, write_buffers=2, memtables_mb=64, max_open_files=256
    )


def test_every_setting_is_read() -> None:
    env = {
        "LEMONGRAPH_ROCKSDB_BLOCK_CACHE_MB": "256",
        "LEMONGRAPH_ROCKSDB_WRITE_BUFFER_MB": "32",
        "LEMONGRAPH_ROCKSDB_WRITE_BUFFERS": "3",
        "LEMONGRAPH_ROCKSDB_MEMTABLES_MB": "128",
        "LEMONGRAPH_ROCKSDB_MAX_OPEN_FILES": "1000",
    }
    assert Settings.from_env(env, Path("/nonexistent/.env")).rocksdb == RocksDBMemory(
        256, 32, 3, 128, 1000
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("LEMONGRAPH_ROCKSDB_BLOCK_CACHE_MB", "lots", "is not a whole number"),
        ("LEMONGRAPH_ROCKSDB_BLOCK_CACHE_MB", "0", "must be at least 1"),
        ("LEMONGRAPH_ROCKSDB_WRITE_BUFFER_MB", "0", "must be at least 1"),
        ("LEMONGRAPH_ROCKSDB_WRITE_BUFFERS", "1", "must be at least 2"),
        ("LEMONGRAPH_ROCKSDB_WRITE_BUFFERS", "17", "must be at most 16"),
        ("LEMONGRAPH_ROCKSDB_MEMTABLES_MB", "1.5", "is not a whole number"),
        ("LEMONGRAPH_ROCKSDB_MAX_OPEN_FILES", "8", "must be at least 16"),
    ],
)
def test_a_bad_value_names_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}={value!r} {message}"):
        Settings.from_env({name: value}, Path("/nonexistent/.env"))


def test_a_memtable_budget_below_one_memtable_is_refused() -> None:
    env = {"LEMONGRAPH_ROCKSDB_WRITE_BUFFER_MB": "64", "LEMONGRAPH_ROCKSDB_MEMTABLES_MB": "32"}
    with pytest.raises(ConfigError, match=r"MEMTABLES_MB=32 is less than one memtable"):
        Settings.from_env(env, Path("/nonexistent/.env"))


def test_every_partition_database_shares_one_cache_and_one_memtable_budget(
    tmp_path: Path,
) -> None:
    """Faust's store opens its partitions' databases with the bounded options:
    one block cache for all of them (its usage counted once, by the cache),
    index and filter blocks inside it, memtables under one budget."""
    app = faust.App("pin-memory", datadir=str(tmp_path), store="rocksdb://", web_enabled=False)
    faust_table = app.Table("jobstate", partitions=4, key_type=bytes, value_type=bytes)
    store: Any = faust_table.data
    options = BoundedRocksDBOptions(RocksDBMemory(block_cache_mb=8, memtables_mb=16))
    bound_rocksdb(store, options)
    assert store.rocksdb_options is options
    table = JobTable(faust_table)
    rows = [(f"job-{i}", i % 4, b"x" * 200) for i in range(20_000)]
    table.write(rows, {p: 1 for p in range(4)})
    for db in store._dbs.values():
        db.flush()
    assert len(store._dbs) == 4
    # Reading every row fills the one cache; it stays within its capacity.
    for key, p, _value in rows:
        assert table.get(key, p) == b"x" * 200
    memory = rocksdb_memory(store)
    assert 0 < memory["block_cache"] <= 8 * MB
    # Index and filter blocks are in the cache, not held beside it by each
    # open table file.
    assert memory["table_readers"] < 64 * 1024, memory
    assert options.write_buffers.get_buffer_size() == 16 * MB
    assert options.write_buffers.enabled()


def test_a_store_with_open_databases_is_not_rebound(tmp_path: Path) -> None:
    app = faust.App("pin-rebind", datadir=str(tmp_path), store="rocksdb://", web_enabled=False)
    faust_table = app.Table("jobstate", partitions=2, key_type=bytes, value_type=bytes)
    JobTable(faust_table).write([("job", 0, b"v")], {})
    with pytest.raises(RuntimeError, match="opened databases already"):
        bound_rocksdb(faust_table.data, BoundedRocksDBOptions(RocksDBMemory()))
    with pytest.raises(TypeError, match="not a Faust RocksDB store"):
        bound_rocksdb(object(), BoundedRocksDBOptions(RocksDBMemory()))


def test_the_worker_app_opens_its_table_with_the_settings(tmp_path: Path) -> None:
    from stream.engine.app import build_app
    from stream.engine.registry import Registry

    settings = Settings.from_env(
        {
            "LEMONGRAPH_KAFKA_URL": "kafka://127.0.0.1:1",
            "LEMONGRAPH_DATA_DIR": str(tmp_path),
            "LEMONGRAPH_ROCKSDB_BLOCK_CACHE_MB": "12",
        },
        Path("/nonexistent/.env"),
    )
    # build_app patches Faust's consumer factory (stream/runtime/faust_tuning.py): put it back.
    factory = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer
    try:
        running = build_app(settings, Registry([]), ticker=False)
    finally:
        faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = factory  # type: ignore[method-assign]
    options = running.table.table.data.rocksdb_options
    assert isinstance(options, BoundedRocksDBOptions)
    assert options.block_cache_size == 12 * MB
    assert options.memory == settings.rocksdb
    # The table's changelog is the topic the gateway reads the jobs' states from.
    assert running.table.changelog_topic == Topics(settings.topic_prefix).jobstate


def test_sleeping_jobs_are_written_as_the_engine_stores_them(tmp_path: Path) -> None:
    now = datetime(2026, 1, 5, 9, tzinfo=UTC)
    rows = list(job_rows(ROOT / "examples", 40, 4, now=now, prefix="idle"))
    assert len(rows) == 80  # a job and its due-time index row each
    jobs = {key: (p, value) for p, key, value in rows if not key.startswith(b"\x00")}
    index = [(p, key.decode()) for p, key, _value in rows if key.startswith(b"\x00")]
    assert sorted(jobs) == [f"idle-{i:07d}".encode() for i in range(40)]
    for key, (p, raw) in jobs.items():
        assert p == home_partition(key, 4)
        stored = decode_stored(raw)
        assert stored.state.key == key.decode()
        assert stored.partition == p
        assert peek_header(raw)[1] == stored.next_due_ms
        assert stored.next_due_ms == int((now + timedelta(days=7)).timestamp() * 1000)
    for p, row in index:
        due, name = parse_due_key(row)
        assert jobs[name.encode()][0] == p
        assert due == decode_stored(jobs[name.encode()][1]).next_due_ms
        assert due_range(JOBS, due)[0] <= row < due_range(JOBS, due)[1]
    # Into databases a worker created (each with the index mark), readable back.
    dbs = {p: tmp_path / f"v1/tables/jobstate-{p}.db" for p in range(4)}
    for path in dbs.values():
        db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
        db[INDEX_MARK.encode()] = DUE_VALUE
        db.close()
    assert partition_databases(tmp_path) == dbs
    assert write_jobs(dbs, iter(rows)) == 80
    db = rocksdict.Rdict(str(dbs[1]), options=rocksdict.Options(raw_mode=True))
    try:
        mine = [k for k, (p, _v) in jobs.items() if p == 1]
        assert all(db.get(k) == jobs[k][1] for k in mine)
    finally:
        db.close()


def test_a_database_without_the_index_mark_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobstate-0.db"
    rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True)).close()
    with pytest.raises(RuntimeError, match="no due-time index mark"):
        write_jobs({0: path}, iter([(0, b"k", b"v")]))


def test_a_state_cache_entry_is_measured_and_the_quick_run_keeps_smaller_idle_figures() -> None:
    from stream.bench.micro import state_cache_bytes_per_entry
    from stream.bench.run import Parameters

    per_entry = state_cache_bytes_per_entry(ROOT / "examples", 200)
    assert 1_000 < per_entry < 100_000, per_entry  # a decoded job: kilobytes, not bytes or MB
    quick, full = Parameters.for_run(True), Parameters.for_run(False)
    assert (full.idle_small, full.idle_large, full.cold_restore_jobs) == (
        10_000,
        1_000_000,
        100_000,
    )
    assert quick.idle_small < quick.idle_large < full.idle_large
    assert quick.cold_restore_jobs < full.cold_restore_jobs
