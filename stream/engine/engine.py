"""The imperative shell around the pure core, free of Faust so it can be read
and tested alone: records in, decisions made, outputs and state writes out.

A worker feeds it one batch of records at a time (``process``), produces every
output it returns and waits for the broker's acknowledgements, then writes the
states (``Batch.writes``) and only then lets the consumer commit. So:

* an output is never lost: state is written only after its outputs are acked;
* a re-delivered inbox record is recognised by the offset stored with its job
  and makes no second decision;
* a job's (and a schedule's) due-time index row is moved in the same table
  write as its state, and a tick reads only the rows due (stream/engine/timers.py,
  docs/operations.md "The due-time index"): nothing is rebuilt when partitions
  are assigned;
* a crash after the acks and before the state write re-decides the same records
  from the same state at the same ``now`` (a record's timestamp, a tick's ``at``):
  the re-emitted outputs are byte-identical, with the same ``task_id`` and
  decision ``seq``, so consumers can de-duplicate them (a dead letter's
  ``lemongraph.dlq.at`` header, the worker's clock, is the one exception).

Whatever client produced a record (docs/kafka.md, "Partitioning"):

* a job is decided only on its **home partition** (murmur2 of its key, as the
  Java client and aiokafka partition). A record a producer put elsewhere is
  forwarded there, carrying where it came from (``FORWARDED_FROM_HEADER``),
  and a job remembers the last offset it applied per origin partition
  (``store.Applied``), so a record forwarded twice is applied once. Every
  state, cache and offset check is keyed by (partition, job);
* a keyless record, or one beyond the decoder's limits, is dead-lettered;
* a record that makes deciding or encoding fail is dead-lettered with the
  exception as its reason, and the batch goes on (a failure that is not about
  one record, the broker's or the disk's, still stops the worker);
* a decision's ``now`` is the record's timestamp, but never more than the
  allowed skew ahead of the worker's clock (``clock`` in the decision record
  says when it was bounded), and a tick from further ahead is dead-lettered.

Schedules (docs/schedules.md) are decided the same way by ``stream/engine/schedules.py``
through :class:`ScheduleHook`: their records (``schedules``, ``schedule-runs``,
the inbox's ``schedule.wake``) and ticks come through :meth:`Engine.process`,
their states are ``Batch.rows`` written with the jobs, and every promise above
holds for them (see that module).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
from aiokafka.partitioner import murmur2

from compiler import (
    Event,
    JobGraph,
    JobState,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    Tick,
    from_iso,
    refusal,
    to_iso,
)
from stream.engine.registry import Registry
from stream.engine.store import (
    NOTHING_APPLIED,
    Applied,
    Stored,
    decode_stored,
    encode_stored,
    next_due_ms,
    peek_header,
)
from stream.engine.timers import (
    DUE_PREFIX,
    DUE_VALUE,
    INDEX_MARK,
    JOBS,
    SCHEDULES,
    clamp_due,
    due_key,
    due_range,
    parse_due_key,
)
from stream.runtime.errors import StorageError
from topics import (
    FORWARDED_FROM_HEADER,
    MAX_RECORD_BYTES,
    DeadLetter,
    InboxEvent,
    RecordError,
    ScheduleWake,
    TickRecord,
    Topics,
    decode_inbox,
    event_id,
)
from topics.build import (
    decision_record,
    job_snapshot,
    record_origin,
    task_closed_record,
    task_opened_record,
)

__all__ = [
    "DEFAULT_MAX_SKEW_MS",
    "Batch",
    "Engine",
    "JobRef",
    "Mark",
    "Output",
    "Record",
    "ScheduleHook",
    "StorageError",
    "home_partition",
    "snapshot_of",
    "watermark_key",
]

log = logging.getLogger("lemongraph.worker")

#: A job as the engine addresses it: (its home partition, its key). States,
#: the cache and offset checks are all keyed by it, never by the key alone.
JobRef = tuple[int, str]

#: A timer in the due-time index (stream/engine/timers.py): (partition, kind, name),
#: the kind ``JOBS`` or ``SCHEDULES``, the name a job key or a schedule id.
TimerRef = tuple[int, str, str]

#: Reads the rows of a partition's table whose keys are in [low, high), in key
#: order: ``scan(partition, low, high)``.
Scan = Callable[[int, str, str], Iterable[tuple[str, bytes]]]

Headers = list[tuple[str, bytes]]

#: How far a record's timestamp may run ahead of the worker's clock.
DEFAULT_MAX_SKEW_MS = 300_000

#: A dead letter of a forwarded copy keeps where the original was produced
#: under this name (not as ``lemongraph.forwarded-from``: see ``dead``).
DEADLETTER_FORWARDED_FROM = "lemongraph.dlq.forwarded-from"

#: 9999-12-31T23:59:59.999Z: the last instant a decision can be made at.
MAX_INSTANT_MS = 253_402_300_799_999

#: The most job keys whose home partition the engine remembers (a dict of
#: key → partition, emptied when full): murmur2 is pure Python in aiokafka
#: and a job's events come in a few at a time.
HOMES_KEPT = 100_000


def home_partition(key: bytes, partitions: int) -> int:
    """The partition a job lives on: murmur2 of its key, as the Java client's
    and aiokafka's default partitioner (and librdkafka's ``murmur2_random``)
    choose it."""
    index: int = murmur2(key)
    return (index & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class Record:
    """A consumed Kafka record, as the engine needs it.

    Here and for :class:`Output`: a worker makes several per input, so the
    ``__init__`` is written out (compiled, see setup.py, it constructs ~10x
    faster than a generated one) and the class is not frozen (as plain Python, a
    frozen one constructs ~3x slower). Neither is changed once made."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int  # -1: the record had none
    headers: Sequence[tuple[str, bytes]]

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp_ms = timestamp_ms
        self.headers = headers


