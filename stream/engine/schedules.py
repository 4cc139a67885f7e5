"""Schedules in the worker (docs/schedules.md): definitions from the
``schedules`` topic, wakes from the inbox, reports from ``schedule-runs`` and
the ticks, decided by the pure state machine (``compiler.schedule_step``), its
effects turned into records, its state stored in the engine's table.

The engine (stream/engine/engine.py) calls this through ``ScheduleHook``; everything
here keeps the engine's promises:

* a schedule is decided only on its **home partition** (murmur2 of its id, as a
  job key's). A ``schedule.wake`` elsewhere on the inbox is forwarded there like
  any inbox record; a ``schedule.report`` elsewhere on ``schedule-runs`` is
  forwarded there too (a report applied twice is ignored: its run is no longer
  active). A definition elsewhere on ``schedules`` is dead-lettered: that topic
  is compacted, and a copy could outlive a later change and undo it when the
  topic is read again from the start (docs/kafka.md, "schedules");
* the state is stored under ``"\\x00schedule/<id>"`` (a key no job can have) on
  the home partition, in the same table write as the jobs, after the outputs
  are acknowledged. A record of ``schedules`` or ``schedule-runs`` handled before
  the last write is recognised by its partition's watermark, stored with the
  states; a crash between the acks and the write re-decides the same records
  from the same state at the same ``now``, so the same slot fires with the same
  run id, and what it sent is absorbed downstream: a second ``job.start`` with
  the same key is refused, an event with the same idempotency key is a
  duplicate, a ``schedule.prompt`` with the same run id is run once;
* a schedule's due time is a row of the engine's due-time index
  (stream/engine/timers.py, ``\\x00due/s/<due ms>/<id>``), moved in the same table
  write as its state: a tick reads only the schedules due, and nothing is
  rebuilt when partitions are assigned;
* one bad record never stops the worker: it is dead-lettered with its original
  bytes and the reason; the outputs of a decision are all built before the
  batch is touched.

``LEMONGRAPH_SCHEDULES_ENABLED=0``: ticks fire nothing (nothing is due-checked,
the index is kept), a wake is recorded ``skipped``; definitions are still
stored, and reports still end their runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError

from compiler import (
    Define,
    Deliver,
    Dispatch,
    LemongraphError,
    Remove,
    Report,
    RunRecorded,
    Schedule,
    ScheduleState,
    ScheduleTick,
    Wake,
    request_run_id,
    schedule_step,
    to_iso,
    validate_schedule,
)
from stream.engine.engine import META_PREFIX, Batch, Engine, Output, Record, StorageError
from stream.engine.timers import SCHEDULES
from topics import (
    FORWARDED_FROM_HEADER,
    MAX_RECORD_BYTES,
    SCHEDULE_HEADER,
    SCHEDULE_RUN_HEADER,
    InboxEvent,
    JobStart,
    MessageRecord,
    RecordError,
    SchedulePromptTask,
    ScheduleRecord,
    ScheduleReport,
    ScheduleRunRecord,
    ScheduleWake,
    Topics,
    event_id,
    first_error,
)

__all__ = [
    "SCHEDULE_PREFIX",
    "Schedules",
    "decode_schedule",
    "encode_schedule",
    "peek_schedule",
    "schedule_key",
]

log = logging.getLogger("lemongraph.worker")

#: The table key of a schedule's state is this and its id.
SCHEDULE_PREFIX = f"{META_PREFIX}schedule/"

_MAGIC = b"LS1"

#: The records (runs, dispatches, deliveries) the schedules of one tick may
#: add to its batch; the schedules still due after that wait for the next tick.
TICK_BUDGET = 10_000

ScheduleInput = Define | Remove | ScheduleTick | Wake | Report


def schedule_key(schedule_id: str) -> str:
    """The table key of schedule ``schedule_id``'s state."""
    return f"{SCHEDULE_PREFIX}{schedule_id}"


def encode_schedule(partition: int, state: ScheduleState) -> bytes:
    """``LS1 <partition> <due ms or ->`` then the state's canonical JSON: the
    header says which due-time index row the schedule has (stream/engine/timers.py)
    without parsing the state."""
    due = state.due_ms()
    header = b"%s %d %s\n" % (_MAGIC, partition, b"-" if due is None else b"%d" % due)
    return header + orjson.dumps(state.to_json(), option=orjson.OPT_SORT_KEYS)


