"""The embedded broker's snapshot (stream/runtime/broker/snapshot.py): what one Tansu
held is produced back into another, empty one, at the same offsets, with the same
timestamps, headers, topic configs, committed offsets and cluster id; a snapshot that
is cut short, or a broker that is not empty, is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from stream.runtime.broker import EmbeddedBroker, ensure_topics
from stream.runtime.broker.snapshot import (
    SnapshotError,
    read_header,
    restore_snapshot,
    take_snapshot,
)
from stream.runtime.kafka import KafkaSecurity, new_consumer, read_topic

pytestmark = [pytest.mark.broker, pytest.mark.timeout(60)]

PLAIN = KafkaSecurity()


@pytest.fixture(scope="module")
def source() -> Iterator[EmbeddedBroker]:
    """A broker with two topics (one compacted, one with a config of its own),
    records with headers, null keys and a tombstone, and a group's commits."""
    with EmbeddedBroker() as broker:
        asyncio.run(fill(broker.bootstrap))
        yield broker


async def fill(bootstrap: str) -> None:
    await ensure_topics(
        bootstrap,
        {"events": 3, "state": 1},
        {"state"},
        security=PLAIN,
        configs={"events": {"max.message.bytes": "2097152"}},
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(
                "events",
                b"value-%d" % i,
                key=None if i % 7 == 0 else b"key-%d" % i,
                partition=i % 3,
                timestamp_ms=1_700_000_000_000 + i,
                headers=[("traceparent", b"00-%d" % i)] if i % 2 else [],
            )
            for i in range(300)
        ]
        await asyncio.gather(*sent)
        await producer.send_and_wait("state", b"{}", key=b"job-1", partition=0, timestamp_ms=5)
        await producer.send_and_wait("state", None, key=b"job-1", partition=0, timestamp_ms=6)
    finally:
        await producer.stop()
    consumer = new_consumer(bootstrap, PLAIN, group="worker")
    await consumer.start()
    try:
        commits = {TopicPartition("events", 1): OffsetAndMetadata(42, "")}
        consumer.assign(list(commits))
        await consumer.commit(commits)
    finally:
        await consumer.stop()


async def everything(bootstrap: str) -> list[Any]:
    return sorted(
        [
            (r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value, r.headers)
            async for topic in _topics()
            async for r in read_topic(bootstrap, topic, security=PLAIN, idle=0.3)
        ],
        key=lambda row: row[:3],
    )


async def _topics() -> Any:
    for topic in ("events", "state"):
        yield topic


async def committed(bootstrap: str) -> int | None:
    consumer = new_consumer(bootstrap, PLAIN, group="worker")
    await consumer.start()
    try:
        offset: int | None = await consumer.committed(TopicPartition("events", 1))
        return offset
    finally:
        await consumer.stop()


def test_a_snapshot_is_restored_at_the_same_offsets(source: EmbeddedBroker, tmp_path: Path) -> None:
    path = tmp_path / "broker.snapshot"
    taken = asyncio.run(take_snapshot(source.bootstrap, path, source.cluster_id, PLAIN))
    assert taken.header.records == 302
    assert read_header(path).topics["events"] == {
        "partitions": 3,
        "configs": {"max.message.bytes": "2097152"},
    }
    assert read_header(path).topics["state"]["configs"]["cleanup.policy"] == "compact"
    with EmbeddedBroker(cluster_id=taken.header.cluster_id) as target:
        restored = asyncio.run(restore_snapshot(target.bootstrap, path, PLAIN))
        assert restored.header.id == taken.header.id
        assert target.cluster_id == source.cluster_id
        assert asyncio.run(everything(target.bootstrap)) == asyncio.run(
            everything(source.bootstrap)
        )
        assert asyncio.run(committed(target.bootstrap)) == 42
        # Restoring again into the same broker would double every log: refused.
        with pytest.raises(SnapshotError, match="not empty"):
            asyncio.run(restore_snapshot(target.bootstrap, path, PLAIN))


def test_a_snapshot_cut_short_is_refused(source: EmbeddedBroker, tmp_path: Path) -> None:
    path = tmp_path / "broker.snapshot"
    asyncio.run(take_snapshot(source.bootstrap, path, source.cluster_id, PLAIN))
    path.write_bytes(path.read_bytes()[:-10])
    with EmbeddedBroker() as target, pytest.raises(SnapshotError, match="middle of a record"):
        asyncio.run(restore_snapshot(target.bootstrap, path, PLAIN))
    path.write_bytes(b"not a snapshot")
    with pytest.raises(SnapshotError, match="is not a broker snapshot"):
        read_header(path)
