"""Settings Faust does not expose.

Faust creates its worker consumer with ``fetch_max_wait_ms=1500`` written into
the code. Apache Kafka answers a fetch as soon as one byte is there, so the
value only bounds idle polls; the embedded Tansu broker holds every fetch for
the whole wait, which put ~0.4 s of latency on each batch (measured: a record's
delivery took a median 363 ms with 1500 ms, 4 ms with 50 ms). This module lowers
the wait for the consumers Faust creates in this process.

Faust's worker ends its stop with two fixed waits: :class:`PromptWorker` leaves
them out (docs/operations.md, "How a worker stops").

Faust also opens each partition's RocksDB database with options of its own
(``faust.stores.rocksdb.RocksDBOptions``, which takes no app setting for them
and builds them anew per database): a 2 GiB block cache *per partition
database*, 3 memtables of 64 MiB each per database, and the index and filter
blocks of every table file held outside any cache, so growing with the rows
stored. :func:`bound_rocksdb` replaces a store's options before any database is
opened: one block cache for every partition database of the process, holding
their index and filter blocks too, and one memtable budget
(docs/operations.md, "Memory").

With ``stream/engine/table.py`` and ``stream/runtime/fetch.py`` this is one of the three
places that reach into Faust's internals; tests/stream/runtime/test_stream_faust.py
pins them (the RocksDB options: tests/stream/engine/test_rocksdb_memory.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import rocksdict
from faust.stores import rocksdb as faust_rocksdb
from faust.tables import manager as faust_tables
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.worker import Worker as FaustWorker

from stream.runtime.config import RocksDBMemory
from stream.runtime.errors import ConfigError
from stream.runtime.kafka import (
    GroupTimeouts,
    KafkaSecurity,
    compression_type,
    configured_security,
    leave_groups_of_generation_zero,
)

__all__ = [
    "FETCH_MAX_WAIT_ENV",
    "FETCH_MAX_WAIT_MS",
    "FETCH_MAX_WAIT_MS_TANSU",
    "BoundedRocksDBOptions",
    "PromptWorker",
    "bound_rocksdb",
    "common_settings",
    "fetch_max_wait",
    "no_table_start_pause",
    "rocksdb_memory",
    "set_fetch_max_wait",
]

#: How long a fetch may wait for data (see the module docstring): Apache Kafka
#: answers as soon as data is there; Tansu waits out the whole wait.
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_WAIT_MS_TANSU = 20
#: Overrides both (docs/operations.md, "Settings"): a longer wait costs latency
#: on the embedded broker and saves the CPU of idle polls (an idle worker polls
#: 50 times a second at 20 ms).
FETCH_MAX_WAIT_ENV = "LEMONGRAPH_FETCH_MAX_WAIT_MS"


def fetch_max_wait(tansu: bool, env: Mapping[str, str] | None = None) -> int:
    """The fetch wait of this process's Faust consumers: ``LEMONGRAPH_FETCH_MAX_WAIT_MS``
    when set (1 to 10,000), else the default for the broker (``ConfigError`` when it
    is not such a number)."""
    raw = (os.environ if env is None else env).get(FETCH_MAX_WAIT_ENV, "").strip()
    if not raw:
        return FETCH_MAX_WAIT_MS_TANSU if tansu else FETCH_MAX_WAIT_MS
    if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
        raise ConfigError(
            f"{FETCH_MAX_WAIT_ENV} must be a whole number of 1 to 10000 ms, got {raw!r}"
        )
    return int(raw)


def common_settings(
    kafka_url: str | None,
    datadir: Path,
    partitions: int,
    tansu: bool,
    security: KafkaSecurity | None = None,
    compression: str | None = None,
) -> dict[str, Any]:
    """Faust settings every lemongraph app uses, on Apache Kafka and on the
    embedded broker alike (the engine adds its batch settings to these);
    ``security``, and ``compression`` (a codec of ``stream.runtime.kafka.COMPRESSIONS``):
    the environment's when None."""
    chosen = security if security is not None else configured_security()
    timeouts = GroupTimeouts.from_env()
    options: dict[str, Any] = {
        "broker": kafka_url,
        "broker_credentials": chosen.faust_credentials(),
        "datadir": str(datadir),
        "web_enabled": False,
        "topic_partitions": partitions,
        "topic_replication_factor": 1,
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": 1.0,
        "key_serializer": "raw",
        "value_serializer": "raw",
        # Kafka's own batch compression, for everything the app produces: its
        # sends, its changelogs, and the engine's record batches (stream/runtime/produce.py
        # builds them with this producer's codec). docs/kafka.md, "Compression".
        "producer_compression_type": compression_type(compression),
        # Rejoining a group waits about the rebalance timeout; Faust's defaults
        # (tens of seconds) make every start slow. The same as every group's.
        "broker_rebalance_timeout": timeouts.rebalance_ms / 1000,
        "broker_session_timeout": timeouts.session_ms / 1000,
        "broker_heartbeat_interval": timeouts.heartbeat_ms / 1000,
    }
    if tansu:
        # Tansu reports the end offset of a partition as the base offset of its
        # last batch + 1, which trips Faust's recovery consistency check.
        options["recovery_consistency_check"] = False
    quiet_sensorless_rebalances()
    no_table_start_pause()
    leave_groups_of_generation_zero()
    return options


