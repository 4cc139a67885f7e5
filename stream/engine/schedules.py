"""Schedules in the worker (docs/schedules.md): definitions from the
``schedules`` topic, wakes from the inbox, reports from ``schedule-runs`` and
the ticks, decided by the pure state machine (``compiler.schedule_step``), its
effects turned into records, its state stored in the engine's table.

This is the schedules' adapter of the engine (stream/engine/engine.py), as
stream/engine/jobs.py is the jobs': it turns a record into an input of the
state machine (:meth:`Schedules.read`, :meth:`Schedules.wake`) and a step's
effects into records and a state row (:meth:`Schedules.step`). The engine
ticks both the same way, over its due-time index (stream/engine/due.py), and
does the forwarding to a home partition, the dead-lettering and the batch's
writes; together they keep the engine's promises:

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError

from compiler import (
    AlertRecorded,
    Define,
    Deliver,
    Dispatch,
    LemongraphError,
    Remove,
    Report,
    Retire,
    RunRecorded,
    Schedule,
    ScheduleState,
    ScheduleTick,
    Wake,
    manual_run_id,
    request_run_id,
    schedule_step,
    to_iso,
    validate_schedule,
)
from stream.engine.batch import META_PREFIX, Batch, Output, Record
from stream.engine.timers import SCHEDULES
from stream.runtime.errors import ShellError, StorageError
from topics import (
    HEARTBEAT_ALERT,
    MAX_RECORD_BYTES,
    SCHEDULE_HEADER,
    SCHEDULE_RUN_HEADER,
    AuditRecord,
    HeartbeatAlert,
    InboxEvent,
    JobStart,
    MessageRecord,
    RecordError,
    ScheduleCommandTask,
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
    "FORWARD",
    "SCHEDULE_PREFIX",
    "Decide",
    "Forward",
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


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _dumps(data: Any) -> bytes:
    return orjson.dumps(data)


@dataclass(frozen=True, slots=True)
class Decide:
    """A schedule's input, read from a record: step schedule ``schedule_id``
    with ``item`` at ``now``."""

    schedule_id: str
    now: datetime
    item: ScheduleInput


class Forward:
    """A report a producer put on another partition: on to its home."""


#: What :meth:`Schedules.read` says of a report off its home partition.
FORWARD = Forward()

#: A schedule's decision, for the engine to add to its batch: (its state row,
#: None to delete it; its due time; the records to produce; the statuses of the
#: run records among them, which the worker's metrics count).
Stepped = tuple[bytes | None, int | None, list[Output], list[str]]

#: Reads a row of the engine's table: ``load(key, partition)``.
Load = Callable[[str, int], bytes | None]

#: The engine's clock: a record's timestamp → (the instant to decide it at,
#: why that is not the timestamp); raises RecordError for one that is no instant.
Clock = Callable[[int], tuple[int, str | None]]

#: A key's home partition.
Home = Callable[[bytes], int]


class Schedules:
    """The schedules' adapter of the engine: see the module's docstring. A
    record it cannot use raises ``RecordError`` with the reason, which the
    engine dead-letters."""

    def __init__(self, topics: Topics, *, enabled: bool = True) -> None:
        self.names = topics
        self.enabled = enabled
        self.fired = 0  # decisions that dispatched a run
        #: The records one tick's schedules may add before the rest wait (see
        #: the engine's tick).
        self.tick_budget = TICK_BUDGET

    def topics(self) -> tuple[str, ...]:
        """The topics (besides inbox and ticks) whose records go to :meth:`read`."""
        return (self.names.schedules, self.names.schedule_runs)

    def short(self, topic: str) -> str:
        """``schedules`` or ``schedule-runs``: the name of one of :meth:`topics`."""
        return "schedules" if topic == self.names.schedules else "schedule-runs"

    def indexed(self, key: str, raw: bytes) -> tuple[str, int | None] | None:
        """A stored row of the table whose key is ``META_PREFIX``...: (the
        schedule id, its due time) when it is a schedule's, else None."""
        if not key.startswith(SCHEDULE_PREFIX):
            return None
        try:
            _partition, due = peek_schedule(raw)
        except ValueError as exc:
            log.error("table row %r: %s", key, exc)
            return None
        return key[len(SCHEDULE_PREFIX) :], due

    # -- records → inputs ---------------------------------------------------------------

    def read(self, record: Record, home: int, clock: Clock) -> Decide | Forward | None:
        """A keyed record of ``schedules`` (a definition or a tombstone) or of
        ``schedule-runs`` (a report; the worker's own run records are None)
        whose key's home partition is ``home``."""
        assert record.key is not None
        if record.topic == self.names.schedules:
            if home != record.partition:
                raise RecordError(
                    f"a schedule's definition must be on its home partition {home} (murmur2 of "
                    f"its id, the default partitioner of the Java client and aiokafka), not "
                    f"{record.partition}: produce it again with that partitioner"
                )
            return self._definition(record, clock)
        try:
            data = orjson.loads(record.value or b"null")
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"not JSON: {exc}") from None
        kind = data.get("type") if isinstance(data, dict) else None
        if kind in ("schedule.run", HEARTBEAT_ALERT):
            return None  # the worker's own record of a run, or of a heartbeat's alert
        if kind != "schedule.report":
            raise RecordError(
                f"type: expected 'schedule.report', 'schedule.run' or '{HEARTBEAT_ALERT}', "
                f"got {kind!r}"
            )
        if home != record.partition:
            return FORWARD
        try:
            report = ScheduleReport.model_validate(data)
        except ValidationError as exc:
            raise RecordError(f"invalid schedule.report: {first_error(exc)}") from None
        now_ms, _bound = clock(record.timestamp_ms)
        if report.schedule_id.encode() != record.key:
            raise RecordError(
                f"record key {record.key!r} is not the schedule id {report.schedule_id!r}"
            )
        # A call whose outcome is unknown may have taken effect: never retried
        # (docs/schedules.md, "Command jobs").
        retry = report.outcome != "outcome_unknown"
        item = Report(
            report.run_id, report.status, report.output, report.error, report.exit_code, retry
        )
        return Decide(report.schedule_id, _instant(now_ms), item)

    def wake(
        self, message: ScheduleWake, origin: tuple[int, int], partition: int, now: datetime
    ) -> Decide | Output:
        """An inbox ``schedule.wake`` of a defined schedule at its home
        partition: its input, or (switched off) its ``skipped`` run record. Its
        request id is the one given, else its inbox position
        ``p<partition>@<offset>`` (the same for a forwarded copy). An abort is
        decided switched off too: it ends a run, as a report does."""
        request = message.request_id or event_id(origin[0], origin[1])
        if not self.enabled and message.control != "abort":
            manual = message.control == "run"
            sid = message.schedule_id
            run_id = manual_run_id(sid, request) if manual else request_run_id(sid, request)
            skipped = ScheduleRunRecord(
                schedule_id=message.schedule_id,
                run_id=run_id,
                status="skipped",
                triggered_by="manual" if manual else "wake",
                root_run_id=run_id,
                at=to_iso(now),
                error="schedules are switched off on this worker (LEMONGRAPH_SCHEDULES_ENABLED=0)",
                context=message.context,
            )
            return self._run_output(message.schedule_id, partition, skipped)
        wake = Wake(
            request,
            message.context,
            message.skip_if_running,
            tuple(message.origin),
            message.control,
            message.run_id,
        )
        return Decide(message.schedule_id, now, wake)

    @staticmethod
    def request(message: ScheduleWake, origin: tuple[int, int]) -> str:
        """What names a wake among those held for a definition: its request
        id (the one given, else its inbox position ``p<partition>@<offset>``, the
        same for a forwarded copy), ``run:`` or ``abort:`` before it for those
        controls (``compiler.Wake.key``)."""
        request = message.request_id or event_id(origin[0], origin[1])
        return request if message.control == "wake" else f"{message.control}:{request}"

    def _definition(self, record: Record, clock: Clock) -> Decide:
        assert record.key is not None
        now_ms, _bound = clock(record.timestamp_ms)
        try:
            schedule_id = record.key.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError("the record key is not a schedule id (not UTF-8)") from None
        item: Define | Remove
        if record.value is None:
            item = Remove()
        else:
            try:
                message = ScheduleRecord.model_validate_json(record.value)
                source = f"{record.topic} partition {record.partition} offset {record.offset}"
                schedule = validate_schedule(message.spec, source)
            except ValidationError as exc:
                raise RecordError(f"invalid schedule record: {first_error(exc)}") from None
            except LemongraphError as exc:
                raise RecordError(f"invalid schedule: {exc}") from None
            if schedule.id != schedule_id:
                raise RecordError(f"spec.id {schedule.id!r} is not the record key {schedule_id!r}")
            item = Define(schedule)
        return Decide(schedule_id, _instant(now_ms), item)

    # -- deciding ----------------------------------------------------------------------

    def state(
        self, partition: int, schedule_id: str, batch: Batch, load: Load
    ) -> ScheduleState | None:
        """The schedule's state: the batch's own write first, then the table
        (``load``), whose due time as stored the batch notes."""
        key = schedule_key(schedule_id)
        ref = (partition, key)
        if ref in batch.rows:
            pending = batch.rows[ref]
            return None if pending is None else decode_schedule(pending)
        try:
            raw = load(key, partition)
        except Exception as exc:
            raise StorageError(f"cannot read {key!r} of partition {partition}: {exc}") from exc
        where = (partition, SCHEDULES, schedule_id)
        if where not in batch.timers:
            # The header's due time is the one its index row was written with.
            due = None if raw is None else peek_schedule(raw)[1]
            batch.timers[where] = (due, due)
        return None if raw is None else decode_schedule(raw)

    def step(
        self,
        before: ScheduleState | None,
        partition: int,
        decide: Decide,
        home: Home,
    ) -> Stepped | None:
        """Step the schedule (``before``: its state) and build its state row
        and outputs, every one of them: a failure leaves nothing of this
        decision. None: nothing to decide (a wake, removal or report of a
        schedule not defined)."""
        schedule_id, now, item = decide.schedule_id, decide.now, decide.item
        if before is None and not isinstance(item, Define):
            return None  # nothing to wake, remove or end (a report of a removed schedule)
        # Switched off: a definition or a report is applied without firing.
        step = schedule_step(before, now, item, firing=self.enabled)
        schedule = step.state.schedule if step.state is not None else None
        if schedule is None and before is not None:
            schedule = before.schedule
        outputs: list[Output] = []
        for effect in step.effects:
            outputs.extend(self._effect(effect, schedule, schedule_id, partition, now, home))
        raw = None if step.state is None else encode_schedule(partition, step.state)
        due = None if step.state is None else step.state.due_ms()
        _fits(schedule_key(schedule_id), raw, outputs)
        if any(isinstance(effect, Dispatch) for effect in step.effects):
            self.fired += 1
        statuses = [str(e.run["status"]) for e in step.effects if isinstance(e, RunRecorded)]
        return raw, due, outputs, statuses

    # -- effects → records ----------------------------------------------------------------

    def _effect(
        self,
        effect: object,
        schedule: Schedule | None,
        schedule_id: str,
        partition: int,
        now: datetime,
        home: Home,
    ) -> list[Output]:
        if isinstance(effect, RunRecorded):
            run = ScheduleRunRecord.model_validate({"type": "schedule.run", **effect.run})
            return [self._run_output(schedule_id, partition, run)]
        if isinstance(effect, AlertRecorded):  # docs/schedules.md, "Heartbeats"
            alert = HeartbeatAlert.model_validate(effect.alert)
            return [
                Output(
                    self.names.schedule_runs, schedule_id.encode(), _dumps(alert.dump()), partition
                )
            ]
        if isinstance(effect, Dispatch):
            assert schedule is not None
            return [self._dispatch(effect, schedule, partition, now, home)]
        if isinstance(effect, Deliver):
            return [self._deliver(effect, schedule_id, schedule, now, home)]
        if isinstance(effect, Retire):
            return self._retire(effect, schedule_id, partition, now)
        raise TypeError(f"unknown schedule effect {type(effect).__name__}")

    def _retire(
        self, retire: Retire, schedule_id: str, partition: int, now: datetime
    ) -> list[Output]:
        """A one-shot that ran is removed (docs/schedules.md, "One-shot
        schedules"): its tombstone on ``schedules`` (stamped ``now``: read back,
        it is decided at that instant and drops the state) and an ``audit``
        ``delete`` saying why. A decision taken again after a crash writes them
        again: a second tombstone changes nothing, a second audit record says
        the same."""
        key = schedule_id.encode()
        detail = {
            "reason": "one-shot: its run ended",
            "run_id": retire.run_id,
            "status": retire.status,
        }
        record = AuditRecord(
            action="delete",
            target=f"schedule:{schedule_id}",
            by="one-shot",
            at=to_iso(now),
            detail=detail,
        )
        return [
            Output(self.names.schedules, key, None, partition, _ms(now)),
            Output(self.names.audit, key, _dumps(record.dump()), partition, _ms(now)),
        ]

    def _run_output(self, schedule_id: str, partition: int, run: ScheduleRunRecord) -> Output:
        return Output(self.names.schedule_runs, schedule_id.encode(), _dumps(run.dump()), partition)

    def _dispatch(
        self, dispatch: Dispatch, schedule: Schedule, partition: int, now: datetime, home: Home
    ) -> Output:
        """The run's record: a ``job.start`` or an ``event`` on the inbox at the
        job's home partition (stamped with the decision's ``now``, so that the job
        is decided at the instant the slot fired), or a ``schedule.prompt`` or
        ``schedule.command`` task."""
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
            return Output(self.names.inbox, raw, value, home(raw), now_ms, headers)
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
            return Output(self.names.inbox, raw, value, home(raw), now_ms, headers)
        deadline = dispatch.deadline_ms
        if deadline is None:
            deadline = now_ms + schedule.timeout_ms
        common: dict[str, Any] = {
            "schedule_id": dispatch.schedule_id,
            "run_id": dispatch.run_id,
            "context": dict(dispatch.context) if dispatch.context else None,
            "slot": None if dispatch.slot_ms is None else to_iso(_instant(dispatch.slot_ms)),
            "attempt": dispatch.attempt,
            "deadline": to_iso(_instant(deadline)),
            "triggered_by": dispatch.triggered_by,
            "at": to_iso(now),
            "origin": list(dispatch.origin),
        }
        task: SchedulePromptTask | ScheduleCommandTask
        if kind == "command":  # docs/schedules.md, "Command jobs"
            args = dict(action.get("args", {}))
            task = ScheduleCommandTask(tool=action["tool"], args=args, **common)
        elif kind == "prompt":
            # the prompt carries the run's context, if any
            task = SchedulePromptTask(agent=action["agent"], prompt=action["prompt"], **common)
        else:
            raise ValueError(f"unknown action type {kind!r}")
        value = _dumps(task.dump())
        return Output(
            self.names.tasks, dispatch.schedule_id.encode(), value, partition, now_ms, headers
        )

    def _deliver(
        self,
        deliver: Deliver,
        schedule_id: str,
        schedule: Schedule | None,
        now: datetime,
        home: Home,
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
        return Output(self.names.messages, raw, _dumps(message.dump()), home(raw))


def stored_schedules(rows: Iterable[tuple[str, bytes]]) -> dict[str, ScheduleState]:
    """Schedule states among table rows, by id (for tools and tests)."""
    return {
        key[len(SCHEDULE_PREFIX) :]: decode_schedule(raw)
        for key, raw in rows
        if key.startswith(SCHEDULE_PREFIX)
    }


class TooLarge(ShellError, ValueError):
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