def peek_schedule(raw: bytes) -> tuple[int, int | None]:
    """(partition, due ms) of a stored schedule."""
    fields = raw[: raw.index(b"\n")].split(b" ")
    if fields[0] != _MAGIC or len(fields) != 3:
        raise ValueError(f"not a stored schedule (header {fields!r})")
    return int(fields[1]), None if fields[2] == b"-" else int(fields[2])


def decode_schedule(raw: bytes) -> ScheduleState:
    """The state of :func:`encode_schedule`."""
    peek_schedule(raw)
    return ScheduleState.from_json(orjson.loads(raw[raw.index(b"\n") + 1 :]))


def _watermark_key(topic: str, partition: int) -> str:
    return f"{META_PREFIX}{topic}-watermark-{partition}"


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _dumps(data: Any) -> bytes:
    return orjson.dumps(data)


class Schedules:
    """The engine's schedules: see the module's docstring."""

    def __init__(self, topics: Topics, *, enabled: bool = True) -> None:
        self.names = topics
        self.enabled = enabled
        #: (partition, watermark key) → the last offset stored
        self._marks: dict[tuple[int, str], int] = {}
        self._engine: Engine | None = None
        self.fired = 0  # decisions that dispatched a run
        #: The records one tick's schedules may add before the rest wait (see tick).
        self.tick_budget = TICK_BUDGET

    # -- the hook (stream/engine/engine.py, ScheduleHook) -----------------------------------

    def bind(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> Engine:
        assert self._engine is not None, "Schedules.bind was not called"
        return self._engine

    def topics(self) -> tuple[str, ...]:
        return (self.names.schedules, self.names.schedule_runs)

    def clear(self) -> None:
        self._marks.clear()

    def indexed(self, key: str, raw: bytes) -> tuple[str, int | None] | None:
        if not key.startswith(SCHEDULE_PREFIX):
            return None
        try:
            _partition, due = peek_schedule(raw)
        except ValueError as exc:
            log.error("table row %r: %s", key, exc)
            return None
        return key[len(SCHEDULE_PREFIX) :], due

    def committed(self, batch: Batch) -> None:
        for where, raw in batch.marks.items():
            self._marks[where] = int(raw)

    def record(self, record: Record, batch: Batch) -> None:
        """A record of ``schedules`` (a definition or a tombstone) or of
        ``schedule-runs`` (a report; the worker's own run records are skipped)."""
        short = "schedules" if record.topic == self.names.schedules else "schedule-runs"
        where = (record.partition, _watermark_key(short, record.partition))
        if record.offset <= self._mark(where, batch):
            batch.skipped += 1  # re-delivered: handled before the last write
            return
        batch.marks[where] = b"%d" % record.offset
        if record.key is None:
            self.engine.dead(
                record, f"no record key: a {short} record's key is its schedule id", batch
            )
            return
        home = self.engine.home(record.key)
        if short == "schedules":
            if home != record.partition:
                reason = (
                    f"a schedule's definition must be on its home partition {home} (murmur2 of "
                    f"its id, the default partitioner of the Java client and aiokafka), not "
                    f"{record.partition}: produce it again with that partitioner"
                )
                self.engine.dead(record, reason, batch)
                return
            self._definition(record, batch)
            return
        try:
            data = orjson.loads(record.value or b"null")
        except orjson.JSONDecodeError as exc:
            self.engine.dead(record, f"not JSON: {exc}", batch)
            return
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "schedule.run":
            return  # the worker's own record of a run
        if kind != "schedule.report":
            reason = f"type: expected 'schedule.report' or 'schedule.run', got {kind!r}"
            self.engine.dead(record, reason, batch)
            return
        if home != record.partition:
            self._forward(record, home, batch)
            return
        try:
            report = ScheduleReport.model_validate(data)
            now_ms, _bound = self.engine.clock(record.timestamp_ms)
        except ValidationError as exc:
            self.engine.dead(record, f"invalid schedule.report: {first_error(exc)}", batch)
            return
        except RecordError as exc:
            self.engine.dead(record, exc.reason, batch)
            return
        if report.schedule_id.encode() != record.key:
            reason = f"record key {record.key!r} is not the schedule id {report.schedule_id!r}"
            self.engine.dead(record, reason, batch)
            return
        item = Report(report.run_id, report.status, report.output, report.error)
        self._decide(record, home, report.schedule_id, _instant(now_ms), item, batch)

    def wake(
        self, record: Record, origin: tuple[int, int], message: ScheduleWake, batch: Batch
    ) -> None:
        """An inbox ``schedule.wake`` at its home partition. Its request id is
        the one given, else its inbox position ``p<partition>@<offset>`` (the
        same for a forwarded copy)."""
        try:
            now_ms, _bound = self.engine.clock(record.timestamp_ms)
        except RecordError as exc:
            self.engine.dead(record, exc.reason, batch)
            return
        request = message.request_id or event_id(origin[0], origin[1])
        partition = record.partition
        state = self._current((partition, schedule_key(message.schedule_id)), batch)
        if state is None:
            self.engine.dead(record, f"schedule.wake: no schedule {message.schedule_id!r}", batch)
            return
        now = _instant(now_ms)
        if not self.enabled:
            run_id = request_run_id(message.schedule_id, request)
            skipped = ScheduleRunRecord(
                schedule_id=message.schedule_id,
                run_id=run_id,
                status="skipped",
                triggered_by="wake",
                root_run_id=run_id,
                at=to_iso(now),
                error="schedules are switched off on this worker (LEMONGRAPH_SCHEDULES_ENABLED=0)",
                context=message.context,
            )
            batch.outputs.append(self._run_output(message.schedule_id, partition, skipped))
            return
        item = Wake(request, message.context, message.skip_if_running)
        self._decide(record, partition, message.schedule_id, now, item, batch)

    def tick(self, record: Record, now_ms: int, batch: Batch) -> None:
        """Fire the due schedules of the tick's partition (none while switched off),
        until their records reach :attr:`tick_budget`: the schedules still due
        then wait for the next tick, so that a catch-up after downtime (up to a
        hundred missed records and a fire per schedule) comes a tick at a time
        instead of as one batch of every schedule's records."""
        if not self.enabled:
            return
        now = _instant(now_ms)
        engine = self.engine
        partition = record.partition
        candidates = engine.due(partition, SCHEDULES, now_ms, batch)
        start = len(batch.outputs)
        for index, (due, schedule_id, from_table) in enumerate(candidates):
            if len(batch.outputs) - start >= self.tick_budget:
                # The rest stay in the index, due: the next tick's (settle does
                # not move the floor past them).
                log.info(
                    "tick %d@%d: %d schedules still due wait for the next tick",
                    record.partition, record.offset, len(candidates) - index,
                )  # fmt: skip
                break
            if engine.parked(partition, SCHEDULES, schedule_id, due):
                continue
            key = schedule_key(schedule_id)
            try:
                self._current((partition, key), batch)  # its due time as stored
                if not engine.fires(partition, SCHEDULES, schedule_id, due, from_table, batch):
                    continue
                self._decide(record, partition, schedule_id, now, ScheduleTick(), batch)
            except StorageError:
                raise
            except Exception as exc:
                # Its timer stays off until its next definition or report: firing
                # it on every tick would fail the same way every second.
                engine.park(partition, SCHEDULES, schedule_id, due)
                why = _why(exc)
                log.error("tick %d@%d, schedule %r: %s", record.partition, record.offset, key, why)
                reason = f"deciding schedule {schedule_id!r} on this tick failed: {why}"
                self.engine.dead(record, reason, batch)
        engine.settle(partition, SCHEDULES, now_ms, candidates, batch)

    # -- deciding ----------------------------------------------------------------------

    def _definition(self, record: Record, batch: Batch) -> None:
        assert record.key is not None
        try:
            now_ms, _bound = self.engine.clock(record.timestamp_ms)
            schedule_id = record.key.decode("utf-8")
        except RecordError as exc:
            self.engine.dead(record, exc.reason, batch)
            return
        except UnicodeDecodeError:
            self.engine.dead(record, "the record key is not a schedule id (not UTF-8)", batch)
            return
        item: Define | Remove
        if record.value is None:
            item = Remove()
        else:
            try:
                message = ScheduleRecord.model_validate_json(record.value)
                source = f"{record.topic} partition {record.partition} offset {record.offset}"
                schedule = validate_schedule(message.spec, source)
            except ValidationError as exc:
                self.engine.dead(record, f"invalid schedule record: {first_error(exc)}", batch)
                return
            except LemongraphError as exc:
                self.engine.dead(record, f"invalid schedule: {exc}", batch)
                return
            if schedule.id != schedule_id:
                reason = f"spec.id {schedule.id!r} is not the record key {schedule_id!r}"
                self.engine.dead(record, reason, batch)
                return
            item = Define(schedule)
        self._decide(record, record.partition, schedule_id, _instant(now_ms), item, batch)

    def _decide(
        self,
        record: Record,
        partition: int,
        schedule_id: str,
        now: datetime,
        item: ScheduleInput,
        batch: Batch,
    ) -> None:
        """Step the schedule and add its outputs and state to the batch. Every
        output is built first: a failure leaves nothing of this decision."""
        key = schedule_key(schedule_id)
        ref = (partition, key)
        before = self._current(ref, batch)
        if before is None and not isinstance(item, Define):
            return  # nothing to wake, remove or end (a report of a removed schedule)
        # Switched off: a definition or a report is applied without firing.
        step = schedule_step(before, now, item, firing=self.enabled)
        schedule = step.state.schedule if step.state is not None else None
        if schedule is None and before is not None:
            schedule = before.schedule
        outputs: list[Output] = []
        for effect in step.effects:
            outputs.extend(self._effect(effect, schedule, schedule_id, partition, now))
        raw = None if step.state is None else encode_schedule(partition, step.state)
        due = None if step.state is None else step.state.due_ms()
        _fits(key, raw, outputs)
        where = (partition, SCHEDULES, schedule_id)
        known = batch.timers.get(where)
        # -- nothing below can fail --
        batch.rows[ref] = raw
        batch.timers[where] = (known[0] if known is not None else None, due)
        self.engine.unpark(partition, SCHEDULES, schedule_id)
        batch.outputs.extend(outputs)
        batch.decisions += 1
        if any(isinstance(effect, Dispatch) for effect in step.effects):
            self.fired += 1

    def _current(self, ref: tuple[int, str], batch: Batch) -> ScheduleState | None:
        """The schedule's state: the batch's own write first, then the table."""
        if ref in batch.rows:
            pending = batch.rows[ref]
            return None if pending is None else decode_schedule(pending)
        try:
            raw = self.engine.load(ref[1], ref[0])
        except Exception as exc:
            raise StorageError(f"cannot read {ref[1]!r} of partition {ref[0]}: {exc}") from exc
        where = (ref[0], SCHEDULES, ref[1][len(SCHEDULE_PREFIX) :])
        if where not in batch.timers:
            # The header's due time is the one its index row was written with.
            due = None if raw is None else peek_schedule(raw)[1]
            batch.timers[where] = (due, due)
        return None if raw is None else decode_schedule(raw)

    def _mark(self, where: tuple[int, str], batch: Batch) -> int:
        pending = batch.marks.get(where)
        if pending is not None:
            return int(pending)
        if where not in self._marks:
            try:
                raw = self.engine.load(where[1], where[0])
            except Exception as exc:
                raise StorageError(f"cannot read {where[1]!r}: {exc}") from exc
            self._marks[where] = -1 if raw is None else int(raw)
        return self._marks[where]

    # -- effects → records ----------------------------------------------------------------

    def _effect(
        self,
        effect: object,
        schedule: Schedule | None,
        schedule_id: str,
        partition: int,
        now: datetime,
    ) -> list[Output]:
        if isinstance(effect, RunRecorded):
            run = ScheduleRunRecord.model_validate({"type": "schedule.run", **effect.run})
            return [self._run_output(schedule_id, partition, run)]
        if isinstance(effect, Dispatch):
            assert schedule is not None
            return [self._dispatch(effect, schedule, partition, now)]
        if isinstance(effect, Deliver):
            return [self._deliver(effect, schedule_id, schedule, now)]
        raise TypeError(f"unknown schedule effect {type(effect).__name__}")

    def _run_output(self, schedule_id: str, partition: int, run: ScheduleRunRecord) -> Output:
        return Output(self.names.schedule_runs, schedule_id.encode(), _dumps(run.dump()), partition)

    def _dispatch(
        self, dispatch: Dispatch, schedule: Schedule, partition: int, now: datetime
    ) -> Output:
        """The run's record: a ``job.start`` or an ``event`` on the inbox at the
        job's home partition (stamped with the decision's ``now``, so that the job
        is decided at the instant the slot fired), or a ``schedule.prompt`` task."""
        action: Mapping[str, Any] = dispatch.action
        headers = [
            (SCHEDULE_HEADER, dispatch.schedule_id.encode()),
            (SCHEDULE_RUN_HEADER, dispatch.run_id.encode()),
        ]
        now_ms = _ms(now)
        kind = action["type"]
        if kind == "start_job":
            key = dispatch.job_key or dispatch.run_id
            start = JobStart(
                key=key,
                playbook_key=action["playbook_key"],
                subject=dict(action.get("subject", {})),
            )
            raw = key.encode()
            value = _dumps(start.compact())
            return Output(self.names.inbox, raw, value, self.engine.home(raw), now_ms, headers)
        if kind == "send_event":
            event: Mapping[str, Any] = action["event"]
            job_key = dispatch.job_key or str(action["job_key"])
            message = InboxEvent(
                key=job_key,
                action=event["action"],
                value=event.get("value"),
                properties=dict(event.get("properties", {})),
                idempotency_key=dispatch.run_id,
                source="world",
            )
            raw = job_key.encode()
            value = _dumps(message.compact())
            return Output(self.names.inbox, raw, value, self.engine.home(raw), now_ms, headers)
        if kind == "prompt":
            deadline = dispatch.deadline_ms
            if deadline is None:
                deadline = now_ms + schedule.timeout_ms
            task = SchedulePromptTask(
                schedule_id=dispatch.schedule_id,
                run_id=dispatch.run_id,
                agent=action["agent"],
                prompt=action["prompt"],  # with the run's context, if any
                context=dict(dispatch.context) if dispatch.context else None,
                slot=None if dispatch.slot_ms is None else to_iso(_instant(dispatch.slot_ms)),
                attempt=dispatch.attempt,
                deadline=to_iso(_instant(deadline)),
                triggered_by=dispatch.triggered_by,
                at=to_iso(now),
            )
            value = _dumps(task.dump())
            return Output(
                self.names.tasks, dispatch.schedule_id.encode(), value, partition, now_ms, headers
            )
        raise ValueError(f"unknown action type {kind!r}")

    def _deliver(
        self, deliver: Deliver, schedule_id: str, schedule: Schedule | None, now: datetime
    ) -> Output:
        """A message out: on the job's conversation (``web:<job>``), or an email
        the mail service sends once per message id (``email:<address>``)."""
        kind, _, rest = deliver.target.partition(":")
        agent = None
        if schedule is not None and schedule.action.get("type") == "prompt":
            agent = str(schedule.action["agent"])
        if kind == "web":
            job_key, channel, contact = rest, "web", None
        elif kind == "email":
            job_key, channel, contact = f"schedule:{schedule_id}", "email", rest
        else:
            raise ValueError(f"cannot deliver to {deliver.target!r}")
        message = MessageRecord(
            job_key=job_key,
            message_id=f"sched-{deliver.run_id}",
            direction="out",
            channel=channel,
            agent=agent,
            contact=contact,
            text=deliver.text,
            at=to_iso(now),
        )
        raw = job_key.encode()
        return Output(self.names.messages, raw, _dumps(message.dump()), self.engine.home(raw))

    def _forward(self, record: Record, home: int, batch: Batch) -> None:
        """A report a producer put on another partition: on to its home."""
        headers = [(n, v) for n, v in record.headers if n != FORWARDED_FROM_HEADER]
        headers.append((FORWARDED_FROM_HEADER, b"p%d@%d" % (record.partition, record.offset)))
        timestamp = record.timestamp_ms if record.timestamp_ms >= 0 else None
        batch.outputs.append(
            Output(record.topic, record.key, record.value, home, timestamp, headers)
        )
        batch.forwarded += 1


def stored_schedules(rows: Iterable[tuple[str, bytes]]) -> dict[str, ScheduleState]:
    """Schedule states among table rows, by id (for tools and tests)."""
    return {
        key[len(SCHEDULE_PREFIX) :]: decode_schedule(raw)
        for key, raw in rows
        if key.startswith(SCHEDULE_PREFIX)
    }


class TooLarge(ValueError):
    """A decision whose state row or an output would exceed what a record may
    be (``MAX_RECORD_BYTES``): the broker would refuse it, and the worker would
    stop at that batch on every restart. The input is dead-lettered instead."""


def _fits(key: str, raw: bytes | None, outputs: list[Output]) -> None:
    """Refuse a decision that produces a record too large for the topics: a
    wake's context is carried by its run record, its prompt task (twice: in the
    prompt and as ``context``) and, while its run is active, the state."""
    if raw is not None and len(key) + len(raw) > MAX_RECORD_BYTES:
        raise TooLarge(
            f"the schedule's state would be {len(raw):,} bytes, more than a record may be "
            f"({MAX_RECORD_BYTES:,}): too many active runs or too large a context"
        )
    for output in outputs:
        size = len(output.value or b"") + len(output.key or b"")
        size += sum(len(n) + len(v) for n, v in output.headers or ())
        if size > MAX_RECORD_BYTES:
            short = output.topic.rsplit(".", 1)[-1]
            raise TooLarge(
                f"its {short} record would be {size:,} bytes, more than a record may be "
                f"({MAX_RECORD_BYTES:,}): too large a context or prompt"
            )


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