@dataclass(slots=True)
class Output:
    """A record to produce, and the partition it goes to.

    The engine sends every output to the partition its input came from: every
    lemongraph topic has the inbox's partition count, so a job's records share
    one partition number everywhere (its order kept, compaction per key intact),
    and no partitioner runs per record. A forwarded inbox record (and a dead
    letter) carries headers, and a forward keeps its original's timestamp."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int
    timestamp_ms: int | None
    headers: Headers | None

    def __init__(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.headers = headers


@dataclass(frozen=True, slots=True)
class Mark:
    """A partition's inbox watermark: the last record handled there, with what
    identifies that record and the cluster it was read from, so that a log
    which was reset or recreated under the worker (the same offsets, other
    records) is recognised (``stream/engine/resets.py``)."""

    offset: int
    timestamp_ms: int = -1
    fingerprint: int = -1  # crc32 of key and value; -1: not known
    cluster: str = ""  # the broker's cluster id; "": not known

    @classmethod
    def of(cls, record: Record, cluster: str) -> Mark:
        """The mark of ``record``, read from cluster ``cluster``."""
        return cls(
            record.offset, record.timestamp_ms, fingerprint(record.key, record.value), cluster
        )

    def encode(self) -> bytes:
        """``offset timestamp fingerprint cluster`` as text."""
        return b"%d %d %d %s" % (
            self.offset,
            self.timestamp_ms,
            self.fingerprint,
            self.cluster.replace(" ", "_").encode() or b"-",
        )

    @classmethod
    def decode(cls, raw: bytes) -> Mark:
        """The inverse of :meth:`encode`; a bare offset (as stored before) too."""
        fields = raw.split(b" ")
        if len(fields) == 4:
            cluster = "" if fields[3] == b"-" else fields[3].decode("utf-8", "replace")
            return cls(int(fields[0]), int(fields[1]), int(fields[2]), cluster)
        return cls(int(fields[0]))


def fingerprint(key: bytes | None, value: bytes | None) -> int:
    """crc32 of a record's key and value."""
    return zlib.crc32(value or b"", zlib.crc32(key or b"\x00"))


@dataclass
class Batch:
    """What one batch decided: outputs to produce, then states to write."""

    outputs: list[Output] = field(default_factory=list)
    #: job → (inbox records applied, state), the latest of the batch
    states: dict[JobRef, tuple[Applied, JobState]] = field(default_factory=dict)
    #: jobs whose state changed (a refusal only records the offset it consumed)
    changed: set[JobRef] = field(default_factory=set)
    decisions: int = 0
    deadletters: int = 0
    skipped: int = 0  # re-delivered inbox records recognised and skipped
    duplicates: int = 0  # events whose idempotency key was applied before
    forwarded: int = 0  # inbox records sent on to their home partition
    bounded: int = 0  # decisions whose now the clock bound moved

    #: partition → the last inbox record this batch handled there (its Mark,
    #: with the record's checksum, is made once, in ``writes``)
    watermarks: dict[int, Record] = field(default_factory=dict)
    #: the broker's cluster id, recorded in each watermark
    cluster: str = ""

    #: (partition, table key) → other rows to write after the jobs: schedule
    #: states (stream/engine/schedules.py); None deletes the row
    rows: dict[tuple[int, str], bytes | None] = field(default_factory=dict)
    #: (partition, table key) → the watermarks of the other topics read
    #: (``schedules``, ``schedule-runs``), written last with the inbox's
    marks: dict[tuple[int, str], bytes] = field(default_factory=dict)
    #: timer → (its due time as stored, its due time now), for every job and
    #: schedule this batch read or decided: ``writes`` moves its index row
    #: when the two differ (stream/engine/timers.py)
    timers: dict[TimerRef, tuple[int | None, int | None]] = field(default_factory=dict)
    #: (index key, partition) of stale index rows a tick found, to delete
    stale: list[tuple[str, int]] = field(default_factory=list)
    #: (partition, kind) → where its ticks may start reading the index once
    #: this batch is stored (see ``Engine.settle``)
    floors: dict[tuple[int, str], int] = field(default_factory=dict)

    def writes(self) -> list[tuple[str, int, bytes | None]]:
        """The table rows to write, (key, partition, bytes or None to delete),
        in an order that any prefix of keeps the due-time index complete
        (stream/engine/timers.py): stale index rows deleted, the new index rows, every
        changed job, the other rows, the old index rows deleted, then each
        partition's watermarks — last, so a crash part-way leaves them behind
        the states — and each partition's index mark."""
        out: list[tuple[str, int, bytes | None]] = [(key, p, None) for key, p in self.stale]
        # Compared as their keys order them: two due times that clamp to one key
        # (both before 1970, say) are one row, which must not be put and deleted.
        moved = [
            (where, due)
            for where, due in self.timers.items()
            if (None if due[0] is None else clamp_due(due[0]))
            != (None if due[1] is None else clamp_due(due[1]))
        ]
        out.extend(
            (due_key(kind, now, name), p, DUE_VALUE)
            for (p, kind, name), (_was, now) in moved
            if now is not None
        )
        out.extend(
            (key, partition, encode_stored(partition, applied, state))
            for (partition, key), (applied, state) in self.states.items()
        )
        out.extend((key, p, raw) for (p, key), raw in self.rows.items())
        out.extend(
            (due_key(kind, was, name), p, None)
            for (p, kind, name), (was, _now) in moved
            if was is not None
        )
        out.extend(
            (watermark_key(p), p, Mark.of(record, self.cluster).encode())
            for p, record in sorted(self.watermarks.items())
        )
        out.extend((key, p, raw) for (p, key), raw in sorted(self.marks.items()))
        # Each partition's last row is the index's mark: a changelog whose last
        # record is another row was written by a worker that keeps no index
        # (an older version), and is indexed again (stream/engine/timers.py).
        out.extend((INDEX_MARK, p, DUE_VALUE) for p in sorted({p for _k, p, _r in out}))
        return out


