"""Small aiokafka helpers for the operator commands (no Faust here)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from .errors import KafkaUnavailable

__all__ = [
    "ConsumedRecord",
    "KafkaUnavailable",
    "bootstrap_of",
    "caught_up",
    "producer",
    "read_topic",
    "run",
    "topic_partitions",
]


def bootstrap_of(url: str) -> str:
    """``kafka://h1:9092;h2:9092`` → ``h1:9092,h2:9092``."""
    rest = url.split("://", 1)[1] if "://" in url else url
    return ",".join(part.strip() for part in rest.replace(";", ",").split(",") if part.strip())


@asynccontextmanager
async def producer(bootstrap: str, **options: Any) -> AsyncIterator[AIOKafkaProducer]:
    """A started producer that is flushed and stopped on exit."""
    options.setdefault("linger_ms", 5)
    client = AIOKafkaProducer(bootstrap_servers=bootstrap, **options)
    try:
        await client.start()
    except BaseException:
        await client.stop()
        raise
    try:
        yield client
        await client.flush()
    finally:
        await client.stop()


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record read back."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


async def _start(consumer: AIOKafkaConsumer) -> None:
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    # A consumer without a group stopped right after it started can raise
    # CancelledError from its never-scheduled housekeeping task: let it run once.
    await asyncio.sleep(0)
    await consumer.topics()  # fresh metadata for every topic
    return sorted(consumer.partitions_for_topic(topic) or ())


async def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    """The partitions of ``topic`` (empty when it does not exist)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await _start(consumer)
    try:
        return await _partitions(consumer, topic)
    finally:
        await consumer.stop()


async def caught_up(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
    """Has ``consumer`` read every partition up to its high watermark, as fetch
    responses report it? (The embedded broker's ListOffsets answer is off by up to
    a batch, so end_offsets() cannot be used for this.)"""
    for tp in tps:
        high = consumer.highwater(tp)
        if high is None or await consumer.position(tp) < high:
            return False
    return True


async def read_topic(
    bootstrap: str,
    topic: str,
    *,
    follow: bool = False,
    idle: float = 1.5,
    timeout: float | None = None,
    start: Mapping[int, int] | None = None,
) -> AsyncIterator[ConsumedRecord]:
    """Every record of ``topic`` from the beginning, in order per partition
    (with ``start``: only those partitions, each from the offset given; an
    offset the log no longer holds reads from its beginning).

    Without ``follow`` it stops once every partition has been read up to its
    high watermark (as the fetch reports it: the embedded broker's ListOffsets
    answer is off by up to a batch) and nothing new arrived for ``idle`` seconds.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await _start(consumer)
    try:
        partitions = await _partitions(consumer, topic)
        if start is not None:
            partitions = [p for p in partitions if p in start]
        if not partitions:
            return
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp in tps:
            if start is not None and start[tp.partition] > 0:
                consumer.seek(tp, start[tp.partition])
        started = last = time.monotonic()
        while True:
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batches.items():
                for r in records:
                    yield ConsumedRecord(
                        tp.topic,
                        tp.partition,
                        r.offset,
                        r.timestamp,
                        r.key,
                        r.value,
                        tuple(r.headers or ()),
                    )
                if records:
                    last = time.monotonic()
            now = time.monotonic()
            if timeout is not None and now - started > timeout:
                return
            if follow:
                continue
            if await caught_up(consumer, tps) and now - last >= min(idle, 0.3):
                return
            # Without a high watermark for every partition yet, give the broker
            # longer before deciding that the topic has nothing more.
            if now - last >= max(idle, 5.0):
                return
    finally:
        await consumer.stop()


def run(coro: Any) -> Any:
    """``asyncio.run`` for the CLI: Kafka errors become :class:`KafkaUnavailable`."""
    try:
        return asyncio.run(coro)
    except KafkaError as exc:
        raise KafkaUnavailable(str(exc)) from None
