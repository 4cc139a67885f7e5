"""The imperative shell around the pure core, free of Faust so it can be read
and tested alone: records in, decisions made, outputs and state writes out.

A worker feeds it one batch of records at a time (``process``), produces every
output it returns and waits for the broker's acknowledgements, then writes the
states (``Batch.writes``) and only then lets the consumer commit. So:

* an output is never lost: state is written only after its outputs are acked;
* a re-delivered inbox record is recognised by the offset stored with its job
  and makes no second decision;
* a crash after the acks and before the state write re-decides the same records
  from the same state at the same ``now`` (a record's timestamp, a tick's ``at``):
  the re-emitted outputs are byte-identical, with the same ``task_id`` and
  decision ``seq``, so consumers can de-duplicate them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from compiler import (
    Event,
    JobGraph,
    JobState,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    Tick,
)
from compiler._time import from_iso, to_iso
from topics import (
    SCHEMA,
    DeadLetter,
    InboxEvent,
    RecordError,
    TickRecord,
    Topics,
    decode_inbox,
)

from .registry import Registry
from .store import Stored, decode_stored, encode_stored, next_due_ms, peek_header
from .timers import TimerIndex

__all__ = ["Batch", "Engine", "Output", "Record", "snapshot_of"]


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
    timestamp_ms: int

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp_ms = timestamp_ms


@dataclass(slots=True)
class Output:
    """A record to produce, and the partition it goes to.

    The engine sends every output to the partition its input came from: every
    lemongraph topic has the inbox's partition count, so a job's records share
    one partition number everywhere (its order kept, compaction per key intact),
    and no partitioner runs per record."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int

    def __init__(self, topic: str, key: bytes | None, value: bytes, partition: int) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.partition = partition


@dataclass
class Batch:
    """What one batch decided: outputs to produce, then states to write."""

    outputs: list[Output] = field(default_factory=list)
    #: job key → (partition, last inbox offset, state), the latest of the batch
    states: dict[str, tuple[int, int, JobState]] = field(default_factory=dict)
    #: jobs whose state changed (a refusal only records the offset it consumed)
    changed: set[str] = field(default_factory=set)
    decisions: int = 0
    deadletters: int = 0
    skipped: int = 0  # re-delivered inbox records recognised and skipped
    duplicates: int = 0  # events whose idempotency key was applied before

    #: partition → the last inbox offset this batch handled there
    watermarks: dict[int, int] = field(default_factory=dict)

    def writes(self) -> list[tuple[str, int, bytes]]:
        """(key, partition, bytes) for every changed job, then each partition's
        inbox watermark — last, so a crash part-way leaves it behind the jobs."""
        out = [(k, p, encode_stored(p, o, s)) for k, (p, o, s) in self.states.items()]
        out.extend((watermark_key(p), p, b"%d" % o) for p, o in sorted(self.watermarks.items()))
        return out


#: Keys of the table that are not jobs start with a control character, which a
#: job key cannot contain (see topics.JobKey).
META_PREFIX = "\x00"


def watermark_key(partition: int) -> str:
    """The table key of a partition's inbox watermark."""
    return f"{META_PREFIX}inbox-watermark-{partition}"


def _dumps(data: Any) -> bytes:
    # Outputs are built in a fixed key order, so plain dumps is deterministic
    # (a re-decided record is byte-identical); only job state, which is hashed,
    # needs canonical (sorted) keys. Sorting cost a third of the encoding.
    return orjson.dumps(data)


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def snapshot_of(graph: JobGraph, state: JobState) -> dict[str, Any]:
    """The read-model view of a job (what goes to the ``jobs`` topic), shaped as
    :class:`topics.JobSnapshot`. Built as plain data: this runs once per changed
    job per batch, and validating our own output there would cost more than the
    decision (tests validate it against the model instead)."""
    data = state.json()
    detail = {
        milestone_id: {
            "state": m["status"],
            "opened_at": m.get("opened_at"),
            "deadline": m.get("deadline"),
            "task_at": m.get("task_at"),
            "settled_at": m.get("settled_at"),
            "outcome": m.get("outcome"),
            "explanation": m.get("explanation"),
        }
        for milestone_id, m in data["milestones"].items()
    }
    return {
        "type": "job.snapshot",
        "schema": SCHEMA,
        "key": state.key,
        "status": state.status,
        "playbook_key": state.playbook_key,
        "playbook_version": state.playbook_version,
        "seq": state.seq,
        "started_at": data["started_at"],
        "updated_at": data["updated_at"],
        "ended_at": data["ended_at"],
        "events": state.events,
        "milestones": {k: m.status for k, m in state.milestones.items()},
        "detail": detail,
        "frontier": list(graph.frontier(state)),
        "timers": data["timers"],
        "state_hash": state.hash,
    }


