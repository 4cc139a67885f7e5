"""stream.runtime.produce: record batches per topic-partition, against the real broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaProducer

from stream.runtime.broker import ensure_topics
from stream.runtime.kafka import KafkaSecurity, bootstrap_of, read_topic
from stream.runtime.produce import Produced, ProduceError, produce_batches


def _run(url: str, topic: str, records: Sequence[Produced]) -> object:
    async def go() -> object:
        await ensure_topics(
            bootstrap_of(url), {topic: 3}, compacted=set(), security=KafkaSecurity()
        )
        # A small batch size, so that the records span several batches.
        client = AIOKafkaProducer(bootstrap_servers=bootstrap_of(url), max_batch_size=4096)
        await client.start()
        try:
            return await produce_batches(client, records)
        finally:
            await client.stop()

    return asyncio.run(go())


def test_records_arrive_in_order_per_partition_and_the_last_offsets_are_reported(
    kafka_url: str,
) -> None:
    topic = f"produce-{uuid.uuid4().hex[:8]}"
    records: list[Produced] = [
        (topic, i % 3, f"k{i}".encode(), b"v%d-" % i + b"x" * 200, None, None) for i in range(300)
    ]
    last = _run(kafka_url, topic, records)
    assert last == {(topic, 0): 99, (topic, 1): 99, (topic, 2): 99}

    async def read() -> list[tuple[int, int, bytes | None, bytes | None]]:
        return [
            (r.partition, r.offset, r.key, r.value)
            async for r in read_topic(bootstrap_of(kafka_url), topic, idle=0.5)
        ]

    got = asyncio.run(read())
    for partition in range(3):
        mine = [(o, k, v) for p, o, k, v in got if p == partition]
        want = [(k, v) for _t, p, k, v, _ts, _h in records if p == partition]
        assert [(k, v) for _o, k, v in sorted(mine, key=lambda r: r[0])] == want
        assert [o for o, _k, _v in sorted(mine)] == list(range(100))


def test_a_record_larger_than_a_batch_travels_in_a_batch_of_its_own(kafka_url: str) -> None:
    topic = f"produce-{uuid.uuid4().hex[:8]}"
    records: list[Produced] = [
        (topic, 1, b"a", b"small", None, None),
        (topic, 1, b"b", b"x" * 10_000, None, None),
        (topic, 1, b"c", b"s", None, None),
    ]
    assert _run(kafka_url, topic, records) == {(topic, 1): 2}


def test_a_record_keeps_the_timestamp_and_headers_given(kafka_url: str) -> None:
    # A forwarded inbox record keeps its original's timestamp (its decision's
    # now) and carries where it came from; a dead letter carries its reason.
    topic = f"produce-{uuid.uuid4().hex[:8]}"
    headers = [("lemongraph.forwarded-from", b"p2@41"), ("other", b"\x00\xff")]
    records: list[Produced] = [
        (topic, 0, b"a", b"1", 1_700_000_000_123, headers),
        (topic, 0, b"b", None, None, None),
    ]
    assert _run(kafka_url, topic, records) == {(topic, 0): 1}

    async def read() -> list[tuple[int, tuple[tuple[str, bytes], ...], bytes | None]]:
        return [
            (r.timestamp_ms, r.headers, r.value)
            async for r in read_topic(bootstrap_of(kafka_url), topic, idle=0.5)
        ]

    first, second = asyncio.run(read())
    assert first == (1_700_000_000_123, tuple(headers), b"1")
    assert second[1:] == ((), None)
    assert second[0] > 1_700_000_000_123  # the producer's clock


def test_a_partition_the_topic_does_not_have_is_refused_by_name(kafka_url: str) -> None:
    topic = f"produce-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ProduceError, match=rf"cannot produce to {topic} partition 7"):
        _run(kafka_url, topic, [(topic, 7, b"k", b"v", None, None)])
