"""A schedule's state machine (docs/schedules.md, "Downtime and catch-up",
"Overlap"): :func:`schedule_step` takes a state, an input and ``now`` and
returns the new state and its effects, in order. Pure: no clock, no I/O; the
definition is ``_definition.py``, the ids ``_ids.py``, the state ``_runstate.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from compiler.schedules._cron import (
    count_slots,
    next_slot,
    previous_slot,
    slots_between,
)
from compiler.schedules._definition import (
    REPORTED_ACTIONS,
    Schedule,
    duration_text,
    plain_data,
    render_key,
)
from compiler.schedules._ids import (
    manual_run_id,
    request_run_id,
    retry_id,
    slot_id,
    utc_iso,
)
from compiler.schedules._origin import origin_refusal
from compiler.schedules._runstate import (
    HEARTBEAT_OK,
    MAX_ACTIVE,
    MAX_OUTPUT,
    MAX_RECORDS,
    MAX_REQUESTS,
    ActiveRun,
    AlertRecorded,
    Define,
    Deliver,
    Dispatch,
    Pending,
    Remove,
    Report,
    Retire,
    RetryDue,
    RunRecorded,
    ScheduleEffect,
    ScheduleInput,
    ScheduleState,
    ScheduleStep,
    ScheduleTick,
    TriggeredBy,
    Wake,
    at_ms,
    fire_ms,
)

__all__ = [
    "schedule_step",
]


def _to_ms(instant: datetime) -> int:
    delta = instant.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


class _Decision:
    """One step's working state: the fields of the state being decided and the
    effects so far."""

    def __init__(self, state: ScheduleState, now: datetime) -> None:
        self.schedule = state.schedule
        self.version = state.version
        self.next_slot_ms = state.next_slot_ms
        self.last_slot_ms = state.last_slot_ms
        self.active = list(state.active)
        self.buffered = state.buffered
        self.retries = list(state.retries)
        self.requests = state.requests
        self.now = now
        self.now_ms = _to_ms(now)
        self.at = utc_iso(now)
        self.effects: list[ScheduleEffect] = []
        #: False: the global switch is off (see :func:`schedule_step`).
        self.firing = True

    def state(self) -> ScheduleState:
        return ScheduleState(
            schedule=self.schedule,
            version=self.version,
            next_slot_ms=self.next_slot_ms,
            last_slot_ms=self.last_slot_ms,
            active=tuple(self.active),
            buffered=self.buffered,
            retries=tuple(self.retries),
            requests=self.requests,
        )

    def step(self) -> ScheduleStep:
        return ScheduleStep(self.state(), tuple(self.effects))

    # records

    def record(
        self,
        run_id: str,
        status: str,
        triggered_by: TriggeredBy,
        slot_ms: int | None,
        *,
        attempt: int = 0,
        root_run_id: str | None = None,
        started_ms: int | None = None,
        ended: bool = False,
        output: str | None = None,
        error: str | None = None,
        suppressed: bool = False,
        context: Mapping[str, Any] | None = None,
        job_key: str | None = None,
        delivered_to: str | None = None,
        slot_last_ms: int | None = None,
        missed_count: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        self.effects.append(
            RunRecorded(
                {
                    "type": "schedule.run",
                    "schema": 1,
                    "schedule_id": self.schedule.id,
                    "run_id": run_id,
                    "status": status,
                    "triggered_by": triggered_by,
                    "slot": utc_iso(at_ms(slot_ms)) if slot_ms is not None else None,
                    "slot_last": utc_iso(at_ms(slot_last_ms)) if slot_last_ms is not None else None,
                    "missed_count": missed_count,
                    "attempt": attempt,
                    "root_run_id": root_run_id or run_id,
                    "started_at": utc_iso(at_ms(started_ms)) if started_ms is not None else None,
                    "ended_at": self.at if ended else None,
                    "at": self.at,
                    "output": output[:MAX_OUTPUT] if output is not None else None,
                    "error": error,
                    "suppressed": suppressed,
                    "context": plain_data(context) if context is not None else None,
                    "job_key": job_key,
                    "delivered_to": delivered_to,
                    "exit_code": exit_code,
                }
            )
        )

    def slot_record(self, slot_ms: int, status: str, error: str) -> None:
        run = slot_id(self.schedule.id, at_ms(slot_ms))
        self.record(run, status, "schedule", slot_ms, error=error)

    def span_record(self, first_ms: int, last_ms: int, count: int, status: str, error: str) -> None:
        run = slot_id(self.schedule.id, at_ms(first_ms))
        self.record(
            run,
            status,
            "schedule",
            first_ms,
            error=error,
            slot_last_ms=last_ms,
            missed_count=count,
        )

    # firing

    def fire(
        self,
        run_id: str,
        triggered_by: TriggeredBy,
        slot_ms: int | None,
        attempt: int = 0,
        root_run_id: str | None = None,
        context: Mapping[str, Any] | None = None,
        origin: tuple[str, ...] = (),
    ) -> None:
        schedule = self.schedule
        root = root_run_id or run_id
        action: dict[str, Any] = plain_data(schedule.action)
        kind = action["type"]
        reported = kind in REPORTED_ACTIONS  # active until reported (docs/schedules.md)
        if reported and len(self.active) >= MAX_ACTIVE:
            # allow_all and wakes add runs; each stays in the state until it ends
            self.record(
                run_id,
                "skipped",
                triggered_by,
                slot_ms,
                attempt=attempt,
                root_run_id=root,
                error=f"too many runs active ({MAX_ACTIVE}): the oldest is {self.active[0].run_id}",
                context=context,
            )
            return
        job_key: str | None = None
        deadline: int | None = None
        if kind == "start_job":
            template = action.get("key")
            if triggered_by == "schedule" and slot_ms is not None and template:
                job_key = render_key(template, schedule, at_ms(slot_ms))
            else:
                job_key = run_id
        elif kind == "send_event":
            job_key = action["job_key"]
        else:
            deadline = self.now_ms + schedule.timeout_ms
            if context and kind == "prompt":
                action["prompt"] = f"{action['prompt']}\n\nContext: {_canonical(context)}"
        self.effects.append(
            Dispatch(
                run_id,
                schedule.id,
                slot_ms,
                triggered_by,
                attempt,
                root,
                action,
                plain_data(context) if context is not None else None,
                job_key,
                deadline,
                origin,
            )
        )
        if reported:
            assert deadline is not None
            self.active.append(
                ActiveRun(
                    run_id,
                    slot_ms,
                    triggered_by,
                    attempt,
                    root,
                    self.now_ms,
                    deadline,
                    plain_data(context) if context is not None else None,
                )
            )
            status = "running"
            ended = False
        else:
            status = "completed"
            ended = True
        self.record(
            run_id,
            status,
            triggered_by,
            slot_ms,
            attempt=attempt,
            root_run_id=root,
            started_ms=self.now_ms,
            ended=ended,
            context=context,
            job_key=job_key,
        )

    def fire_slot(self, slot_ms: int) -> None:
        """A slot whose turn came: the overlap policy decides (prompt and command
        runs only are ever active)."""
        run = slot_id(self.schedule.id, at_ms(slot_ms))
        if self.active and self.schedule.overlap != "allow_all":
            if self.schedule.overlap == "skip":
                self.slot_record(
                    slot_ms, "skipped", f"overlap: run {self.active[0].run_id} still running"
                )
                return
            if self.buffered is not None:
                self.slot_record(
                    self.buffered.slot_ms,
                    "skipped",
                    f"overlap: buffered slot replaced by the slot of {utc_iso(at_ms(slot_ms))}",
                )
            self.buffered = Pending(run, slot_ms)
            return
        self.fire(run, "schedule", slot_ms)

    # ends

    def end(
        self,
        run: ActiveRun,
        status: str,
        output: str | None,
        error: str | None,
        exit_code: int | None = None,
        retry: bool = True,
        deliver: bool = True,
    ) -> None:
        self.active = [a for a in self.active if a.run_id != run.run_id]
        schedule = self.schedule
        suppressed = status == "suppressed"
        target = schedule.deliver_to
        delivered_to = None
        # Switched off, nothing is delivered either: the global switch silences
        # every schedule (docs/schedules.md, "The global switch").
        if deliver and not suppressed and target != "none" and self.firing:
            if status == "completed":
                text = f"{schedule.name}: {output or ''}"
            else:
                text = f"{schedule.name} ({status}): {error or status}"
            self.effects.append(Deliver(run.run_id, target, text))
            delivered_to = target
        self.record(
            run.run_id,
            status,
            run.triggered_by,
            run.slot_ms,
            attempt=run.attempt,
            root_run_id=run.root_run_id,
            started_ms=run.started_ms,
            ended=True,
            output=output,
            error=error,
            suppressed=suppressed,
            context=run.context,
            delivered_to=delivered_to,
            exit_code=exit_code,
        )
        if schedule.heartbeat and status in ("completed", "failed", "timeout"):
            self.alert(run, status, output, error, delivered_to)
        if (
            retry
            and status in ("failed", "timeout")
            and run.triggered_by in ("schedule", "retry")
            and run.attempt < schedule.max_retries
        ):
            self.retries.append(
                RetryDue(
                    run.root_run_id,
                    run.attempt + 1,
                    self.now_ms + schedule.retry_backoff_ms,
                    run.slot_ms,
                )
            )
        self.release_buffered()

    def alert(
        self,
        run: ActiveRun,
        status: str,
        output: str | None,
        error: str | None,
        delivered_to: str | None,
    ) -> None:
        """A heartbeat's run that did not answer ``HEARTBEAT_OK`` (docs/schedules.md,
        "Heartbeats"): its alert record, after the run's. Its severity is the
        schedule's ``meta.severity`` (default ``warning``), ``critical`` for a run
        that failed or timed out; its delivery is the run's (``delivered_to``)."""
        severity = "critical" if status != "completed" else self.schedule.severity
        self.effects.append(
            AlertRecorded(
                {
                    "type": "heartbeat.alert",
                    "schema": 1,
                    "schedule_id": self.schedule.id,
                    "run_id": run.run_id,
                    "severity": severity,
                    "status": status,
                    "triggered_by": run.triggered_by,
                    "name": self.schedule.name,
                    "output": output[:MAX_OUTPUT] if output is not None else None,
                    "error": error,
                    "delivered_to": delivered_to,
                    "at": self.at,
                }
            )
        )

    def release_buffered(self) -> None:
        if self.buffered is None or self.active or not self.firing:
            return
        pending, self.buffered = self.buffered, None
        if not self.schedule.enabled:
            self.slot_record(pending.slot_ms, "skipped", "paused")
            return
        self.fire(pending.run_id, "schedule", pending.slot_ms)

    # the tick

    def tick(self) -> None:
        now_ms = self.now_ms
        for run in list(self.active):
            if run.deadline_ms <= now_ms:
                self.end(
                    run,
                    "timeout",
                    None,
                    f"timeout: no report within {duration_text(self.schedule.timeout_ms)}",
                )
        self.release_buffered()  # a slot kept while switched off (see schedule_step)
        due = sorted(
            (r for r in self.retries if r.due_ms <= now_ms), key=lambda r: (r.due_ms, r.root_run_id)
        )
        for retry in due:
            self.retries.remove(retry)
            rerun = retry_id(retry.root_run_id, retry.attempt)
            if not self.schedule.enabled:
                self.record(
                    rerun,
                    "skipped",
                    "retry",
                    retry.slot_ms,
                    attempt=retry.attempt,
                    root_run_id=retry.root_run_id,
                    error="paused",
                )
                continue
            self.fire(rerun, "retry", retry.slot_ms, retry.attempt, retry.root_run_id)
        if self.schedule.one_shot:
            self.one_shot_slot()
        elif self.next_slot_ms is not None and self.next_slot_ms <= now_ms:
            self.slots()

    def one_shot_slot(self) -> None:
        """A one-shot's instant came (docs/schedules.md, "One-shot schedules"):
        it fires, however late, unless a ``catchup_window`` set says it is
        missed; then it has no next slot."""
        slot = self.next_slot_ms
        if slot is None or fire_ms(self.schedule, slot) > self.now_ms:
            return
        width = self.schedule.catchup_window_ms
        if width is not None and slot < self.now_ms - width:
            self.slot_record(slot, "missed", "missed: older than the catch-up window")
        else:
            self.fire_slot(slot)
        self.last_slot_ms = slot
        self.next_slot_ms = None

    def slots(self) -> None:
        """The slots in [next slot, now] (docs/schedules.md, "Downtime and catch-up"), in
        time bounded by :data:`MAX_RECORDS`, not by the downtime."""
        schedule = self.schedule
        cron, tz = schedule.cron, schedule.timezone
        assert self.next_slot_ms is not None
        first = at_ms(self.next_slot_ms)
        spread = timedelta(milliseconds=schedule.jitter_ms)
        if self.one_slot_due(first):
            return
        settled = previous_slot(cron, tz, self.now - spread)
        fire = self.newest_due(first, settled, spread)
        start = self.catchup_start(first, settled, spread)
        if fire is not None and fire < start:
            fire = None
        window, start = self.coalesced(fire, start, first)
        cursor = self.missed(first, start)
        if fire is None:
            self.next_slot_ms = _to_ms(cursor)
            return
        for slot in window:
            if schedule.overlap == "allow_all":
                self.fire_slot(_to_ms(slot))
            else:
                self.slot_record(_to_ms(slot), "skipped", "coalesced")
        self.fire_slot(_to_ms(fire))
        self.last_slot_ms = _to_ms(fire)
        self.next_slot_ms = _to_ms(next_slot(cron, tz, fire))

    def one_slot_due(self, first: datetime) -> bool:
        """The common tick: no jitter and only the slot ``first`` due, which fires
        or is missed (the same outcome as :meth:`slots` otherwise reaches). False,
        having done nothing, when the tick is not that one."""
        schedule = self.schedule
        assert self.next_slot_ms is not None
        if schedule.jitter_ms:
            return False
        following = next_slot(schedule.cron, schedule.timezone, first)
        if following > self.now:
            width = schedule.catchup_window_ms
            if width is None or first >= self.now - timedelta(milliseconds=width):
                self.fire_slot(self.next_slot_ms)
            else:
                self.slot_record(
                    self.next_slot_ms, "missed", "missed: older than the catch-up window"
                )
            self.last_slot_ms = self.next_slot_ms
            self.next_slot_ms = _to_ms(following)
            return True
        return False

    def newest_due(
        self, first: datetime, settled: datetime | None, spread: timedelta
    ) -> datetime | None:
        """The newest slot from ``first`` on whose fire instant (nominal + jitter)
        has come; ``settled`` is the newest slot at or before now - ``spread``."""
        schedule = self.schedule
        now = self.now
        candidates = [settled] if settled is not None and settled >= first else []
        low = max(first - timedelta(microseconds=1), now - spread)
        if schedule.jitter_ms:
            candidates += slots_between(schedule.cron, schedule.timezone, low, now, 1000)
        fire = None
        for candidate in candidates:
            if fire_ms(schedule, _to_ms(candidate)) <= self.now_ms:
                fire = candidate
        return fire

    def catchup_start(
        self, first: datetime, settled: datetime | None, spread: timedelta
    ) -> datetime:
        """The catch-up window's start: a slot older than it is missed. Default
        (one period): the newest settled slot opens it."""
        width = self.schedule.catchup_window_ms
        if width is None:
            return settled if settled is not None else first
        return self.now - spread - timedelta(milliseconds=width)

    def coalesced(
        self, fire: datetime | None, start: datetime, first: datetime
    ) -> tuple[list[datetime], datetime]:
        """The window's slots before ``fire``, oldest first, at most
        :data:`MAX_RECORDS` (older ones count as missed: the window's start
        moves up to the oldest kept), and that start."""
        window: list[datetime] = []
        if fire is None:
            return window, start
        cron, tz = self.schedule.cron, self.schedule.timezone
        cursor = fire
        while len(window) < MAX_RECORDS:
            before = previous_slot(cron, tz, cursor - timedelta(microseconds=1))
            if before is None or before < start or before < first:
                break
            window.append(before)
            cursor = before
        if len(window) == MAX_RECORDS:
            start = window[-1]
        window.reverse()
        return window, start

    def missed(self, first: datetime, start: datetime) -> datetime:
        """Record the slots in [first, start) missed: one record each, at most
        :data:`MAX_RECORDS`, then one record for the rest. Returns the first
        slot not missed."""
        cron, tz = self.schedule.cron, self.schedule.timezone
        cursor = first
        count = 0
        while cursor < start and count < MAX_RECORDS:
            self.slot_record(_to_ms(cursor), "missed", "missed: older than the catch-up window")
            self.last_slot_ms = _to_ms(cursor)
            count += 1
            cursor = next_slot(cron, tz, cursor)
        if cursor < start:
            last = previous_slot(cron, tz, start - timedelta(microseconds=1))
            assert last is not None
            total = count_slots(cron, tz, cursor - timedelta(microseconds=1), last)
            self.span_record(
                _to_ms(cursor),
                _to_ms(last),
                total,
                "missed",
                f"missed: {total} slots older than the catch-up window",
            )
            self.last_slot_ms = _to_ms(last)
            cursor = next_slot(cron, tz, last)
        return cursor


