"""What a topic holds, in bytes: its records' own bytes (key + value + header
names and values, as the producer was given them) and the record batches the
broker stores and serves (batch headers, record framing and the codec's
compression included; docs/kafka.md, "Compression").

The batches are read with raw Fetch requests, so they are counted as the broker
returns them: a broker that stored them compressed returns them compressed (the
embedded broker keeps everything in memory, so there is no log segment to
measure on disk; Apache Kafka writes these same batches to its segments).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from aiokafka import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import TopicPartition

from stream.runtime.errors import BenchError
from stream.runtime.kafka import KafkaSecurity, client_kwargs

__all__ = ["CODECS", "TopicBytes", "topic_bytes"]

#: A record batch's codec, by the low three bits of its attributes.
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: A record batch (magic 2) starts: base offset (8), batch length (4), leader
#: epoch (4), magic (1), CRC (4), attributes (2), last offset delta (4).
_HEAD = struct.Struct(">qi")
_ATTRIBUTES = struct.Struct(">h")
_DELTA = struct.Struct(">i")


@dataclass
class TopicBytes:
    """One topic's records and bytes."""

    records: int = 0
    #: Key + value + header names and values of every record.
    produced: int = 0
    #: The record batches as the broker serves them.
    stored: int = 0
    batches: int = 0
    #: How many batches each codec compressed.
    codecs: dict[str, int] = field(default_factory=dict)


def _batches(data: bytes) -> list[tuple[int, int, memoryview]]:
    """The whole record batches in a fetch's records: (next offset, codec, bytes)."""
    out = []
    view = memoryview(data)
    pos = 0
    while len(data) - pos >= _HEAD.size:
        base, length = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        if end > len(data):
            break  # a batch cut off by the fetch's byte limit
        (attributes,) = _ATTRIBUTES.unpack_from(data, pos + 21)
        (delta,) = _DELTA.unpack_from(data, pos + 23)
        out.append((base + delta + 1, attributes & 0x07, view[pos:end]))
        pos = end
    return out


async def topic_bytes(
    bootstrap: str, topics: list[str], security: KafkaSecurity
) -> dict[str, TopicBytes]:
    """Every record of ``topics``, from the start of each partition, counted."""
    client = AIOKafkaClient(**client_kwargs(bootstrap, security))
    await client.bootstrap()
    try:
        found: dict[str, TopicBytes] = {}
        for topic in topics:
            await client._wait_on_metadata(topic)
            counted = found[topic] = TopicBytes()
            for partition in sorted(client.cluster.partitions_for_topic(topic) or ()):
                await _count_partition(client, TopicPartition(topic, partition), counted)
        return found
    finally:
        await client.close()


async def _count_partition(client: AIOKafkaClient, tp: TopicPartition, into: TopicBytes) -> None:
    node = client.cluster.leader_for_partition(tp)
    if node is None or node < 0:
        raise BenchError(f"{tp.topic} partition {tp.partition} has no leader")
    offset = 0
    while True:
        # The embedded broker answers a fetch that may not wait with nothing:
        # let it wait a little (it holds a fetch for the whole wait when the
        # partition has nothing more, so this is also the cost of the last one).
        request = FetchRequest(20, 1, 16 << 20, 0, [(tp.topic, [(tp.partition, offset, 8 << 20)])])
        response = await client.send(node, request)
        records = b""
        for _topic, partitions in response.topics:
            for part in partitions:
                if part[1] != 0:
                    raise BenchError(f"fetch {tp}: {for_code(part[1]).__name__}")
                records = part[-1] or b""
        batches = _batches(records)
        if not batches:
            return
        for next_offset, codec, raw in batches:
            into.batches += 1
            into.stored += len(raw)
            name = CODECS.get(codec, str(codec))
            into.codecs[name] = into.codecs.get(name, 0) + 1
            for record in DefaultRecordBatch(bytes(raw)):
                into.records += 1
                into.produced += len(record.key or b"") + len(record.value or b"")
                for name_, value in record.headers:
                    into.produced += len(name_.encode()) + len(value or b"")
            offset = next_offset


async def topic_bytes_under(
    bootstrap: str, prefix: str, security: KafkaSecurity
) -> dict[str, TopicBytes]:
    """:func:`topic_bytes` of every topic whose name starts with ``prefix``
    that holds a record, by its name after the prefix."""
    client = AIOKafkaClient(**client_kwargs(bootstrap, security))
    await client.bootstrap()
    try:
        metadata = await client.fetch_all_metadata()
        names = sorted(t for t in metadata.topics() if t.startswith(prefix))
    finally:
        await client.close()
    counted = await topic_bytes(bootstrap, names, security)
    return {name[len(prefix) :]: c for name, c in counted.items() if c.records}