#: The most job timers one tick fires (see ``Engine.tick_budget``).
TICK_BUDGET = 5_000

#: The most timers the engine keeps parked (see ``Engine._parked``).
PARKED_MAX = 10_000

#: Keys of the table that are not jobs start with a control character, which a
#: job key cannot contain (see topics.JobKey).
META_PREFIX = "\x00"


def watermark_key(partition: int) -> str:
    """The table key of a partition's inbox watermark."""
    return f"{META_PREFIX}inbox-watermark-{partition}"


class ScheduleHook(Protocol):
    """What the engine calls for schedules (stream/engine/schedules.py: it lives
    outside this compiled module and reads the engine through ``bind``)."""

    def bind(self, engine: Engine) -> None:
        """Called once by the engine it serves."""

    def topics(self) -> tuple[str, ...]:
        """The topics (besides inbox and ticks) whose records go to ``record``."""

    def record(self, record: Record, batch: Batch) -> None:
        """A record of one of :meth:`topics`."""

    def wake(
        self, record: Record, origin: tuple[int, int], message: ScheduleWake, batch: Batch
    ) -> None:
        """An inbox ``schedule.wake`` at its home partition."""

    def tick(self, record: Record, now_ms: int, batch: Batch) -> None:
        """A valid tick of ``record.partition`` at ``now_ms``: fire what is due."""

    def clear(self) -> None:
        """Partitions were reassigned: forget what is cached."""

    def indexed(self, key: str, raw: bytes) -> tuple[str, int | None] | None:
        """A stored row of the table whose key is ``META_PREFIX``...: (the
        schedule id, its due time) when it is a schedule's, else None."""

    def committed(self, batch: Batch) -> None:
        """The batch's writes are stored."""


def _dumps(data: Any) -> bytes:
    # Outputs are built in a fixed key order, so plain dumps is deterministic
    # (a re-decided record is byte-identical); only job state, which is hashed,
    # needs canonical (sorted) keys. Sorting cost a third of the encoding.
    return orjson.dumps(data)


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def snapshot_of(graph: JobGraph, state: JobState) -> dict[str, Any]:
    """The read-model view of a job (what goes to the ``jobs`` topic): a
    :class:`topics.JobSnapshot`, built by ``topics.build`` (this runs once per
    changed job per batch: validating our own output there would cost more
    than the decision)."""
    return job_snapshot(state.json(), graph.frontier(state), state.hash)


