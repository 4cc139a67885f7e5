"""Schedules on a virtual clock: a scenario's span, downtime, wakes and scripted
prompt replies, run through the schedules' pure state machine
(docs/schedules.md, "Proving schedules on a virtual clock").

The clock visits each instant something is due, as a worker's ticks would: a
schedule's next slot (with its jitter), an active run's timeout, a retry, a
scripted reply or a wake. Inside a ``down`` span nothing is decided; what came
due meanwhile is decided at the span's end, as when a worker comes back.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from compiler._durations import parse_duration
from compiler._errors import LemongraphError
from compiler._time import to_iso
from compiler.scenarios._scenario import Scenario, ScenarioChange, ScenarioWake, ScriptedReply
from compiler.schedules._definition import (
    REPORTED_ACTIONS,
    Schedule,
    validate_schedule,
)
from compiler.schedules._runstate import (
    AlertRecorded,
    Define,
    Deliver,
    Dispatch,
    Remove,
    Report,
    Retire,
    RunRecorded,
    ScheduleInput,
    ScheduleState,
    ScheduleTick,
    Wake,
)
from compiler.schedules._schedule import (
    schedule_step,
)

__all__ = [
    "ScheduleScenarioResult",
    "run_schedule_scenario",
    "schedule_run_line",
]

#: The most decisions one scenario may take (a guard against a clock that
#: stops advancing; a year of a one-minute schedule is ~525,000).
MAX_STEPS = 2_000_000


@dataclass(frozen=True)
class Delivery:
    """A result or alert delivered to a ``deliver_to`` target."""

    at: datetime
    run_id: str
    target: str
    text: str
    #: how many run records came before it
    after: int


@dataclass(frozen=True)
class ScheduleScenarioResult:
    """One schedule scenario's run: every record, every delivery, what missed."""

    source: str
    scenario: str
    base: datetime
    schedules: tuple[Schedule, ...]
    records: tuple[dict[str, Any], ...]
    deliveries: tuple[Delivery, ...]
    runs: tuple[str, ...]
    counts: dict[str, int]
    failures: tuple[str, ...]
    #: The ``heartbeat.alert`` records (docs/schedules.md, "Heartbeats").
    alerts: tuple[dict[str, Any], ...] = ()

    @property
    def passed(self) -> bool:
        """Did the runs match the scenario's expectation?"""
        return not self.failures

    def summary(self) -> str:
        """``5 runs: 2 suppressed, 2 missed, 1 completed``."""
        total = sum(self.counts.values())
        parts = ", ".join(f"{n} {status}" for status, n in self.counts.items())
        return f"{total} run(s)" + (f": {parts}" if parts else "")

    def to_json(self) -> dict[str, Any]:
        """The ``results`` entry of ``simulate --json``."""
        return {
            "file": self.source,
            "scenario": self.scenario,
            "kind": "schedules",
            "passed": self.passed,
            "status": None,
            "milestones": {},
            "tasks": [],
            "runs": list(self.runs),
            "counts": dict(self.counts),
            "records": list(self.records),
            "deliveries": [
                {"at": to_iso(d.at), "run_id": d.run_id, "target": d.target, "text": d.text}
                for d in self.deliveries
            ],
            "failures": list(self.failures),
            "alerts": list(self.alerts),
        }


def schedule_run_line(record: dict[str, Any]) -> str:
    """A run as ``expect.runs`` writes it (runs are listed by slot):
    ``<slot or instant> <schedule> <status>``, ``(<triggered_by>)`` after a run
    the clock did not start, and for a span of missed slots ``×N to <last slot>``."""
    when = _instant(record)
    line = f"{when} {record['schedule_id']} {record['status']}"
    if record.get("missed_count"):
        line += f" ×{record['missed_count']} to {record.get('slot_last')}"
    if record.get("triggered_by", "schedule") != "schedule":
        line += f" ({record['triggered_by']})"
    return line


@dataclass
class _Pending:
    """A scripted report waiting for its instant."""

    at: datetime
    order: int
    schedule_id: str
    report: Report


