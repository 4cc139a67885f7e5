"""The RocksDB stores the agents' processes keep under LEMONGRAPH_DATA_DIR
(docs/operations.md, "What each process keeps"): a module of its own, below the
service and the channels that open them.

- the bound of what the agents service stores per job (a conversation's
  checkpoint: docs/agents.md, "Output bounds");
- :class:`Disk` and its :class:`Store`\\ s: a write the disk refuses (full,
  read-only, failing) is kept in memory, read back from there, and written once
  the disk takes writes again; nothing stops (docs/operations.md, "A full disk").
- :class:`Changelog`: what the conversations store has read of the
  ``conversations`` changelog, and whether the broker still has it; what it
  does not is forgotten and read again (docs/operations.md, "When the broker was
  reset"). The store is a copy of the changelog (every write goes there first),
  so forgetting loses nothing the broker has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rocksdict import AccessType, Rdict
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode, StorageError
from stream.runtime.fetch import exit_now
from stream.runtime.kafka import bootstrap_of, read_topic
from stream.runtime.partitions import home_partition
from stream.runtime.resets import ClusterWatch, LogReset, find_resets, fingerprint

from agents.errors import OutputError

__all__ = [
    "CHECKPOINT_MAX_BYTES",
    "Changelog",
    "CheckpointTooLarge",
    "Disk",
    "Store",
    "fitted",
    "open_store",
]

log = logging.getLogger(__name__)

#: Seconds between tries to write to a disk that refused a write.
RETRY_SECONDS = 5.0
#: A changelog read back for longer than this says so (and again each time as long).
SLOW_READ_BACK = 10.0
#: The most bytes kept in memory while the disk refuses writes; beyond it the
#: process stops (``ExitCode.DISK``): the changelog holds them, a restart reads them back.
HELD_MAX = 64 * 1024 * 1024
#: Free bytes the folder's disk needs before the stores are opened again.
FREE_MIN = 1024 * 1024

Key = bytes | int | str
Value = bytes | int | str


def open_store(path: Path, process: str, *, read_only: bool = False) -> Rdict:
    """A RocksDB store of ``lemongraph <process>``; a clear error when another
    process has it open."""
    try:
        if read_only:
            return Rdict(str(path), access_type=AccessType.read_only())
        return Rdict(str(path))
    except Exception as exc:  # rocksdict raises a bare Exception
        if "lock" in str(exc).lower():
            raise StorageError(
                f"{path}: another lemongraph {process} process uses this data folder; give "
                "each process its own LEMONGRAPH_DATA_DIR"
            ) from None
        raise StorageError(f"{path}: the store of {process} cannot be opened: {exc}") from None


#: The most a conversation's checkpoint may take, as JSON: below the agents
#: producer's ``max_request_size`` (Faust's default, 1,000,000 bytes), which
#: also holds the record's key, headers and framing (docs/agents.md, "Output
#: bounds").
CHECKPOINT_MAX_BYTES = 900_000


class CheckpointTooLarge(OutputError):
    """A conversation whose checkpoint is over :data:`CHECKPOINT_MAX_BYTES` even
    with none of its turns: what is left is what a replay needs (the run's
    tape, the open tasks, the subject, the flows' state)."""


def fitted(data: dict[str, Any], bound: int = CHECKPOINT_MAX_BYTES) -> tuple[bytes, int]:
    """The checkpoint of a conversation (``Conversation.to_json``) within
    ``bound`` bytes, its oldest turns dropped first as far as needed (the model
    is sent only the newest): (its JSON, how many turns were dropped).
    :class:`CheckpointTooLarge` when it is over even without turns."""
    raw = orjson.dumps(data)
    if len(raw) <= bound:
        return raw, 0
    turns = list(data.get("turns") or [])
    over = len(raw) - bound
    dropped = freed = 0
    while dropped < len(turns) and freed < over:
        freed += len(orjson.dumps(turns[dropped])) + 1  # and its comma
        dropped += 1
    raw = orjson.dumps({**data, "turns": turns[dropped:]})
    if len(raw) > bound:
        raise CheckpointTooLarge(
            f"the conversation's checkpoint is {len(raw):,} bytes without {dropped} of its "
            f"turns, over the bound of {bound:,} (its run's tape, tasks, subject and flows)"
        )
    return raw, dropped


class Disk:
    """The stores of one process's folder, which fail and heal together: once a
    write to one of them fails for the disk, every store keeps its writes in
    memory (their order kept: the conversations before the offsets that say
    they were read), and every ``retry`` seconds, when the disk has room, the
    stores are opened again and what was kept is written."""

    def __init__(
        self, folder: Path, process: str, *, retry: float = RETRY_SECONDS, most: int = HELD_MAX
    ) -> None:
        self.folder = folder
        self.process = process
        self.retry = retry
        self.most = most
        self.stores: list[Store] = []
        #: What the disk said when it refused a write; None while it takes them.
        self.fault: str | None = None
        #: Bytes kept in memory, and how often the disk refused (since the start).
        self.held = 0
        self.faults = 0
        self._healing: asyncio.Task[None] | None = None

    def open(self, name: str) -> Store:
        """The store ``name`` of this folder."""
        store = Store(self, self.folder / name)
        self.stores.append(store)
        return store

    def failed(self, store: Store, exc: Exception) -> None:
        """A write to ``store`` failed: a disk's refusal is kept in memory from
        now on (said once); anything else is raised as a :class:`StorageError`."""
        text = str(exc)
        if "IO error" not in text:  # rocksdict's words for what the file system refused
            raise StorageError(f"{store.path}: {text}") from exc
        if self.fault is None:
            self.faults += 1
            log.warning(
                "%s: the disk refused a write to %s (%s): going on, with what is not stored "
                "kept in memory (the conversations topic has it); stored once the disk has room "
                "again, tried every %gs (docs/operations.md, 'A full disk')",
                self.process, store.path, text, self.retry,
            )  # fmt: skip
        self.fault = text
        self._heal_later()

    def hold(self, size: int) -> None:
        """``size`` more bytes kept in memory; past ``most``, stop loudly."""
        self.held += size
        if self.held > self.most:
            log.critical(
                "%s: stopped: the disk under %s has refused writes (%s) for longer than %d "
                "bytes of them can be kept in memory. Nothing is lost (the conversations "
                "topic has it): free space and start it again (docs/operations.md, 'A full "
                "disk')",
                self.process, self.folder, self.fault, self.most,
            )  # fmt: skip
            exit_now(ExitCode.DISK)

    def _heal_later(self) -> None:
        if self._healing is not None and not self._healing.done():
            return
        with contextlib.suppress(RuntimeError):  # no loop: the next write tries again
            self._healing = asyncio.get_running_loop().create_task(
                self.heal(), name=f"{self.process}: disk"
            )

    async def heal(self) -> None:
        """Try again every ``retry`` seconds until the disk takes writes."""
        while self.fault is not None:
            await asyncio.sleep(self.retry)
            self.try_again()

    def try_again(self) -> bool:
        """When the disk has room: open the stores again, write what was kept;
        True once every store writes again."""
        try:
            free = shutil.disk_usage(self.folder).free
        except OSError:
            return False
        if free < FREE_MIN:
            return False
        if not all([store.reopen() for store in self.stores]):
            return False
        fault, self.fault = self.fault, None
        written = 0
        for store in self.stores:
            done = store.write_held()
            if done is None:
                return False  # refused again: kept, tried again later
            written += done
        log.warning(
            "%s: the disk takes writes again (it had said: %s): %d writes kept in memory "
            "are stored", self.process, fault, written,
        )  # fmt: skip
        return True

    def close(self) -> None:
        """Close every store (what is still kept in memory is on the changelog)."""
        if self._healing is not None:
            self._healing.cancel()
        for store in self.stores:
            store.close()


class Store:
    """A RocksDB store of a :class:`Disk`, as much of ``Rdict`` as the agents
    use: ``get``, ``[key] = value``, ``delete``, ``items``, ``values``."""

    def __init__(self, disk: Disk, path: Path) -> None:
        self.disk = disk
        self.path = path
        self.db: Rdict | None = open_store(path, disk.process)
        #: Writes the disk has not taken yet, in order (None: a delete).
        self.held: dict[Key, Value | None] = {}

    def get(self, key: Key) -> Any:
        if key in self.held:
            return self.held[key]
        return self._db().get(key)

    def __getitem__(self, key: Key) -> Any:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: Key, value: Value) -> None:
        self._write(key, value)

    def delete(self, key: Key) -> None:
        self._write(key, None)

    def items(self) -> Iterator[tuple[Any, Any]]:
        for key, value in self._db().items():
            if key not in self.held:
                yield key, value
        for key, kept in list(self.held.items()):
            if kept is not None:
                yield key, kept

    def values(self) -> Iterator[Any]:
        for _key, value in self.items():
            yield value

    def _db(self) -> Rdict:
        if self.db is None:
            raise StorageError(f"{self.path}: not open (the disk refused it: {self.disk.fault})")
        return self.db

    def _write(self, key: Key, value: Value | None) -> None:
        if self.disk.fault is None:
            try:
                self._put(key, value)
                return
            except Exception as exc:  # rocksdict raises a bare Exception
                self.disk.failed(self, exc)
        self.held.pop(key, None)  # kept last: the order writes are made again in
        self.held[key] = value
        self.disk.hold(_size(key, value))

    def _put(self, key: Key, value: Value | None) -> None:
        if value is None:
            self._db().delete(key)
        else:
            self._db()[key] = value

    def reopen(self) -> bool:
        """Open the store again for writing (a store that refused a write takes
        none until then); else for reading only. True when it writes again."""
        if self.db is not None:
            with contextlib.suppress(Exception):  # it says the write it refused again
                self.db.close()
            self.db = None
        try:
            self.db = open_store(self.path, self.disk.process)
            return True
        except StorageError as exc:
            log.info("%s: not open for writing yet: %s", self.path, exc)
        self.db = open_store(self.path, self.disk.process, read_only=True)
        return False

    def write_held(self) -> int | None:
        """Write what was kept, in order; how many, or None when the disk
        refused again (what is left is kept)."""
        written = 0
        for key, value in list(self.held.items()):
            try:
                self._put(key, value)
            except Exception as exc:  # rocksdict raises a bare Exception
                self.disk.failed(self, exc)
                return None
            del self.held[key]
            self.disk.held -= _size(key, value)
            written += 1
        return written

    def close(self) -> None:
        if self.db is not None:
            with contextlib.suppress(Exception):  # a store that refused a write says so again
                self.db.close()
            self.db = None