class PromptWorker(FaustWorker):
    """Faust's worker (mode's ``Worker``), without the two fixed waits that end its
    stop (docs/operations.md, "How a worker stops").

    Once the app's services have stopped, mode waits up to 1 s (ten 0.1 s sleeps)
    for the event loop's last tasks to end by themselves, cancels those left, and
    then runs the loop for one more second (its "sentinel" sleep) before closing
    it. The tasks left there are an aiokafka client's metadata loop and connection
    reader, which never end by themselves, so every stop of a worker or an agents
    service took 2 s more than its work (SIGTERM to exit: 2.03 s against about
    0.1 s here). Here the last tasks get 0.1 s to end; then whatever tasks are
    left, those made meanwhile included, are cancelled until none is, within 1 s
    in all; and the loop runs one last short turn for the callbacks their
    cancellation scheduled."""

    #: How long the loop's last tasks may end by themselves, then unwind once
    #: cancelled; and its last turn (seconds).
    SETTLE, UNWIND, LAST_TURN = 0.1, 1.0, 0.01

    def _gather_all(self) -> None:
        tasks = asyncio.all_tasks(loop=self.loop)
        if not tasks:
            return
        self.loop.run_until_complete(asyncio.wait(tasks, timeout=self.SETTLE))
        deadline = time.monotonic() + self.UNWIND
        while left := asyncio.all_tasks(loop=self.loop):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return  # mode's close says which tasks were still pending
            for task in left:
                task.cancel()
            self.loop.run_until_complete(asyncio.wait(left, timeout=remaining))

    async def _sentinel_task(self) -> None:
        await asyncio.sleep(self.LAST_TURN)


class _SensorlessRebalance(logging.Filter):
    """Drops Faust's ``Missing sensor state for rebalance #N`` (and ``... rebalance
    end #N``). Not actionable: Faust's app asks its sensors for a state at every
    rebalance and warns when the answer is empty, which it always is for an app
    with no sensors installed, as ours (our metrics are lemongraph's own,
    docs/operations.md "Metrics", not Faust's per-message sensor hooks, which
    would cost the worker's batches a call per record). Every start printed it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Missing sensor state for rebalance" not in str(record.msg)


_SENSORLESS = _SensorlessRebalance()


def quiet_sensorless_rebalances() -> None:
    """Install :class:`_SensorlessRebalance` on Faust's app logger (once)."""
    logger = logging.getLogger("faust.app.base")
    if _SENSORLESS not in logger.filters:
        logger.addFilter(_SENSORLESS)