class Engine:
    """Decides batches of inbox and tick records for the partitions it owns.

    ``load`` reads a stored job (bytes) by key and partition from the table.
    """

    def __init__(
        self,
        topics: Topics,
        registry: Registry,
        load: Callable[[str, int], bytes | None],
        cache_size: int = 10_000,
    ) -> None:
        self.topics = topics
        self.registry = registry
        self.load = load
        self.timers = TimerIndex()
        self._watermarks: dict[int, int] = {}
        # Recently stored jobs, decoded: a job that just had an event is likely to
        # have another soon (a conversation), and decoding costs as much as
        # deciding. Holds committed states only, so a crash loses nothing.
        self._cache: OrderedDict[str, tuple[int, JobState]] = OrderedDict()
        self.cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0

    # -- the timer index ------------------------------------------------------------

    def rebuild_timers(self, stored: Iterable[tuple[str, bytes]]) -> int:
        """Rebuild the timer index from every stored job's header (the state
        itself is not parsed). Returns how many jobs have a timer."""
        self.timers.clear()
        self._watermarks.clear()
        self._cache.clear()
        count = 0
        for key, raw in stored:
            if key.startswith(META_PREFIX):
                continue
            partition, _offset, due = peek_header(raw)
            if due is not None:
                self.timers.set(partition, key, due)
                count += 1
        return count

    # -- batches ----------------------------------------------------------------------

    def process(self, records: Sequence[Record]) -> Batch:
        """Decide every record of the batch, in order."""
        batch = Batch()
        for record in records:
            if record.topic == self.topics.inbox:
                if record.offset <= self._watermark(record.partition, batch):
                    batch.skipped += 1  # re-delivered: handled before the last commit
                    continue
                self._inbox(record, batch)
                batch.watermarks[record.partition] = record.offset
            elif record.topic == self.topics.ticks:
                self._tick(record, batch)
            else:
                self._dead(record, f"unexpected topic {record.topic!r}", batch)
        for key, (partition, _o, state) in batch.states.items():
            if key not in batch.changed:
                continue
            graph = self.registry.graph(state.playbook_key, state.playbook_version)
            if graph is not None:
                batch.outputs.append(
                    Output(
                        self.topics.jobs,
                        key.encode(),
                        _dumps(snapshot_of(graph, state)),
                        partition,
                    )
                )
        return batch

    def committed(self, batch: Batch) -> None:
        """The batch's writes are stored: its watermarks are now the floor, and
        its states the cached ones."""
        self._watermarks.update(batch.watermarks)
        cache = self._cache
        for key, (_partition, offset, state) in batch.states.items():
            cache[key] = (offset, state)
            cache.move_to_end(key)
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def _watermark(self, partition: int, batch: Batch) -> int:
        """The last inbox offset handled in ``partition`` (-1: none)."""
        if partition in batch.watermarks:
            return batch.watermarks[partition]
        if partition not in self._watermarks:
            raw = self.load(watermark_key(partition), partition)
            self._watermarks[partition] = int(raw) if raw is not None else -1
        return self._watermarks[partition]

    def _current(self, key: str, partition: int, batch: Batch) -> tuple[int, JobState | None]:
        """(last applied inbox offset, state) — the batch's own writes first."""
        pending = batch.states.get(key)
        if pending is not None:
            return pending[1], pending[2]
        cached = self._cache.get(key)
        if cached is not None:
            self.cache_hits += 1
            self._cache.move_to_end(key)
            return cached
        self.cache_misses += 1
        raw = self.load(key, partition)
        if raw is None:
            return -1, None
        stored: Stored = decode_stored(raw)
        return stored.offset, stored.state

    def _inbox(self, record: Record, batch: Batch) -> None:
        try:
            message = decode_inbox(record.value, record.key)
        except RecordError as exc:
            self._dead(record, exc.reason, batch)
            return
        key: str = message.key
        offset, state = self._current(key, record.partition, batch)
        if record.offset <= offset:
            batch.skipped += 1  # re-delivered: this job has applied it already
            return
        now = _instant(record.timestamp_ms)
        if isinstance(message, InboxEvent):
            item: Event | Start = Event(
                message.action,
                message.value,
                message.properties or None,
                message.source,
                message.idempotency_key,
                None if message.idempotency_key else f"p{record.partition}@{record.offset}",
            )
            if state is None:
                self._refuse(record, key, now, item, "unknown job: no job.start was applied", batch)
                return
            graph = self.registry.graph(state.playbook_key, state.playbook_version)
            if graph is None:
                reason = (
                    f"playbook {state.playbook_key} v{state.playbook_version} is not registered "
                    "on this worker"
                )
                self._refuse(record, key, now, item, reason, batch, state)
                return
        else:
            item = Start(key, message.playbook_key, message.subject, tuple(message.contacts))
            latest = self.registry.latest(message.playbook_key)
            if latest is None:
                reason = f"unknown playbook {message.playbook_key!r}"
                self._refuse(record, key, now, item, reason, batch, state)
                return
            graph = latest
        step = graph.next(state, now, item)
        self._decided(record, key, graph, state, offset, step, batch)

    def _tick(self, record: Record, batch: Batch) -> None:
        try:
            tick = TickRecord.model_validate_json(record.value or b"")
            now = from_iso(tick.at)
        except ValueError as exc:
            self._dead(record, f"invalid tick: {exc}", batch)
            return
        now_ms = int(now.timestamp() * 1000)
        for key in self.timers.pop_due(record.partition, now_ms):
            offset, state = self._current(key, record.partition, batch)
            if state is None:
                continue
            graph = self.registry.graph(state.playbook_key, state.playbook_version)
            if graph is None:
                # Nothing can fire without the playbook (refused events say why);
                # keep the timer, so it fires once the playbook is registered.
                self.timers.set(record.partition, key, next_due_ms(state))
                continue
            step = graph.next(state, now, Tick())
            self._decided(record, key, graph, state, offset, step, batch)

    def _decided(
        self,
        record: Record,
        key: str,
        graph: JobGraph,
        before: JobState | None,
        offset: int,
        step: Step,
        batch: Batch,
    ) -> None:
        state = step.state
        if step.noop:
            if state is not None:
                self.timers.set(record.partition, key, next_due_ms(state))
            return
        if step.duplicate:
            # A retried idempotency key: applied once already, so no decision and
            # no write (a re-delivery of this retry is a duplicate again).
            batch.duplicates += 1
            return
        applied_offset = record.offset if record.topic == self.topics.inbox else offset
        if state is not None:
            # Remember the inbox offset even for a refusal, so a re-delivery of
            # this record is recognised without a second decision.
            batch.states[key] = (record.partition, applied_offset, state)
            batch.changed.add(key)
            self.timers.set(record.partition, key, next_due_ms(state))
        body = self._decision_record(record, key, graph, before, step, batch)
        # The effects' JSON is in the decision record already: task records reuse it.
        for effect, data in zip(step.effects, body["effects"], strict=True):
            if isinstance(effect, TaskOpened) and state is not None:
                # Shaped as topics.TaskOpenedRecord / TaskClosedRecord.
                task = {
                    "schema": SCHEMA,
                    **data,
                    "playbook_key": state.playbook_key,
                    "subject": dict(state.subject),
                    "contacts": list(state.contacts),
                }
            elif isinstance(effect, TaskClosed):
                task = {"schema": SCHEMA, **data}
            else:
                continue
            batch.outputs.append(
                Output(self.topics.tasks, key.encode(), _dumps(task), record.partition)
            )

    def _decision_record(
        self,
        record: Record,
        key: str,
        graph: JobGraph | None,
        before: JobState | None,
        step: Step,
        batch: Batch,
    ) -> dict[str, Any]:
        """Append the decision record; returns its body."""
        playbook = graph.playbook if graph is not None else None
        # Shaped as topics.DecisionRecord (plain data, for the reason in snapshot_of).
        decision = {
            "type": "decision",
            "schema": SCHEMA,
            "job_key": key,
            "playbook_key": playbook.key if playbook else None,
            "playbook_version": playbook.version if playbook else None,
            "origin": {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
            },
            "prev_state_hash": before.hash if before is not None else None,
            **step.to_json(),
        }
        batch.decisions += 1
        batch.outputs.append(
            Output(self.topics.decisions, key.encode(), _dumps(decision), record.partition)
        )
        return decision

    def _refuse(
        self,
        record: Record,
        key: str,
        now: datetime,
        item: Event | Start,
        reason: str,
        batch: Batch,
        state: JobState | None = None,
    ) -> None:
        step = Step(state, now, item, refused=reason)
        if state is not None:
            offset = record.offset
            batch.states[key] = (record.partition, offset, state)
        self._decision_record(record, key, None, state, step, batch)

    def _dead(self, record: Record, reason: str, batch: Batch) -> None:
        letter = DeadLetter.of(
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            reason,
            to_iso(_instant(record.timestamp_ms)),
        )
        batch.deadletters += 1
        batch.outputs.append(
            Output(self.topics.deadletter, record.key, _dumps(letter.dump()), record.partition)
        )
