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
  decision ``origin``, so consumers can de-duplicate them (a dead letter's
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

Jobs and schedules are two deciders ticked the same way: each has an adapter
that turns records into the pure core's inputs and its effects into outputs
(stream/engine/jobs.py for ``JobGraph.next``, stream/engine/schedules.py for
``schedule_step``, docs/schedules.md), while the due-time index
(stream/engine/due.py), the forwarding to a home partition, the watermarks and
the dead-lettering are this module's, used by both. A schedule's records
(``schedules``, ``schedule-runs``, the inbox's ``schedule.wake``) and ticks come
through :meth:`Engine.process`, its state is a row of ``Batch.rows`` written
with the jobs, and every promise above holds for it.

The records the engine reads and writes (:class:`Record`, :class:`Output`,
:class:`Mark`, :class:`Batch`) are stream/engine/batch.py's; a key's home
partition is stream/runtime/partitions.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from compiler import Define, ScheduleTick, Tick, from_iso, to_iso
from stream.engine.batch import (
    META_PREFIX,
    Batch,
    JobRef,
    Mark,
    Output,
    Record,
    fingerprint,
    topic_watermark_key,
    watermark_key,
)
from stream.engine.due import DueIndex, Scan, no_rows
from stream.engine.held import HELD, HELD_PREFIX, Held, expired, peek_held
from stream.engine.jobs import Jobs
from stream.engine.registry import Registry
from stream.engine.schedules import Decide, Forward, Schedules, schedule_key
from stream.engine.store import peek_header
from stream.engine.timers import DUE_PREFIX, DUE_VALUE, INDEX_MARK, JOBS, SCHEDULES, due_key
from stream.runtime.errors import StorageError
from stream.runtime.partitions import HOMES_KEPT, Homes, home_partition
from topics import (
    FORWARDED_FROM_HEADER,
    MAX_RECORD_BYTES,
    DeadLetter,
    RecordError,
    ScheduleWake,
    TickRecord,
    Topics,
    decode_inbox,
)

__all__ = [
    "DEFAULT_MAX_SKEW_MS",
    "HOMES_KEPT",
    "MAX_INSTANT_MS",
    "Batch",
    "Engine",
    "JobRef",
    "Mark",
    "Output",
    "Record",
    "Scan",
    "StorageError",
    "fingerprint",
    "home_partition",
    "watermark_key",
]

log = logging.getLogger("lemongraph.worker")

#: How far a record's timestamp may run ahead of the worker's clock.
DEFAULT_MAX_SKEW_MS = 300_000

#: A dead letter of a forwarded copy keeps where the original was produced
#: under this name (not as ``lemongraph.forwarded-from``: see ``dead``).
DEADLETTER_FORWARDED_FROM = "lemongraph.dlq.forwarded-from"

#: 9999-12-31T23:59:59.999Z: the last instant a decision can be made at.
MAX_INSTANT_MS = 253_402_300_799_999

#: The most job timers one tick fires (see ``Engine.tick_budget``).
TICK_BUDGET = 5_000


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class Engine:
    """Decides batches of inbox, tick and schedule records for the partitions
    it owns.

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
        schedules: Schedules | None = None,
        scan: Scan | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, not {partitions}")
        self.topics = topics
        # The names the batch loop reads for every record and output (a Topics
        # property formats its name on each read).
        self._inbox_topic = topics.inbox
        self._ticks_topic = topics.ticks
        self._deadletter_topic = topics.deadletter
        #: job key → its home partition, the last HOMES_KEPT remembered
        self._homes = Homes(partitions)
        self.registry = registry
        self._load = load
        self.index = DueIndex(registry, scan if scan is not None else no_rows)
        self.partitions = partitions
        self.max_skew_ms = max_skew_ms
        self.wall_ms: Callable[[], int] = wall_ms if wall_ms is not None else _wall_ms
        #: The broker's cluster id, recorded in each partition's watermark.
        self.cluster = cluster
        #: The most jobs' timers one tick reads from the index (and fires): the
        #: rest, still due, are the next tick's, so that a tick after downtime
        #: with every job due is not one batch of every job's decisions.
        self.tick_budget = TICK_BUDGET
        self._watermarks: dict[int, int] = {}
        #: (partition, watermark key) → the last offset of ``schedules`` or
        #: ``schedule-runs`` stored
        self._marks: dict[tuple[int, str], int] = {}
        #: partition → the last inbox offset seen since partitions were assigned
        self._seen: dict[int, int] = {}
        #: The jobs' adapter (stream/engine/jobs.py), with its cache of states.
        self.jobs = Jobs(topics, registry, load, cache_size, self._homes)
        #: The schedules' adapter (stream/engine/schedules.py); None: their
        #: topics are not read
        self.schedules = schedules
        #: Wakes of schedules whose definition is not read yet
        #: (stream/engine/held.py).
        self.held = Held(load)
        self._schedule_topics: tuple[str, ...] = ()
        if schedules is not None:
            self._schedule_topics = schedules.topics()

    @property
    def load(self) -> Callable[[str, int], bytes | None]:
        """Reads a row (bytes) of the table by key and partition."""
        return self._load

    @load.setter
    def load(self, load: Callable[[str, int], bytes | None]) -> None:
        self._load = self.jobs.load = self.held.load = load

    @property
    def scan(self) -> Scan:
        """Reads the due-time index (stream/engine/timers.py); without one, a
        table with no rows to scan (ticks fire only what the batch itself made
        due)."""
        return self.index.scan

    @scan.setter
    def scan(self, scan: Scan) -> None:
        self.index.scan = scan

    @property
    def cache_hits(self) -> int:
        """Jobs read from the cache of recently stored states."""
        return self.jobs.cache_hits

    @property
    def cache_misses(self) -> int:
        """Jobs read from the table."""
        return self.jobs.cache_misses

    def home(self, key: bytes) -> int:
        """The partition job (or schedule) ``key`` lives on."""
        return self._homes.of(key)

    # -- assignments ------------------------------------------------------------------

    def assigned(self) -> None:
        """Partitions were (re)assigned: another worker may have decided for
        them meanwhile, so forget what is cached. The due-time index is in the
        table (stream/engine/timers.py): nothing is rebuilt."""
        self.index.clear()
        self._watermarks.clear()
        self.jobs.clear()
        self._seen.clear()
        self._marks.clear()

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
                if key.startswith(HELD_PREFIX):
                    held = peek_held(raw)
                    if held is not None:
                        row = due_key(HELD, held, key[len(HELD_PREFIX) :])
                        out.append((row, partition, DUE_VALUE))
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

    # -- batches ----------------------------------------------------------------------

    def rewound(self, records: Sequence[Record]) -> dict[int, tuple[int, int]]:
        """Inbox partitions whose offsets go back in ``records`` (or against
        what was seen since partitions were assigned): partition → (the last
        offset seen, the lower one now). Within one assignment a partition's
        offsets only grow, so this is a log that was reset under the worker,
        unless the broker shows otherwise (``stream/runtime/resets.py``). Changes
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
                    # Nothing of this record reached the batch (see jobs.Jobs.decided):
                    # it is dead-lettered and the batch goes on.
                    log.warning("inbox %d@%d: %s", record.partition, record.offset, _why(exc))
                    self.dead(record, f"could not be decided: {_why(exc)}", batch, "undecidable")
            elif record.topic == ticks:
                self._tick(record, batch)
            elif record.topic in self._schedule_topics and self.schedules is not None:
                try:
                    self._schedule_record(self.schedules, record, batch)
                except StorageError:
                    raise
                except Exception as exc:  # see the inbox's case
                    log.warning(
                        "%s %d@%d: %s", record.topic, record.partition, record.offset, _why(exc)
                    )
                    self.dead(record, f"could not be decided: {_why(exc)}", batch, "undecidable")
            else:
                self.dead(record, f"unexpected topic {record.topic!r}", batch, "unexpected_topic")
        return batch

    def committed(self, batch: Batch) -> None:
        """The batch's writes are stored: its watermarks are now the floor, and
        its states the cached ones."""
        for partition, record in batch.watermarks.items():
            self._watermarks[partition] = record.offset
        self.index.committed(batch)
        for where, raw in batch.marks.items():
            self._marks[where] = int(raw)
        self.jobs.committed(batch)

    def _watermark(self, partition: int, batch: Batch) -> int:
        """The last inbox offset handled in ``partition`` (-1: none)."""
        last = batch.watermarks.get(partition)
        if last is not None:
            return last.offset
        if partition not in self._watermarks:
            raw = self._load(watermark_key(partition), partition)
            self._watermarks[partition] = Mark.decode(raw).offset if raw is not None else -1
        return self._watermarks[partition]

    def _mark(self, where: tuple[int, str], batch: Batch) -> int:
        """The last offset handled of ``schedules`` or ``schedule-runs`` at
        ``where``, (partition, its watermark key) (-1: none)."""
        pending = batch.marks.get(where)
        if pending is not None:
            return int(pending)
        if where not in self._marks:
            try:
                raw = self._load(where[1], where[0])
            except Exception as exc:
                raise StorageError(f"cannot read {where[1]!r}: {exc}") from exc
            self._marks[where] = -1 if raw is None else int(raw)
        return self._marks[where]

    # -- inbox ------------------------------------------------------------------------

    def _inbox(self, record: Record, batch: Batch) -> None:
        if record.key is None:
            reason = "no record key: an inbox record's key must be its job key"
            self.dead(record, reason, batch, "no_key")
            return
        home = self.home(record.key)
        if home != record.partition:
            self._forward_inbox(record, home, batch)
            return
        origin = self._origin(record)
        try:
            message = decode_inbox(record.value, record.key)
            now_ms, bound = self.clock(record.timestamp_ms)
        except RecordError as exc:
            self.dead(record, exc.reason, batch, "invalid_record")
            return
        if isinstance(message, ScheduleWake):
            if self.schedules is None:
                why = "schedule.wake: this engine runs no schedules"
                self.dead(record, why, batch, "no_schedules")
            else:
                self._wake(self.schedules, record, origin, message, batch)
            return
        ref: JobRef = (home, message.key)
        if self.jobs.inbox(record, origin, ref, message, now_ms, bound, batch):
            self.index.unpark(home, JOBS, message.key)

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

    def _forward_inbox(self, record: Record, home: int, batch: Batch) -> None:
        """Send an inbox record on to its home partition, unless it could not
        be decided there either."""
        if record.value is None:
            self.dead(record, "empty record (no value)", batch, "invalid_record")  # as at home
            return
        size = len(record.value) + len(record.key or b"")
        size += sum(len(n) + len(v) for n, v in record.headers)
        if size > MAX_RECORD_BYTES:
            # Refused at home anyway; a copy could be larger than the broker takes.
            reason = f"record of {size:,} bytes is larger than the limit of {MAX_RECORD_BYTES:,}"
            self.dead(record, reason, batch, "too_large")
            return
        self.forward(record, home, batch)

    def forward(self, record: Record, home: int, batch: Batch) -> None:
        """Produce ``record`` to its home partition of its topic, saying where
        it came from (an inbox record, or a report of ``schedule-runs``)."""
        headers = [(n, v) for n, v in record.headers if n != FORWARDED_FROM_HEADER]
        headers.append((FORWARDED_FROM_HEADER, b"p%d@%d" % (record.partition, record.offset)))
        timestamp = record.timestamp_ms if record.timestamp_ms >= 0 else None
        batch.outputs.append(
            Output(record.topic, record.key, record.value, home, timestamp, headers)
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
        """Fire the timers due at the tick, in ``record.partition``: the jobs'
        (at most :attr:`tick_budget`), then the schedules' (unless switched
        off: at most their ``tick_budget`` of records), each the same way."""
        try:
            tick = TickRecord.model_validate_json(record.value or b"")
            now = from_iso(tick.at)
        except ValueError as exc:
            self.dead(record, f"invalid tick: {exc}", batch, "invalid_tick")
            return
        now_ms = int(now.timestamp() * 1000)
        limit = self.wall_ms() + self.max_skew_ms
        if now_ms > limit:
            reason = (
                f"tick at {tick.at} is ahead of this worker's clock by more than the allowed "
                f"skew ({self.max_skew_ms / 1000:g}s, LEMONGRAPH_MAX_CLOCK_SKEW)"
            )
            self.dead(record, reason, batch, "tick_ahead")
            return
        self._fire(record, JOBS, now, now_ms, self.tick_budget, 0, batch)
        schedules = self.schedules
        if schedules is not None:
            self._fire(record, HELD, now, now_ms, 0, 0, batch)
        if schedules is not None and schedules.enabled:
            budget = schedules.tick_budget
            self._fire(record, SCHEDULES, _instant(now_ms), now_ms, 0, budget, batch)

    def _fire(
        self,
        record: Record,
        kind: str,
        now: datetime,
        now_ms: int,
        limit: int,
        budget: int,
        batch: Batch,
    ) -> None:
        """Fire the timers of ``kind`` due at ``now`` in the tick's partition:
        at most ``limit`` read from the index, and (``budget``) until their
        records reach that many, the rest still due waiting for the next tick
        (0: no bound). A timer that fails to decide is parked, the tick
        dead-lettered with why, and the others fire."""
        partition = record.partition
        index = self.index
        noun = "job" if kind == JOBS else "schedule"
        candidates = index.due(partition, kind, now_ms, batch, limit)
        start = len(batch.outputs)
        for at, (due, name, from_table) in enumerate(candidates):
            if budget and len(batch.outputs) - start >= budget:
                # The rest stay in the index, due: the next tick's (settle does
                # not move the floor past them).
                log.info(
                    "tick %d@%d: %d %ss still due wait for the next tick",
                    record.partition, record.offset, len(candidates) - at, noun,
                )  # fmt: skip
                break
            if index.parked(partition, kind, name, due):
                continue
            try:
                if not self._fire_one(record, kind, name, due, from_table, now, batch):
                    # Nothing can fire without the playbook (refused events say
                    # why); the timer stays, so it fires once it is registered.
                    index.park(partition, kind, name, due, missing=True)
            except StorageError:
                raise
            except Exception as exc:
                # The timer stays off until it is decided otherwise (an event, a
                # definition, a report): firing it on every tick would fail the
                # same way every second.
                index.park(partition, kind, name, due)
                label = name if kind == JOBS else schedule_key(name)
                why = _why(exc)
                where = (record.partition, record.offset)
                log.error("tick %d@%d, %s %r: %s", *where, noun, label, why)
                self.dead(
                    record, f"deciding {noun} {name!r} on this tick failed: {why}", batch,
                    "timer_failed",
                )  # fmt: skip
        index.settle(partition, kind, now_ms, candidates, batch)

    def _fire_one(
        self,
        record: Record,
        kind: str,
        name: str,
        due: int,
        from_table: bool,
        now: datetime,
        batch: Batch,
    ) -> bool:
        """Read the timer's state; if ``due`` is still its due time, decide it.
        False: it cannot be decided until its playbook is registered."""
        partition = record.partition
        schedules = self.schedules
        if kind == HELD:
            self.held.due(partition, name, batch)
            if self.index.fires(partition, kind, name, due, from_table, batch):
                for wake, _origin in self.held.take(partition, name, batch):
                    self.dead(wake, expired(name), batch, "wake_expired")
            return True
        if kind == SCHEDULES and schedules is not None:
            schedules.state(partition, name, batch, self._load)  # its due time as stored
            if self.index.fires(partition, kind, name, due, from_table, batch):
                decide = Decide(name, now, ScheduleTick())
                self._decide_schedule(schedules, partition, decide, batch)
            return True
        ref: JobRef = (partition, name)
        applied, state = self.jobs.current(ref, batch)
        if not self.index.fires(partition, kind, name, due, from_table, batch) or state is None:
            return True
        graph = self.jobs.graph(state)
        if graph is None:
            return False
        step = graph.next(state, now, Tick())
        origin = (record.partition, record.offset)
        if self.jobs.decided(record, origin, ref, graph, state, applied, step, batch, None):
            self.index.unpark(partition, kind, name)
        return True

    # -- schedules --------------------------------------------------------------------

    def _schedule_record(self, schedules: Schedules, record: Record, batch: Batch) -> None:
        """A record of ``schedules`` or ``schedule-runs``."""
        short = schedules.short(record.topic)
        where = (record.partition, topic_watermark_key(short, record.partition))
        if record.offset <= self._mark(where, batch):
            batch.skipped += 1  # re-delivered: handled before the last write
            return
        batch.marks[where] = b"%d" % record.offset
        if record.key is None:
            self.dead(
                record, f"no record key: a {short} record's key is its schedule id", batch, "no_key"
            )
            return
        home = self.home(record.key)
        try:
            reading = schedules.read(record, home, self.clock)
        except RecordError as exc:
            self.dead(record, exc.reason, batch, "invalid_record")
            return
        if isinstance(reading, Forward):
            self.forward(record, home, batch)
        elif reading is not None:
            self._decide_schedule(schedules, record.partition, reading, batch)

    def _wake(
        self,
        schedules: Schedules,
        record: Record,
        origin: tuple[int, int],
        message: ScheduleWake,
        batch: Batch,
    ) -> None:
        """An inbox ``schedule.wake`` at its home partition."""
        try:
            now_ms, _bound = self.clock(record.timestamp_ms)
        except RecordError as exc:
            self.dead(record, exc.reason, batch, "invalid_record")
            return
        partition = record.partition
        if schedules.state(partition, message.schedule_id, batch, self._load) is None:
            # Its definition may not be read yet (another topic): held for it.
            request = schedules.request(message, origin)
            why = self.held.hold(message.schedule_id, (record, origin), request, now_ms, batch)
            if why is not None:
                self.dead(record, why, batch, "wake_refused")
            return
        self._step_wake(schedules, partition, message, origin, _instant(now_ms), batch)

    def _step_wake(
        self,
        schedules: Schedules,
        partition: int,
        message: ScheduleWake,
        origin: tuple[int, int],
        now: datetime,
        batch: Batch,
    ) -> None:
        """Decide the wake of a defined schedule."""
        reading = schedules.wake(message, origin, partition, now)
        if isinstance(reading, Output):
            batch.outputs.append(reading)  # switched off: a skipped run
            batch.runs["skipped"] = batch.runs.get("skipped", 0) + 1
            return
        self._decide_schedule(schedules, partition, reading, batch)

    def _release(self, schedules: Schedules, partition: int, decide: Decide, batch: Batch) -> None:
        """A schedule was defined: decide the wakes held for it, in the order
        they came, at the definition's ``now`` (stream/engine/held.py)."""
        for record, origin in self.held.take(partition, decide.schedule_id, batch):
            try:
                message = decode_inbox(record.value, record.key)
                assert isinstance(message, ScheduleWake)
                self._step_wake(schedules, partition, message, origin, decide.now, batch)
            except StorageError:
                raise
            except Exception as exc:  # nothing of this wake reached the batch
                log.warning("held wake %d@%d: %s", record.partition, record.offset, _why(exc))
                self.dead(record, f"could not be decided: {_why(exc)}", batch, "undecidable")

    def _decide_schedule(
        self, schedules: Schedules, partition: int, decide: Decide, batch: Batch
    ) -> None:
        """Step the schedule and add its state row and outputs to the batch."""
        schedule_id = decide.schedule_id
        before = schedules.state(partition, schedule_id, batch, self._load)
        stepped = schedules.step(before, partition, decide, self.home)
        if stepped is None:
            return
        raw, due, outputs, statuses = stepped
        where = (partition, SCHEDULES, schedule_id)
        known = batch.timers.get(where)
        # -- nothing below can fail --
        batch.rows[(partition, schedule_key(schedule_id))] = raw
        batch.timers[where] = (known[0] if known is not None else None, due)
        self.index.unpark(partition, SCHEDULES, schedule_id)
        batch.outputs.extend(outputs)
        for status in statuses:
            batch.runs[status] = batch.runs.get(status, 0) + 1
        batch.decisions += 1
        if before is None and isinstance(decide.item, Define):
            self._release(schedules, partition, decide, batch)

    # -- dead letters -----------------------------------------------------------------

    def dead(self, record: Record, reason: str, batch: Batch, code: str) -> None:
        """Dead-letter ``record`` with ``reason``: its key, value and headers
        to the dead-letter topic, at the partition it came from. ``code`` is the
        reason's code of a fixed set, what the metrics count it under
        (``stream.runtime.metrics.DEADLETTER_REASONS``)."""
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
        where = (record.topic, code)
        batch.dead[where] = batch.dead.get(where, 0) + 1
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


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
