"""Produce a batch's records as Kafka record batches, one per topic-partition.

``producer.send`` costs about 20 µs of Python per record (a future, a metadata
check, the accumulator), and a decision makes four or five records. The
engine already knows every record's partition, so it fills aiokafka's
``BatchBuilder`` per topic-partition and submits whole batches
(``send_batch``): one future per batch, the record encoding done by aiokafka's
builder. Order within a partition is the order given. The builders come from
the producer's accumulator, so each batch is compressed with the producer's
``compression_type`` when it is closed (``LEMONGRAPH_KAFKA_COMPRESSION``,
docs/kafka.md, "Compression").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiokafka.errors import KafkaError

from stream.runtime.errors import ProduceError

__all__ = ["ProduceError", "Produced", "produce_batches"]


#: ``(topic, partition, key, value, timestamp ms or None, headers or None)``;
#: a None timestamp is the producer's clock.
Produced = tuple[str, int, bytes | None, bytes | None, int | None, list[tuple[str, bytes]] | None]


async def produce_batches(producer: Any, records: Iterable[Produced]) -> dict[tuple[str, int], int]:
    """Produce ``(topic, partition, key, value, timestamp, headers)`` records
    and wait until the broker has acknowledged every one. Returns the offset of
    the last record produced to each ``(topic, partition)``.

    ``producer`` is an ``aiokafka.AIOKafkaProducer`` (Faust's own, so that one
    client and one connection serve the worker)."""
    open_: dict[tuple[str, int], Any] = {}
    full: list[tuple[tuple[str, int], Any]] = []
    for topic, partition, key, value, timestamp, headers in records:
        where = (topic, partition)
        builder = open_.get(where)
        if builder is None:
            builder = open_[where] = producer.create_batch()
        extra = headers or []
        if builder.append(key=key, value=value, timestamp=timestamp, headers=extra) is None:
            # Full: a new batch. An empty batch takes any record (one larger
            # than the batch size travels alone, as with ``send``).
            full.append((where, builder))
            builder = open_[where] = producer.create_batch()
            builder.append(key=key, value=value, timestamp=timestamp, headers=extra)
    full.extend(open_.items())
    sent: list[tuple[tuple[str, int], int, asyncio.Future[Any]]] = []
    for where, builder in full:
        builder.close()
        try:
            future = await producer.send_batch(builder, where[0], partition=where[1])
        except (AssertionError, KafkaError) as exc:  # aiokafka asserts the partition exists
            raise ProduceError(
                f"cannot produce to {where[0]} partition {where[1]}: {exc!r}"
            ) from exc
        sent.append((where, builder.record_count(), future))
    last: dict[tuple[str, int], int] = {}
    for where, count, future in sent:
        try:
            meta = await future
        except Exception as exc:
            raise ProduceError(
                f"producing to {where[0]} partition {where[1]} failed: {exc!r}"
            ) from exc
        end = meta.offset + count - 1
        if end > last.get(where, -1):
            last[where] = end
    return last