async def _start_tables_at_once(self: Any) -> None:
    """Faust's ``TableManager.on_start`` without its first line, a fixed
    ``await self.sleep(1.0)``."""
    if not self.should_stop:
        await self._update_channels()
        await self.recovery.start()


def no_table_start_pause() -> None:
    """Start Faust's tables without the second Faust waits first (its
    ``TableManager.on_start`` sleeps 1 s before it starts them, so that tables
    made while the app starts are in): our apps make their tables before they
    start, and every worker and agents start waited the second out
    (docs/operations.md, "Starting and stopping")."""
    faust_tables.TableManager.on_start = _start_tables_at_once  # type: ignore[method-assign]


_ORIGINAL = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer


def set_fetch_max_wait(milliseconds: int) -> None:
    """Make Faust's worker consumers (created from now on) wait at most this long
    for a fetch to fill."""

    def create(self: Any, transport: Any) -> Any:
        consumer = _ORIGINAL(self, transport)
        consumer._fetch_max_wait_ms = milliseconds  # read when the consumer starts
        return consumer

    faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]


_MB = 1 << 20


class BoundedRocksDBOptions(faust_rocksdb.RocksDBOptions):
    """Faust's RocksDB options with the memory of :class:`RocksDBMemory`: every
    database opened with one instance (every partition of a table; every table
    given the same instance) shares its block cache and memtable budget."""

    def __init__(self, memory: RocksDBMemory) -> None:
        super().__init__(
            max_open_files=memory.max_open_files,
            write_buffer_size=memory.write_buffer_mb * _MB,
            max_write_buffer_number=memory.write_buffers,
            block_cache_size=memory.block_cache_mb * _MB,
            use_rocksdict=True,
        )
        self.memory = memory
        #: Shared by every database opened with these options.
        self.cache = rocksdict.Cache(memory.block_cache_mb * _MB)
        self.write_buffers = rocksdict.WriteBufferManager(memory.memtables_mb * _MB, False)

    def as_options(self) -> Any:
        """Faust's options (raw keys, 3-bit bloom filters, binary-search index)
        with the shared cache and memtable budget; index and filter blocks live
        in the cache (bounded by it), the first level's pinned there."""
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_max_open_files(self.memory.max_open_files)
        options.set_write_buffer_size(self.write_buffer_size)
        options.set_target_file_size_base(self.target_file_size_base)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        options.set_write_buffer_manager(self.write_buffers)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, block_based=True)
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        return options


def bound_rocksdb(store: Any, options: BoundedRocksDBOptions) -> None:
    """Open ``store``'s databases (a Faust RocksDB store with the rocksdict
    driver, none open yet) with ``options``."""
    if not isinstance(store, faust_rocksdb.Store) or not store.use_rocksdict:
        raise TypeError(f"not a Faust RocksDB store on rocksdict: {store!r}")
    if store._dbs:
        raise RuntimeError("the store has opened databases already: bound it before")
    store.rocksdb_options = options


def rocksdb_memory(store: Any) -> dict[str, int]:
    """What RocksDB holds in memory for ``store``'s open databases, in bytes
    (RocksDB's own counters): memtables, table readers (outside the cache),
    block cache usage and its pinned part."""
    dbs = list(store._dbs.values())
    out = {"memtables": 0, "table_readers": 0}
    for db in dbs:
        out["memtables"] += db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        out["table_readers"] += db.property_int_value("rocksdb.estimate-table-readers-mem") or 0
    options = store.rocksdb_options
    if isinstance(options, BoundedRocksDBOptions):
        out["block_cache"] = options.cache.get_usage()
        out["block_cache_pinned"] = options.cache.get_pinned_usage()
    elif dbs:
        out["block_cache"] = sum(
            db.property_int_value("rocksdb.block-cache-usage") or 0 for db in dbs
        )
    return out