class _Clock:
    """The virtual worker: schedule states, what is due, and what happened."""

    def __init__(self, scenario: Scenario, schedules: list[Schedule]) -> None:
        self.base = scenario.base
        self.end = scenario.base + parse_duration(scenario.until or "0s")
        self.down = [
            (self.base + parse_duration(d.start), self.base + parse_duration(d.to))
            for d in scenario.down
        ]
        self.replies: dict[str, list[str | ScriptedReply]] = {
            k: list(v) for k, v in scenario.replies.items()
        }
        self.wakes = sorted(
            enumerate(scenario.wakes), key=lambda pair: (parse_duration(pair[1].at), pair[0])
        )
        self.changes = sorted(
            enumerate(scenario.changes), key=lambda pair: (parse_duration(pair[1].at), pair[0])
        )
        self.states: dict[str, ScheduleState | None] = {s.id: None for s in schedules}
        self.schedules = schedules
        self.pending: list[_Pending] = []
        self.records: list[dict[str, Any]] = []
        self.deliveries: list[Delivery] = []
        self.alerts: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._order = 0

    def apply(self, schedule_id: str, now: datetime, item: ScheduleInput) -> None:
        before = self.states.get(schedule_id)
        if before is None and not isinstance(item, Define):
            return  # removed: nothing to wake, tick or end (as the worker does)
        step = schedule_step(before, now, item)
        self.states[schedule_id] = step.state
        delivered = []
        retired = False
        for effect in step.effects:
            if isinstance(effect, RunRecorded):
                self.records.append(dict(effect.run))
            elif isinstance(effect, Deliver):
                delivered.append(effect)
            elif isinstance(effect, AlertRecorded):
                self.alerts.append(dict(effect.alert))
            elif isinstance(effect, Dispatch):
                self._dispatched(schedule_id, now, effect)
            elif isinstance(effect, Retire):
                retired = True
        # Shown after the step's records (the run's end, then where it went).
        after = len(self.records)
        for d in delivered:
            self.deliveries.append(Delivery(now, d.run_id, d.target, d.text, after))
        if retired:  # a one-shot that ran: its tombstone, read back (docs/schedules.md)
            self.apply(schedule_id, now, Remove())

    def _dispatched(self, schedule_id: str, now: datetime, dispatch: Dispatch) -> None:
        if dispatch.action.get("type") not in REPORTED_ACTIONS:
            return  # start_job / send_event: the dispatch is the whole run
        script = self.replies.get(schedule_id)
        if not script:
            return  # no reply scripted: the run never reports and times out
        first = script[0]
        keep = isinstance(first, ScriptedReply) and first.repeat
        scripted = first if keep else script.pop(0)
        reply = ScriptedReply(output=scripted) if isinstance(scripted, str) else scripted
        if reply.never:
            return
        self._order += 1
        report = Report(dispatch.run_id, reply.status, reply.output, reply.error)
        at = now + parse_duration(reply.after)
        self.pending.append(_Pending(at, self._order, schedule_id, report))

    def _change(self, now: datetime, i: int, change: ScenarioChange) -> None:
        state = self.states.get(change.schedule)
        if state is None:
            self.failures.append(f"change #{i + 1}: no schedule {change.schedule!r} at that time")
            return
        if change.remove:
            self.apply(change.schedule, now, Remove())
            return
        try:
            schedule = validate_schedule({**state.schedule.to_json(), **change.set})
        except LemongraphError as exc:
            self.failures.append(f"change #{i + 1}: {str(exc).splitlines()[0]}")
            return
        self.apply(change.schedule, now, Define(schedule))

    def _wake(self, now: datetime, i: int, wake: ScenarioWake) -> None:
        """A wake, a run now or an abort (docs/schedules.md, "Wake", "Run now",
        "Abort"): the command the gateway writes, decided as the worker does."""
        request = wake.request_id or f"scenario-wake-{i + 1}"
        target = wake.run
        if wake.control == "abort" and target is None:
            state = self.states.get(wake.schedule)
            running = [run.run_id for run in state.active] if state is not None else []
            if len(running) != 1:
                what = "nothing is" if not running else f"{len(running)} runs are"
                self.failures.append(
                    f"wake #{i + 1}: abort of {wake.schedule!r} at {to_iso(now)}: {what} "
                    "running (name the run with run:)"
                )
                return
            target = running[0]
        item = Wake(
            request, wake.context, wake.skip_if_running, control=wake.control, target=target
        )
        self.apply(wake.schedule, now, item)

    def _up(self, at: datetime) -> datetime:
        """``at``, or the end of the down span it falls in."""
        for start, stop in self.down:
            if start <= at < stop:
                return stop
        return at

    def next_instant(self) -> datetime | None:
        candidates: list[datetime] = [p.at for p in self.pending]
        for queue in (self.wakes, self.changes):
            if queue:
                candidates.append(self.base + parse_duration(queue[0][1].at))
        for state in self.states.values():
            due = state.due_ms() if state is not None else None
            if due is not None:
                candidates.append(datetime.fromtimestamp(due / 1000, UTC))
        if not candidates:
            return None
        return self._up(min(candidates))

    def run(self) -> None:
        for schedule in self.schedules:
            self.apply(schedule.id, self._up(self.base), Define(schedule))
        steps = 0
        while True:
            now = self.next_instant()
            if now is None or now > self.end:
                return
            steps += 1
            if steps > MAX_STEPS:
                self.failures.append(f"the clock stopped advancing at {to_iso(now)}")
                return
            # Records that came in first (replies, changes, then wakes, each in
            # their order), then the tick that fires what is due at `now`.
            due = sorted((p for p in self.pending if p.at <= now), key=lambda p: (p.at, p.order))
            for pending in due:
                self.pending.remove(pending)
                self.apply(pending.schedule_id, now, pending.report)
            while self.changes and self.base + parse_duration(self.changes[0][1].at) <= now:
                self._change(now, *self.changes.pop(0))
            while self.wakes and self.base + parse_duration(self.wakes[0][1].at) <= now:
                i, wake = self.wakes.pop(0)
                if wake.schedule not in self.states:
                    self.failures.append(f"wake #{i + 1}: no schedule {wake.schedule!r}")
                    continue
                self._wake(now, i, wake)
            now_ms = int(now.timestamp() * 1000)
            for schedule_id, state in list(self.states.items()):
                due_ms = state.due_ms() if state is not None else None
                if due_ms is not None and due_ms <= now_ms:
                    self.apply(schedule_id, now, ScheduleTick())