class Engine:
    """Decides batches of inbox and tick records for the partitions it owns.

    ``load`` reads a stored job (bytes) by key and partition from the table;
    ``partitions`` is the inbox's partition count (a job's home is
    :func:`home_partition`); ``wall_ms`` is the worker's clock, which bounds a
    record's timestamp (``max_skew_ms``) and dates dead letters.
    """

    def __init__(
        self,
        topics: Topics,
        registry: Registry,
        load: Callable[[str, int], bytes | None],
        *,
        partitions: int,
        cache_size: int = 10_000,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
        wall_ms: Callable[[], int] | None = None,
        cluster: str = "",
        schedules: ScheduleHook | None = None,
        scan: Scan | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, not {partitions}")
        self.topics = topics
        # The names the batch loop reads for every record and output (a Topics
        # property formats its name on each read).
        self._inbox_topic = topics.inbox
        self._ticks_topic = topics.ticks
        self._decisions_topic = topics.decisions
        self._tasks_topic = topics.tasks
        self._jobs_topic = topics.jobs
        self._deadletter_topic = topics.deadletter
        #: job key → its home partition (see HOMES_KEPT)
        self._homes: dict[bytes, int] = {}
        self.registry = registry
        self.load = load
        #: Reads the due-time index (stream/engine/timers.py); None: a table with no
        #: rows to scan (ticks fire only what the batch itself made due)
        self.scan: Scan = scan if scan is not None else _no_rows
        self.partitions = partitions
        self.max_skew_ms = max_skew_ms
        self.wall_ms: Callable[[], int] = wall_ms if wall_ms is not None else _wall_ms
        #: The broker's cluster id, recorded in each partition's watermark.
        self.cluster = cluster
        #: timer → (the due time a tick could not decide it at, the registry's
        #: size then, or -1 for a failure): not read again until the job (or
        #: schedule) is decided otherwise, a playbook is registered (for a job
        #: whose playbook was missing), or partitions are reassigned. Parked
        #: timers do not hold the floor back. At most PARKED_MAX, the oldest
        #: forgotten first (a forgotten one is read again after the next
        #: assignment or registration).
        self._parked: OrderedDict[TimerRef, tuple[int, int]] = OrderedDict()
        #: The registry's size when ticks last read the index.
        self._registered = len(registry)
        #: (partition, kind) → no row of the index is due before this: a tick
        #: reads from here, not over the deleted rows of the timers fired
        #: before (RocksDB tombstones, read until compaction drops them).
        #: Unknown after an assignment: the first tick reads from the start.
        self._floor: dict[tuple[int, str], int] = {}
        #: The most jobs' timers one tick reads from the index (and fires): the
        #: rest, still due, are the next tick's, so that a tick after downtime
        #: with every job due is not one batch of every job's decisions.
        self.tick_budget = TICK_BUDGET
        self._watermarks: dict[int, int] = {}
        #: partition → the last inbox offset seen since partitions were assigned
        self._seen: dict[int, int] = {}
        # Recently stored jobs, decoded: a job that just had an event is likely to
        # have another soon (a conversation), and decoding costs as much as
        # deciding. Holds committed states only, so a crash loses nothing.
        # With each its due time as stored (what the index holds for it).
        self._cache: OrderedDict[JobRef, tuple[Applied, JobState, int | None]] = OrderedDict()
        self.cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0
        #: Schedules (stream/engine/schedules.py); None: their topics are not read
        self.schedules = schedules
        self._schedule_topics: tuple[str, ...] = ()
        if schedules is not None:
            schedules.bind(self)
            self._schedule_topics = schedules.topics()

    def home(self, key: bytes) -> int:
        """The partition job ``key`` lives on."""
        homes = self._homes
        home = homes.get(key)
        if home is None:
            if len(homes) >= HOMES_KEPT:
                homes.clear()
            home = homes[key] = home_partition(key, self.partitions)
        return home

    # -- the due-time index ----------------------------------------------------------

    def assigned(self) -> None:
        """Partitions were (re)assigned: another worker may have decided for
        them meanwhile, so forget what is cached. The due-time index is in the
        table (stream/engine/timers.py): nothing is rebuilt."""
        self._parked.clear()
        self._floor.clear()
        self._watermarks.clear()
        self._cache.clear()
        self._seen.clear()
        if self.schedules is not None:
            self.schedules.clear()

    def index_rows(
        self, partition: int, stored: Iterable[tuple[str, bytes]], mark: bool = True
    ) -> list[tuple[str, int, bytes | None]]:
        """The due-time index of a partition's table stored before the index
        existed, from every stored job's and schedule's header (the states are
        not parsed), and (with ``mark``) ``INDEX_MARK``: rows to write once,
        through the changelog, when a partition without the mark is assigned.
        ``stored`` may be the table a part at a time, the mark with the last."""
        out: list[tuple[str, int, bytes | None]] = []
        schedules = self.schedules
        for key, raw in stored:
            if key.startswith(META_PREFIX):
                if key.startswith(DUE_PREFIX) or schedules is None:
                    continue
                found = schedules.indexed(key, raw)
                if found is not None and found[1] is not None:
                    out.append((due_key(SCHEDULES, found[1], found[0]), partition, DUE_VALUE))
                continue
            try:
                _home, due = peek_header(raw)
            except ValueError as exc:
                # Not a job this engine can read: deciding it fails too, record
                # by record; it must not stop the worker here.
                log.error("partition %d, table row %r: %s", partition, key, exc)
                continue
            if due is not None:
                out.append((due_key(JOBS, due, key), partition, DUE_VALUE))
        if mark:
            out.append((INDEX_MARK, partition, DUE_VALUE))
        return out

    def due(
        self, partition: int, kind: str, now_ms: int, batch: Batch, limit: int = 0
    ) -> list[tuple[int, str, bool]]:
        """The timers of ``kind`` due at or before ``now_ms`` in ``partition``,
        as (due ms, name, read from the table), earliest first: the index rows
        of the table up to ``now_ms`` (only those are read), with this batch's
        own due times in place of the stored ones. Check each with
        :meth:`fires` once its state is read. With ``limit``, at most that many
        rows that are not parked are read: the rest stay due, and the floor
        stays behind them."""
        if len(self.registry) != self._registered:
            # A playbook was registered: the timers parked for want of one
            # (below every floor) are read again.
            self._registered = len(self.registry)
            self._floor.clear()
        low, high = due_range(kind, now_ms)
        floor = self._floor.get((partition, kind))
        if floor is not None:
            low = max(low, due_key(kind, floor, ""))
        timers = batch.timers
        out: list[tuple[int, str, bool]] = []
        try:
            read = 0
            for key, _value in self.scan(partition, low, high) if low < high else ():
                due, name = parse_due_key(key)
                if (partition, kind, name) in timers or self.parked(partition, kind, name, due):
                    continue  # the batch's own due time (below), or parked
                out.append((due, name, True))
                read += 1
                if read == limit:
                    # Rows due after this one wait for the next tick.
                    where = (partition, kind)
                    batch.floors[where] = min(due, batch.floors.get(where, due))
                    break
        except Exception as exc:
            raise StorageError(
                f"cannot read the due-time index of partition {partition}: {exc}"
            ) from exc
        for (p, k, name), (_was, now) in timers.items():
            if p == partition and k == kind and now is not None and now <= now_ms:
                out.append((clamp_due(now), name, False))
        out.sort()
        return out

    def settle(
        self,
        partition: int,
        kind: str,
        now_ms: int,
        candidates: list[tuple[int, str, bool]],
        batch: Batch,
    ) -> None:
        """After a tick decided ``candidates`` (of :meth:`due`): every timer of
        ``kind`` that was due is now at its current due time (fired and moved,
        or kept), and none is earlier than the first of those, or ``now_ms + 1``.
        That is where the next tick starts reading, once the batch is stored
        (``committed`` lowers it again for every row the batch writes)."""
        floor = clamp_due(now_ms + 1)
        for due, name, _from_table in candidates:
            if self.parked(partition, kind, name, due):
                continue  # read again after what unparks it (see ``_parked``)
            entry = batch.timers.get((partition, kind, name))
            if entry is None:  # not read: its row stays
                floor = min(floor, due)
            elif entry[1] is not None:
                floor = min(floor, clamp_due(entry[1]))
        where = (partition, kind)
        batch.floors[where] = min(floor, batch.floors.get(where, floor))

    def parked(self, partition: int, kind: str, name: str, due: int) -> bool:
        """Could a tick not decide this timer at this due time (and has nothing
        that unparks it happened since)?"""
        entry = self._parked.get((partition, kind, name))
        if entry is None or entry[0] != due:
            return False
        return entry[1] in (-1, len(self.registry))

    def park(
        self, partition: int, kind: str, name: str, due: int, *, missing: bool = False
    ) -> None:
        """A tick failed to decide this timer (``missing``: its playbook is not
        registered): leave it until it is decided otherwise (or registered)."""
        parked = self._parked
        parked[(partition, kind, name)] = (due, len(self.registry) if missing else -1)
        parked.move_to_end((partition, kind, name))
        while len(parked) > PARKED_MAX:
            parked.popitem(last=False)

    def unpark(self, partition: int, kind: str, name: str) -> None:
        """The timer was decided otherwise: a tick may fire it again."""
        self._parked.pop((partition, kind, name), None)

    def fires(
        self, partition: int, kind: str, name: str, due: int, from_table: bool, batch: Batch
    ) -> bool:
        """Is ``due`` (of :meth:`due`) the timer's due time, now that its state
        was read (``batch.timers`` has it)? A row of the table that is not is
        stale (a changelog applied part-way: stream/engine/timers.py), and deleted."""
        where = (partition, kind, name)
        entry = batch.timers.get(where)
        now = entry[1] if entry is not None else None
        if now is not None and clamp_due(now) == due:
            return True
        if from_table:
            stale = (due_key(kind, due, name), partition)
            if stale not in batch.stale:
                batch.stale.append(stale)
        return False

    # -- batches ----------------------------------------------------------------------

    def rewound(self, records: Sequence[Record]) -> dict[int, tuple[int, int]]:
        """Inbox partitions whose offsets go back in ``records`` (or against
        what was seen since partitions were assigned): partition → (the last
        offset seen, the lower one now). Within one assignment a partition's
        offsets only grow, so this is a log that was reset under the worker,
        unless the broker shows otherwise (``stream/engine/resets.py``). Changes
        nothing; call it before :meth:`process`."""
        inbox = self.topics.inbox
        last: dict[int, int] = {}
        out: dict[int, tuple[int, int]] = {}
        for record in records:
            if record.topic != inbox:
                continue
            partition = record.partition
            before = last.get(partition, self._seen.get(partition, -1))
            if record.offset <= before and partition not in out:
                out[partition] = (before, record.offset)
            last[partition] = record.offset
        return out

    def forget_seen(self, partitions: Iterable[int]) -> None:
        """The broker showed these partitions' logs are the ones applied: start
        their offset order afresh."""
        for partition in partitions:
            self._seen.pop(partition, None)

    def process(self, records: Sequence[Record]) -> Batch:
        """Decide every record of the batch, in order."""
        batch = Batch(cluster=self.cluster)
        inbox, ticks = self._inbox_topic, self._ticks_topic
        seen = self._seen
        for record in records:
            if record.topic == inbox:
                seen[record.partition] = record.offset
                if record.offset <= self._watermark(record.partition, batch):
                    batch.skipped += 1  # re-delivered: handled before the last commit
                    continue
                batch.watermarks[record.partition] = record
                try:
                    self._inbox(record, batch)
                except StorageError:
                    raise  # not this record's fault: the worker stops, nothing is committed
                except Exception as exc:
                    # Nothing of this record reached the batch (see _decided):
                    # it is dead-lettered and the batch goes on.
                    log.warning("inbox %d@%d: %s", record.partition, record.offset, _why(exc))
                    self.dead(record, f"could not be decided: {_why(exc)}", batch)
            elif record.topic == ticks:
                self._tick(record, batch)
            elif record.topic in self._schedule_topics and self.schedules is not None:
                try:
                    self.schedules.record(record, batch)
                except StorageError:
                    raise
                except Exception as exc:  # see the inbox's case
                    log.warning(
                        "%s %d@%d: %s", record.topic, record.partition, record.offset, _why(exc)
                    )
                    self.dead(record, f"could not be decided: {_why(exc)}", batch)
            else:
                self.dead(record, f"unexpected topic {record.topic!r}", batch)
        # In the order the jobs were decided (a set's order is not stable across
        # processes, and a re-decided batch must come out byte for byte alike).
        for ref, (_applied, state) in batch.states.items():
            if ref not in batch.changed:
                continue
            graph = self.registry.graph(state.playbook_key, state.playbook_version)
            if graph is None:
                continue
            try:
                snapshot = _dumps(snapshot_of(graph, state))
            except Exception as exc:  # the decision is made; only its read-model view is lost
                log.error("job %r: no snapshot: %s", ref[1], _why(exc))
                continue
            batch.outputs.append(Output(self._jobs_topic, ref[1].encode(), snapshot, ref[0]))
        return batch

    def committed(self, batch: Batch) -> None:
        """The batch's writes are stored: its watermarks are now the floor, and
        its states the cached ones."""
        for partition, record in batch.watermarks.items():
            self._watermarks[partition] = record.offset
        floors = self._floor
        floors.update(batch.floors)
        for (p, kind, _name), (was, now) in batch.timers.items():
            if now is not None and now != was:
                where = (p, kind)
                known = floors.get(where)
                if known is not None and clamp_due(now) < known:
                    floors[where] = clamp_due(now)
        if self.schedules is not None:
            self.schedules.committed(batch)
        cache = self._cache
        timers = batch.timers
        for ref, (applied, state) in batch.states.items():
            entry = timers.get((ref[0], JOBS, ref[1]))
            cache[ref] = (applied, state, entry[1] if entry is not None else next_due_ms(state))
            cache.move_to_end(ref)
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def _watermark(self, partition: int, batch: Batch) -> int:
        """The last inbox offset handled in ``partition`` (-1: none)."""
        last = batch.watermarks.get(partition)
        if last is not None:
            return last.offset
        if partition not in self._watermarks:
            raw = self.load(watermark_key(partition), partition)
            self._watermarks[partition] = Mark.decode(raw).offset if raw is not None else -1
        return self._watermarks[partition]

    def _current(self, ref: JobRef, batch: Batch) -> tuple[Applied, JobState | None]:
        """(inbox records applied, state) — the batch's own writes first."""
        pending = batch.states.get(ref)
        if pending is not None:
            return pending
        where = (ref[0], JOBS, ref[1])
        cached = self._cache.get(ref)
        if cached is not None:
            self.cache_hits += 1
            self._cache.move_to_end(ref)
            if where not in batch.timers:
                batch.timers[where] = (cached[2], cached[2])
            return cached[0], cached[1]
        self.cache_misses += 1
        try:
            raw = self.load(ref[1], ref[0])
        except Exception as exc:
            # The table, not the record: stop the worker (see process).
            raise StorageError(f"cannot read job {ref[1]!r} of partition {ref[0]}: {exc}") from exc
        if raw is None:
            if where not in batch.timers:
                batch.timers[where] = (None, None)
            return NOTHING_APPLIED, None
        stored: Stored = decode_stored(raw)
        if where not in batch.timers:
            # The header's due time is the one its index row was written with.
            batch.timers[where] = (stored.next_due_ms, stored.next_due_ms)
        return stored.applied, stored.state

    # -- inbox ------------------------------------------------------------------------

    def _inbox(self, record: Record, batch: Batch) -> None:
        if record.key is None:
            reason = "no record key: an inbox record's key must be its job key"
            self.dead(record, reason, batch)
            return
        home = self.home(record.key)
        if home != record.partition:
            self._forward(record, home, batch)
            return
        origin = self._origin(record)
        try:
            message = decode_inbox(record.value, record.key)
            now_ms, bound = self.clock(record.timestamp_ms)
        except RecordError as exc:
            self.dead(record, exc.reason, batch)
            return
        if isinstance(message, ScheduleWake):
            if self.schedules is None:
                self.dead(record, "schedule.wake: this engine runs no schedules", batch)
            else:
                self.schedules.wake(record, origin, message, batch)
            return
        ref: JobRef = (home, message.key)
        applied, state = self._current(ref, batch)
        if applied.covers(origin[0], origin[1]):
            batch.skipped += 1  # re-delivered (or forwarded twice): applied already
            return
        now = _instant(now_ms)
        bounded = bound  # why now is not the record's timestamp (None: it is)
        if isinstance(message, InboxEvent):
            item: Event | Start = Event(
                message.action,
                message.value,
                message.properties or None,
                message.source,
                message.idempotency_key,
                None if message.idempotency_key else event_id(origin[0], origin[1]),
            )
            refused = refusal(state, item)  # the core's rule, before a graph is needed
            if refused is not None:
                self._refuse(
                    record, origin, ref, now, item, refused, batch, applied, state, bounded
                )
                return
            assert state is not None  # refusal() refuses an event for a job never started
            graph = self.registry.graph(state.playbook_key, state.playbook_version)
            if graph is None:
                reason = (
                    f"playbook {state.playbook_key} v{state.playbook_version} is not registered "
                    "on this worker"
                )
                self._refuse(record, origin, ref, now, item, reason, batch, applied, state, bounded)
                return
        else:
            item = Start(
                message.key, message.playbook_key, message.subject, tuple(message.contacts)
            )
            latest = self.registry.latest(message.playbook_key)
            if latest is None:
                reason = f"unknown playbook {message.playbook_key!r}"
                self._refuse(record, origin, ref, now, item, reason, batch, applied, state, bounded)
                return
            graph = latest
        step = graph.next(state, now, item)
        if bound is None and step.now != now:
            bounded = "job_clock"
        self._decided(record, origin, ref, graph, state, applied, step, batch, bounded)

    def _origin(self, record: Record) -> tuple[int, int]:
        """(partition, offset) where the record was produced: its own position,
        or the one its forwarded-from header names (honoured only on a record
        at its home partition that names another partition of the inbox)."""
        for name, value in record.headers:
            if name != FORWARDED_FROM_HEADER:
                continue
            try:
                where, offset = value.decode("ascii").removeprefix("p").split("@")
                partition, at = int(where), int(offset)
            except ValueError:
                break
            if 0 <= partition < self.partitions and partition != record.partition and at >= 0:
                return partition, at
            break
        return record.partition, record.offset

    def _forward(self, record: Record, home: int, batch: Batch) -> None:
        """Produce ``record`` to its home partition, saying where it came from."""
        if record.value is None:
            self.dead(record, "empty record (no value)", batch)  # as at home
            return
        size = len(record.value) + len(record.key or b"")
        size += sum(len(n) + len(v) for n, v in record.headers)
        if size > MAX_RECORD_BYTES:
            # Refused at home anyway; a copy could be larger than the broker takes.
            reason = f"record of {size:,} bytes is larger than the limit of {MAX_RECORD_BYTES:,}"
            self.dead(record, reason, batch)
            return
        headers = [(n, v) for n, v in record.headers if n != FORWARDED_FROM_HEADER]
        headers.append((FORWARDED_FROM_HEADER, b"p%d@%d" % (record.partition, record.offset)))
        timestamp = record.timestamp_ms if record.timestamp_ms >= 0 else None
        batch.outputs.append(
            Output(self._inbox_topic, record.key, record.value, home, timestamp, headers)
        )
        batch.forwarded += 1

    def clock(self, timestamp_ms: int) -> tuple[int, str | None]:
        """The instant to decide a record at (epoch ms), and why it is not the
        record's timestamp (None: it is)."""
        if timestamp_ms < 0:
            return self.wall_ms(), "no_timestamp"
        if timestamp_ms > MAX_INSTANT_MS:
            raise RecordError(
                f"record timestamp {timestamp_ms} ms is not an instant a decision can be "
                "made at (after 9999-12-31)"
            )
        limit = self.wall_ms() + self.max_skew_ms
        if timestamp_ms > limit:
            return limit, "worker_clock"
        return timestamp_ms, None

    # -- ticks ------------------------------------------------------------------------

    def _tick(self, record: Record, batch: Batch) -> None:
        try:
            tick = TickRecord.model_validate_json(record.value or b"")
            now = from_iso(tick.at)
        except ValueError as exc:
            self.dead(record, f"invalid tick: {exc}", batch)
            return
        now_ms = int(now.timestamp() * 1000)
        limit = self.wall_ms() + self.max_skew_ms
        if now_ms > limit:
            reason = (
                f"tick at {tick.at} is ahead of this worker's clock by more than the allowed "
                f"skew ({self.max_skew_ms / 1000:g}s, LEMONGRAPH_MAX_CLOCK_SKEW)"
            )
            self.dead(record, reason, batch)
            return
        origin = (record.partition, record.offset)
        partition = record.partition
        candidates = self.due(partition, JOBS, now_ms, batch, self.tick_budget)
        for due, key, from_table in candidates:
            if self.parked(partition, JOBS, key, due):
                continue
            ref: JobRef = (partition, key)
            try:
                applied, state = self._current(ref, batch)
                if not self.fires(partition, JOBS, key, due, from_table, batch):
                    continue
                if state is None:
                    continue
                graph = self.registry.graph(state.playbook_key, state.playbook_version)
                if graph is None:
                    # Nothing can fire without the playbook (refused events say
                    # why); the timer stays, so it fires once it is registered.
                    self.park(partition, JOBS, key, due, missing=True)
                    continue
                step = graph.next(state, now, Tick())
                self._decided(record, origin, ref, graph, state, applied, step, batch, None)
            except StorageError:
                raise
            except Exception as exc:
                # The job's timer stays off until its next event: firing it on
                # every tick would fail the same way every second.
                self.park(partition, JOBS, key, due)
                log.error("tick %d@%d, job %r: %s", record.partition, record.offset, key, _why(exc))
                self.dead(record, f"deciding job {key!r} on this tick failed: {_why(exc)}", batch)
        self.settle(partition, JOBS, now_ms, candidates, batch)
        if self.schedules is not None:
            self.schedules.tick(record, now_ms, batch)

    # -- outcomes ---------------------------------------------------------------------

    def _decided(
        self,
        record: Record,
        origin: tuple[int, int],
        ref: JobRef,
        graph: JobGraph,
        before: JobState | None,
        applied: Applied,
        step: Step,
        batch: Batch,
        clock: str | None,
    ) -> None:
        """Encode the decision, then add it to the batch. Everything that can
        fail happens before the batch is touched, so a failure leaves nothing of
        this record behind."""
        state = step.state
        where = (ref[0], JOBS, ref[1])
        if step.noop:
            self.unpark(ref[0], JOBS, ref[1])
            return
        if step.duplicate:
            # A retried idempotency key: applied once already, so no decision and
            # no write (a re-delivery of this retry is a duplicate again).
            batch.duplicates += 1
            return
        body = self._decision_body(record, origin, ref[1], graph, before, step, clock)
        encoded = [Output(self._decisions_topic, ref[1].encode(), _dumps(body), ref[0])]
        # The effects' JSON is in the decision record already: task records reuse it.
        for effect, data in zip(step.effects, body["effects"], strict=True):
            if isinstance(effect, TaskOpened) and state is not None:
                task = task_opened_record(data, state.playbook_key, state.subject, state.contacts)
            elif isinstance(effect, TaskClosed):
                task = task_closed_record(data)
            else:
                continue
            encoded.append(Output(self._tasks_topic, ref[1].encode(), _dumps(task), ref[0]))
        due = next_due_ms(state) if state is not None else None
        # -- nothing below can fail --
        if state is not None:
            inbox = record.topic == self._inbox_topic
            batch.states[ref] = (applied.after(origin[0], origin[1]) if inbox else applied, state)
            batch.changed.add(ref)
            self.unpark(ref[0], JOBS, ref[1])
            known = batch.timers.get(where)
            batch.timers[where] = (known[0] if known is not None else None, due)
        if clock is not None:
            batch.bounded += 1
        batch.decisions += 1
        batch.outputs.extend(encoded)

    def _decision_body(
        self,
        record: Record,
        origin: tuple[int, int],
        key: str,
        graph: JobGraph | None,
        before: JobState | None,
        step: Step,
        clock: str | None,
    ) -> dict[str, Any]:
        """A decision record (topics.DecisionRecord), as data."""
        playbook = graph.playbook if graph is not None else None
        return decision_record(
            key,
            playbook.key if playbook else None,
            playbook.version if playbook else None,
            record_origin(record.topic, origin[0], origin[1], record.partition, record.offset),
            before.hash if before is not None else None,
            step.to_json(),
            record.timestamp_ms,
            clock,
        )

    def _refuse(
        self,
        record: Record,
        origin: tuple[int, int],
        ref: JobRef,
        now: datetime,
        item: Event | Start,
        reason: str,
        batch: Batch,
        applied: Applied,
        state: JobState | None = None,
        clock: str | None = None,
    ) -> None:
        step = Step(state, now, item, refused=reason)
        body = self._decision_body(record, origin, ref[1], None, state, step, clock)
        output = Output(self._decisions_topic, ref[1].encode(), _dumps(body), ref[0])
        if state is not None:
            # Remember the offset, so a re-delivery is recognised without a
            # second decision.
            batch.states[ref] = (applied.after(origin[0], origin[1]), state)
        batch.decisions += 1
        batch.outputs.append(output)

    def dead(self, record: Record, reason: str, batch: Batch) -> None:
        letter = DeadLetter.of(
            record.topic,
            record.partition,
            record.offset,
            reason,
            to_iso(_instant(self.wall_ms())),
            record.timestamp_ms,
        )
        # A retry of the dead letter (its key and value, often with its headers)
        # must be a new record: the forwarded-from header would make it look
        # like a copy already applied. Where it came from is kept under its own name.
        original = [(n, v) for n, v in record.headers if n != FORWARDED_FROM_HEADER]
        original += [
            (DEADLETTER_FORWARDED_FROM, v) for n, v in record.headers if n == FORWARDED_FROM_HEADER
        ]
        batch.deadletters += 1
        batch.outputs.append(
            Output(
                self._deadletter_topic,
                record.key,
                record.value,
                record.partition,
                None,
                letter.headers(original),
            )
        )


def _no_rows(_partition: int, _low: str, _high: str) -> Iterable[tuple[str, bytes]]:
    return ()


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
