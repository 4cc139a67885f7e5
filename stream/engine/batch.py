"""What the engine reads and writes (stream/engine/engine.py): a consumed
:class:`Record`, an :class:`Output` to produce, a partition's inbox watermark
(:class:`Mark`) and what one batch decided (:class:`Batch`), whose ``writes``
are the table rows stored once its outputs are acknowledged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compiler import JobState
from stream.engine.store import Applied, encode_stored
from stream.engine.timers import DUE_VALUE, INDEX_MARK, clamp_due, due_key
from stream.runtime.resets import fingerprint

__all__ = [
    "META_PREFIX",
    "Batch",
    "Headers",
    "JobRef",
    "Mark",
    "Output",
    "Record",
    "TimerRef",
    "fingerprint",
    "topic_watermark_key",
    "watermark_key",
]

#: A job as the engine addresses it: (its home partition, its key). States,
#: the cache and offset checks are all keyed by it, never by the key alone.
JobRef = tuple[int, str]

#: A timer in the due-time index (stream/engine/timers.py): (partition, kind, name),
#: the kind ``JOBS`` or ``SCHEDULES``, the name a job key or a schedule id.
TimerRef = tuple[int, str, str]

Headers = list[tuple[str, bytes]]

#: Keys of the table that are not jobs start with a control character, which a
#: job key cannot contain (see topics.JobKey).
META_PREFIX = "\x00"


def watermark_key(partition: int) -> str:
    """The table key of a partition's inbox watermark."""
    return topic_watermark_key("inbox", partition)


def topic_watermark_key(topic: str, partition: int) -> str:
    """The table key of the watermark of ``topic`` (its short name:
    ``inbox``, ``schedules``, ``schedule-runs``) in ``partition``."""
    return f"{META_PREFIX}{topic}-watermark-{partition}"


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
    and no partitioner runs per record. The one exception is a remembered
    fact, which goes to its subject's partition of ``memory-facts``
    (docs/memory.md). A forwarded inbox record (and a dead
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
    records) is recognised (``stream/runtime/resets.py``)."""

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


@dataclass
class Batch:
    """What one batch decided: outputs to produce, then states to write."""

    outputs: list[Output] = field(default_factory=list)
    #: job → (inbox records applied, state), the latest of the batch
    states: dict[JobRef, tuple[Applied, JobState]] = field(default_factory=dict)
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
    #: this batch is stored (see ``DueIndex.settle``, stream/engine/due.py)
    floors: dict[tuple[int, str], int] = field(default_factory=dict)

    # What the worker's metrics count of this batch, handed over once it is
    # stored (stream/runtime/metrics; docs/operations.md, "Metrics"): per batch,
    # so that a record's cost does not grow with them.
    #: (playbook key, outcome) → job decisions (outcome: applied, refused, duplicate)
    tally: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the timestamps (ms) of the inbox records decided
    stamps: list[int] = field(default_factory=list)
    #: (topic read, reason code) → records dead-lettered
    dead: dict[tuple[str, str], int] = field(default_factory=dict)
    #: run status → schedule run records written
    runs: dict[str, int] = field(default_factory=dict)
    #: index rows added less rows deleted by ``writes`` (the pending timers' change)
    timers_delta: int = 0
    #: The decisions on inbox records that carry headers (a trace's, maybe), each
    #: (record, playbook, outcome, its outputs): the worker makes their spans and
    #: carries their trace on to the task records (docs/operations.md, "Tracing").
    #: Untraced records never get here, so that costs nothing without tracing.
    traced: list[tuple[Record, str, str, list[Output]]] = field(default_factory=list)

    def decided(
        self,
        playbook: str,
        outcome: str,
        record: Record,
        inbox: bool,
        outputs: list[Output] | None = None,
    ) -> None:
        """Count a job's decision on ``record`` (an inbox record when ``inbox``)
        that produced ``outputs``."""
        where = (playbook, outcome)
        self.tally[where] = self.tally.get(where, 0) + 1
        if inbox:
            self.stamps.append(record.timestamp_ms)
            if record.headers:
                self.traced.append((record, playbook, outcome, outputs or []))

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
        # A row put where there was none, or deleted with none put back.
        self.timers_delta = sum(
            (was is None) - (now is None) for _where, (was, now) in moved
        ) - len(self.stale)
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