def _canonical(value: Any) -> str:
    return json.dumps(plain_data(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schedule_step(
    state: ScheduleState | None, now: datetime, item: ScheduleInput, *, firing: bool = True
) -> ScheduleStep:
    """Decide ``item`` at ``now`` (docs/schedules.md, "Downtime and catch-up", "Overlap").
    Pure and deterministic: the same state, instant and input give equal
    effects. ``state`` None: no schedule (only :class:`Define` does anything).

    ``firing`` False is the global switch turned off (docs/schedules.md, "The
    global switch"): a :class:`Define` applies without first deciding what was
    due, and a :class:`Report` ends its run without releasing a buffered slot
    (it fires at the first tick once firing again). Nothing is dispatched; a
    :class:`ScheduleTick` must not be sent then."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")
    if state is None:
        if not isinstance(item, Define):
            return ScheduleStep(None, ())
        schedule = item.schedule
        if schedule.one_shot:
            decision = _Decision(ScheduleState(schedule, 1, None, None), now)
            _one_shot_define(decision, schedule)
            return _retired(None, decision.step())
        upcoming = (
            _to_ms(next_slot(schedule.cron, schedule.timezone, now)) if schedule.enabled else None
        )
        return ScheduleStep(ScheduleState(schedule, 1, upcoming, None), ())
    decision = _Decision(state, now)
    decision.firing = firing
    if isinstance(item, ScheduleTick):
        decision.tick()
    elif isinstance(item, Define):
        _define(decision, item.schedule)
    elif isinstance(item, Remove):
        for run in decision.active:
            decision.record(
                run.run_id,
                "aborted",
                run.triggered_by,
                run.slot_ms,
                attempt=run.attempt,
                root_run_id=run.root_run_id,
                started_ms=run.started_ms,
                ended=True,
                error="aborted: the schedule was removed",
                context=run.context,
            )
        if decision.buffered is not None:
            decision.slot_record(decision.buffered.slot_ms, "skipped", "the schedule was removed")
        return ScheduleStep(None, tuple(decision.effects))
    elif isinstance(item, Wake):
        _wake(decision, item)
    elif isinstance(item, Report):
        ended = next((a for a in decision.active if a.run_id == item.run_id), None)
        if ended is None:
            return ScheduleStep(state, ())  # late, duplicate, or after a timeout
        if item.status == "completed":
            quiet = state.schedule.heartbeat and item.output.strip() == HEARTBEAT_OK
            status = "suppressed" if quiet else "completed"
            decision.end(ended, status, item.output, None, item.exit_code)
        else:
            error = item.error or "failed"
            decision.end(ended, "failed", item.output or None, error, item.exit_code, item.retry)
    else:  # pragma: no cover
        raise TypeError(f"not a schedule input: {item!r}")
    return _retired(state, decision.step())


def _finished(state: ScheduleState | None) -> bool:
    """A one-shot whose instant was handled and whose slot's runs (retries
    included) all ended: what is left is to remove it. A run now or a wake
    still going does not hold it (the removal ends it ``aborted``), and one
    that ends later does not finish it again."""
    if state is None or not state.schedule.one_shot or state.last_slot_ms is None:
        return False
    root = slot_id(state.schedule.id, at_ms(state.last_slot_ms))
    return (
        all(run.root_run_id != root for run in state.active)
        and not state.retries
        and state.buffered is None
    )


def _retired(before: ScheduleState | None, step: ScheduleStep) -> ScheduleStep:
    """``step``, with a :class:`Retire` when it is the one that finished a
    one-shot (docs/schedules.md, "One-shot schedules"): once, at that step."""
    if not _finished(step.state) or _finished(before):
        return step
    last = [e.run for e in step.effects if isinstance(e, RunRecorded)]
    run_id = str(last[-1]["run_id"]) if last else ""
    status = str(last[-1]["status"]) if last else "ended"
    return ScheduleStep(step.state, (*step.effects, Retire(run_id, status)))


def _one_shot_define(decision: _Decision, schedule: Schedule) -> None:
    """A one-shot defined, changed or resumed: its instant is next, unless it
    was handled already, it is paused, or it has passed: then it is recorded
    ``missed`` (and so removed)."""
    if decision.last_slot_ms is not None or not schedule.enabled:
        decision.next_slot_ms = None
        return
    assert schedule.at_ms is not None
    if schedule.at_ms < decision.now_ms:
        decision.slot_record(
            schedule.at_ms, "missed", "missed: its instant had passed when it was defined"
        )
        decision.last_slot_ms = schedule.at_ms
        decision.next_slot_ms = None
        return
    decision.next_slot_ms = schedule.at_ms


def _define(decision: _Decision, schedule: Schedule) -> None:
    """An update: what was due under the old definition is decided first; then
    the next slot is the first after max(now, last slot) (unchanged when the
    expression and time zone are); paused: none. Switched off (``firing``
    False), nothing due is decided: it comes due at the first tick after."""
    if decision.firing:
        decision.tick()
    previous = decision.schedule
    decision.schedule = schedule
    decision.version += 1
    if decision.buffered is not None and (not schedule.enabled or schedule.overlap != "buffer_one"):
        pending, decision.buffered = decision.buffered, None
        decision.slot_record(
            pending.slot_ms, "skipped", "paused" if not schedule.enabled else "overlap changed"
        )
    if schedule.one_shot:
        _one_shot_define(decision, schedule)
        return
    if not schedule.enabled:
        decision.next_slot_ms = None
        return
    if previous.one_shot:
        decision.next_slot_ms = _to_ms(next_slot(schedule.cron, schedule.timezone, decision.now))
        return
    if (
        previous.enabled
        and decision.next_slot_ms is not None
        and (previous.cron.expr, previous.timezone) == (schedule.cron.expr, schedule.timezone)
    ):
        return  # the same clock: a slot still waiting for its jitter keeps its turn
    after = decision.now
    if decision.last_slot_ms is not None and decision.last_slot_ms > decision.now_ms:
        after = at_ms(decision.last_slot_ms)
    elif not decision.firing and previous.enabled and decision.next_slot_ms is not None:
        # Switched off, what came due is still undecided: the new clock's slots
        # since then come due (and are caught up or missed) once firing again.
        after = at_ms(min(decision.next_slot_ms, decision.now_ms) - 1)
    decision.next_slot_ms = _to_ms(next_slot(schedule.cron, schedule.timezone, after))


def _wake(decision: _Decision, item: Wake) -> None:
    """A wake, a run now or an abort (docs/schedules.md, "Wake", "Run now",
    "Abort"): each once per request id."""
    if item.key in decision.requests:
        return
    decision.requests = (*decision.requests, item.key)[-MAX_REQUESTS:]
    if item.control == "abort":
        _abort(decision, item)
        return
    manual = item.control == "run"
    sid = decision.schedule.id
    run = manual_run_id(sid, item.request_id) if manual else request_run_id(sid, item.request_id)
    by: TriggeredBy = "manual" if manual else "wake"
    context = item.context
    # A wake from inside a run of this schedule, or of a chain through it
    # (docs/schedules.md, "Wake loops").
    loop = origin_refusal(decision.schedule.id, item.origin)
    if loop is not None:
        decision.record(run, "skipped", by, None, error=loop, context=context)
        return
    # A run now runs a paused schedule too (docs/schedules.md, "Run now").
    if not decision.schedule.enabled and not manual:
        decision.record(run, "skipped", by, None, error="paused", context=context)
        return
    if item.skip_if_running and decision.active:
        decision.record(
            run,
            "skipped",
            by,
            None,
            error=f"skip_if_running: run {decision.active[0].run_id} is running",
            context=context,
        )
        return
    decision.fire(run, by, None, context=context, origin=item.origin)


def _abort(decision: _Decision, item: Wake) -> None:
    """End the active run ``item.target`` ``aborted`` (docs/schedules.md,
    "Abort"): not retried, delivered nowhere; its report, if one comes, finds
    it no longer active and changes nothing. A run not active (ended, or
    never): nothing."""
    run = next((a for a in decision.active if a.run_id == item.target), None)
    if run is None:
        return
    error = f"aborted on request {item.request_id}"
    decision.end(run, "aborted", None, error, retry=False, deliver=False)