def _size(key: Key, value: Value | None) -> int:
    return sum(len(v) if isinstance(v, bytes | str) else 8 for v in (key, value) if v is not None)


@dataclass(frozen=True)
class ReadMark:
    """The last record of a changelog partition read into the store (a
    ``stream.runtime.resets.Watermark``)."""

    offset: int
    timestamp_ms: int = -1
    fingerprint: int = -1
    cluster: str = ""  # the store keeps one cluster id for every partition


class Changelog:
    """What the conversations store has read of the ``conversations`` changelog
    (kept in the offsets store: per partition the next offset to read, and the
    last record read; the broker's cluster id), and whether the broker still has
    it (stream/runtime/resets.py)."""

    def __init__(self, settings: Settings, topic: str, db: Store, offsets: Store) -> None:
        self.bootstrap = bootstrap_of(settings.kafka_url or "")
        self.security = settings.kafka_security
        self.partitions = settings.partitions
        self.topic, self.db, self.offsets = topic, db, offsets
        self.watch = ClusterWatch(self.bootstrap, "", self.security)
        #: The broker's cluster id, as :meth:`resets` last saw it.
        self.cluster = ""

    def start(self, partition: int) -> int:
        """The next offset of ``partition`` to read back."""
        return int(self.offsets.get(partition) or 0)

    def read(self, partition: int, offset: int, timestamp_ms: int, key: bytes, value: Any) -> None:
        """A record read back into the store (after it is stored)."""
        self.offsets[f"mark-{partition}"] = orjson.dumps([timestamp_ms, fingerprint(key, value)])
        self.offsets[partition] = offset + 1

    async def read_back(self, partitions: list[int]) -> list[bytes]:
        """Read the changelog partitions from where the store last read them to
        their end into the store (a tombstone deletes). The keys read. A read
        that takes long says so, with where it got to (a broker slow to answer
        holds the partitions' records until it ends)."""
        start = {p: self.start(p) for p in partitions}
        read: dict[bytes, None] = {}
        began = time.monotonic()
        said = began + SLOW_READ_BACK
        async for record in read_topic(self.bootstrap, self.topic, start=start, idle=0.3,
                                       security=self.security):  # fmt: skip
            if record.key is None:
                continue
            if record.value is None:
                self.db.delete(record.key)
            else:
                self.db[record.key] = record.value
            read[record.key] = None
            self.read(record.partition, record.offset, record.timestamp_ms, record.key,
                      record.value)  # fmt: skip
            if time.monotonic() > said:
                said += SLOW_READ_BACK
                log.warning("agents: reading back %s partitions %s: %d records in %.0f s, at "
                            "partition %d offset %d", self.topic, partitions, len(read),
                            time.monotonic() - began, record.partition, record.offset)  # fmt: skip
        took = time.monotonic() - began
        if took > SLOW_READ_BACK:
            log.warning("agents: reading back %s partitions %s took %.1f s (%d records)",
                        self.topic, partitions, took, len(read))  # fmt: skip
        return list(read)

    async def moved(self) -> bool:
        """Is the broker another one than the store was read from (a broker
        restarted empty, replaced)? False while it does not answer."""
        stored = self.offsets.get("cluster")
        if not stored:
            return False
        try:
            return bool(await self.watch.current(patience=5.0) != stored)
        except Exception:  # the record came from it: a broker slow to answer, checked next time
            return False

    async def resets(self, partitions: Iterable[int]) -> set[int]:
        """The partitions whose changelog is not the one the store read, each
        said in a line: every partition the store holds when the broker is
        another one; of ``partitions``, those whose log ends before what was
        read or holds another record there."""
        try:
            now = self.cluster = await self.watch.current()
        finally:
            await self.watch.close()  # kept open for :meth:`moved` only
        stored = self.offsets.get("cluster")
        if stored and stored != now:
            every = set(range(self.partitions)) | set(partitions)
            log.warning(
                "agents: the broker is now cluster %r, not %r (the one the conversations "
                "store was read from): it was reset or replaced. What the store holds of it is "
                "forgotten and read again from this broker (docs/operations.md, 'When the "
                "broker was reset')", now, stored,
            )  # fmt: skip
            return every
        if not stored:
            self.offsets["cluster"] = now
        marks = {p: self._mark(p) for p in partitions if self.start(p) > 0}
        found = await find_resets(
            self.bootstrap, self.topic, marks, now, security=self.security, compacted=True
        )
        for reset in found:
            log.warning("agents: %s", _said(reset))
        return {r.partition for r in found}

    def _mark(self, partition: int) -> ReadMark:
        raw = self.offsets.get(f"mark-{partition}")
        timestamp_ms, crc = orjson.loads(raw) if raw else (-1, -1)
        return ReadMark(self.start(partition) - 1, int(timestamp_ms), int(crc))

    def forget(self, partitions: set[int]) -> int:
        """Forget what the store holds of ``partitions`` (conversations, prompt
        runs, where their changelog was read to), and note the broker's cluster
        id as :meth:`resets` saw it. The number of records forgotten."""
        gone = [key for key, raw in self.db.items() if self._partition_of(key, raw) in partitions]
        for key in gone:
            self.db.delete(key)
        for partition in partitions:
            self.offsets.delete(f"mark-{partition}")
            self.offsets.delete(partition)
        if self.cluster:
            self.offsets["cluster"] = self.cluster  # last: a crash before forgets again
        return len(gone)

    def _partition_of(self, key: Key, raw: Any) -> int:
        """The partition a stored record was read from or written to."""
        try:
            partition = orjson.loads(raw).get("partition")
        except (orjson.JSONDecodeError, AttributeError):
            partition = None
        if isinstance(partition, int):
            return partition
        name = key if isinstance(key, bytes) else str(key).encode()
        # A flow's records are keyed "{job}\x00flow/..." (agents/flows/checkpoint.py):
        # they go where their job's conversation goes.
        return home_partition(name.split(b"\x00", 1)[0], self.partitions)

    async def close(self) -> None:
        await self.watch.close()


def _said(reset: LogReset) -> str:
    return (
        f"{reset.topic} partition {reset.partition} was reset or recreated: the "
        f"conversations store has read it up to offset {reset.applied}, but {reset.found}. "
        "What the store holds of it is forgotten and read again from the broker "
        "(docs/operations.md, 'When the broker was reset')"
    )
