"""The two places lemongraph reaches into Faust's internals, pinned: if a Faust
upgrade moves them, these tests fail before a worker misbehaves.

* stream/table.py writes the job table as Faust's recovery does (per-partition
  RocksDB databases, WriteBatch, persisted changelog offsets);
* stream/faust_tuning.py lowers the fetch wait Faust hard-codes.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from stream.faust_tuning import set_fetch_max_wait
from stream.table import JobTable


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
        import stream.faust_tuning as tuning

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