def _instant(record: dict[str, Any]) -> str:
    """Where a run is listed: its slot; a run without one (a wake) at its
    instant, when it started (a skipped wake: when it was recorded), never
    when it ended."""
    return str(record.get("slot") or record.get("started_at") or record["at"])


def _final_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run's last record, by slot (a wake's by its instant); runs of the
    same instant in the order they first appeared."""
    last: dict[str, dict[str, Any]] = {}
    for record in records:
        last[record["run_id"]] = record  # a dict keeps the first insertion's place
    # ISO instants in UTC ("...Z") sort as text; sorted() is stable.
    return sorted(last.values(), key=_instant)


def run_schedule_scenario(
    schedules: list[Schedule], scenario: Scenario, source: str
) -> ScheduleScenarioResult:
    """Run ``scenario``'s span over ``schedules`` and compare the runs to its
    expectation (``expect.runs`` in order, ``expect.runs_of`` one schedule's,
    ``expect.count`` per status)."""
    clock = _Clock(scenario, schedules)
    clock.run()
    runs = _final_runs(clock.records)
    lines = [schedule_run_line(r) for r in runs]
    counts: Counter[str] = Counter()
    for run in runs:
        counts[run["status"]] += int(run.get("missed_count") or 1)
    failures = list(clock.failures)
    expect = scenario.expect
    if expect.runs is not None and [str(x) for x in expect.runs] != lines:
        failures += _runs_differ("runs", [str(x) for x in expect.runs], lines)
    for schedule_id, wanted in (expect.runs_of or {}).items():
        if schedule_id not in {s.id for s in schedules}:
            failures.append(f"runs_of: no schedule {schedule_id!r}")
            continue
        got = [schedule_run_line(r) for r in runs if r["schedule_id"] == schedule_id]
        if [str(x) for x in wanted] != got:
            failures += _runs_differ(f"runs_of.{schedule_id}", [str(x) for x in wanted], got)
    if expect.count is not None:
        for status, number in expect.count.items():
            if counts.get(status, 0) != number:
                failures.append(f"count: expected {number} {status}, got {counts.get(status, 0)}")
    return ScheduleScenarioResult(
        source,
        scenario.name,
        scenario.base,
        tuple(schedules),
        tuple(clock.records),
        tuple(clock.deliveries),
        tuple(lines),
        dict(counts),
        tuple(failures),
        tuple(clock.alerts),
    )


#: The most differences one expectation's failure lists.
MAX_DIFFERENCES = 10


def _runs_differ(what: str, wanted: list[str], got: list[str]) -> list[str]:
    """Every difference between the expected and the actual runs (at most
    :data:`MAX_DIFFERENCES`, then how many more), from a diff of the two lists:
    ``#i: expected A, got B`` for a run that differs, ``#i: missing A`` for an
    expected run that did not happen, ``also B (got #j)`` for one not expected."""
    lines = [] if len(wanted) == len(got) else [f"{what}: expected {len(wanted)}, got {len(got)}"]
    found: list[str] = []
    matcher = difflib.SequenceMatcher(None, wanted, got, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1)
        found += [
            f"{what}: #{i + 1}: expected {wanted[i]!r}, got {got[j]!r}"
            for i, j in zip(range(i1, i1 + pairs), range(j1, j1 + pairs), strict=True)
        ]
        found += [f"{what}: #{i + 1}: missing {wanted[i]!r}" for i in range(i1 + pairs, i2)]
        found += [f"{what}: also {got[j]!r} (got #{j + 1})" for j in range(j1 + pairs, j2)]
    lines += found[:MAX_DIFFERENCES]
    if len(found) > MAX_DIFFERENCES:
        lines.append(f"{what}: and {len(found) - MAX_DIFFERENCES} more difference(s)")
    return lines
