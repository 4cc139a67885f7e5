"""LemonAutomation's controls in the pure decider (docs/schedules.md, "Run now",
"Abort", "One-shot schedules"): a run now (``manual``, also while paused, its run
id from the request id), an abort of an active run (``aborted``, a late report
ignored, not retried, delivered nowhere), and a one-shot (``at:``) that runs once
and is then retired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import (
    Define,
    Deliver,
    Dispatch,
    Remove,
    Report,
    Retire,
    RunRecorded,
    ScheduleError,
    ScheduleState,
    ScheduleStep,
    ScheduleTick,
    Wake,
    manual_run_id,
    request_run_id,
    schedule_step,
    slot_id,
    validate_schedule,
)
from compiler.schedules._definition import Schedule
from tests.compiler.schedules.test_schedule_step import PROMPT, START, T0, at
from topics import ScheduleRunRecord


def make(**fields: Any) -> Schedule:
    data: dict[str, Any] = {"id": "s", "name": "S", "schedule": "every 30m", "action": PROMPT}
    data.update(fields)
    if "at" in fields:
        del data["schedule"]
    return validate_schedule(data)


def define(schedule: Schedule, now: datetime = T0) -> ScheduleState:
    state = schedule_step(None, now, Define(schedule)).state
    assert state is not None
    return state


def records(step: ScheduleStep) -> list[dict[str, Any]]:
    out = [dict(e.run) for e in step.effects if isinstance(e, RunRecorded)]
    for run in out:
        assert ScheduleRunRecord.model_validate(run).dump() == run
    return out


def kinds(step: ScheduleStep) -> list[str]:
    return [type(e).__name__ for e in step.effects]


def run_now(request: str, **fields: Any) -> Wake:
    return Wake(request, control="run", **fields)


def abort(request: str, run_id: str) -> Wake:
    return Wake(request, control="abort", target=run_id)


# -- run now -------------------------------------------------------------------------


def test_a_run_now_is_manual_and_named_by_its_request_id() -> None:
    state = define(make(action=START))
    step = schedule_step(state, at(1), run_now("r1"))
    [record] = records(step)
    assert record["triggered_by"] == "manual"
    assert record["status"] == "completed"
    assert record["run_id"] == manual_run_id("s", "r1")
    assert record["run_id"].startswith("mn-")
    [dispatch] = [e for e in step.effects if isinstance(e, Dispatch)]
    assert dispatch.job_key == record["run_id"]  # its job is its run, as a wake's
    # A retried request is the same run: nothing again.
    assert step.state is not None
    assert schedule_step(step.state, at(2), run_now("r1")).effects == ()
    # A wake with the same request id is another request.
    woken = records(schedule_step(step.state, at(2), Wake("r1")))
    assert [r["run_id"] for r in woken] == [request_run_id("s", "r1")]
    # The clock did not move: the next slot is still the one at 09:30.
    assert step.state.next_slot_ms == state.next_slot_ms


def test_a_run_now_runs_a_paused_schedule_where_a_wake_is_skipped() -> None:
    paused = define(make(enabled=False))
    woken = records(schedule_step(paused, at(1), Wake("w")))
    assert [(r["status"], r["error"]) for r in woken] == [("skipped", "paused")]
    step = schedule_step(paused, at(1), run_now("m", context={"why": "check"}))
    [record] = records(step)
    assert (record["status"], record["triggered_by"]) == ("running", "manual")
    assert record["context"] == {"why": "check"}
    [dispatch] = [e for e in step.effects if isinstance(e, Dispatch)]
    assert dispatch.action["prompt"].endswith('Context: {"why":"check"}')


def test_a_failed_manual_run_is_not_retried() -> None:
    state = define(make(max_retries=2))
    started = schedule_step(state, at(1), run_now("m")).state
    assert started is not None
    failed = schedule_step(started, at(2), Report(manual_run_id("s", "m"), "failed", error="x"))
    assert failed.state is not None
    assert failed.state.retries == ()


# -- abort -------------------------------------------------------------------------------


def test_an_abort_ends_the_run_aborted_and_its_late_report_changes_nothing() -> None:
    schedule = make(max_retries=1, deliver_to="web:ops")
    state = define(schedule)
    fired = schedule_step(state, at(30), ScheduleTick())
    run = slot_id("s", at(30))
    assert fired.state is not None
    assert [a.run_id for a in fired.state.active] == [run]
    aborted = schedule_step(fired.state, at(31), abort("a1", run))
    [record] = records(aborted)
    assert record["run_id"] == run
    assert record["status"] == "aborted"
    assert record["error"] == "aborted on request a1"
    assert record["ended_at"] == "2026-01-05T09:31:00Z"
    assert not [e for e in aborted.effects if isinstance(e, Deliver)]  # nowhere
    assert aborted.state is not None
    assert aborted.state.active == ()
    assert aborted.state.retries == ()  # an aborted run is not retried
    # The agents service's report comes later: nothing.
    late = schedule_step(aborted.state, at(32), Report(run, "completed", "done"))
    assert late.effects == ()
    assert late.state == aborted.state
    # The same abort again, or an abort of a run not active: nothing.
    assert schedule_step(aborted.state, at(33), abort("a1", run)).effects == ()
    assert schedule_step(aborted.state, at(33), abort("a2", "sl-none")).effects == ()


def test_an_abort_releases_a_buffered_slot() -> None:
    state = define(make(overlap="buffer_one", timeout="2h"))
    first = schedule_step(state, at(30), ScheduleTick()).state
    assert first is not None
    waiting = schedule_step(first, at(60), ScheduleTick()).state
    assert waiting is not None
    assert waiting.buffered is not None
    step = schedule_step(waiting, at(61), abort("a", slot_id("s", at(30))))
    assert [(r["status"], r["slot"]) for r in records(step)] == [
        ("aborted", "2026-01-05T09:30:00Z"),
        ("running", "2026-01-05T10:00:00Z"),
    ]


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.sampled_from(["tick", "run", "abort-first", "abort-last", "report"]),
        min_size=1,
        max_size=12,
    )
)
def test_controls_are_deterministic_and_an_aborted_run_never_ends_twice(
    steps: list[str],
) -> None:
    """Whatever the order of ticks, runs now, aborts and reports: the same inputs
    give the same effects, and each run ends at most once."""
    state = define(make(overlap="allow_all"))
    ended: list[str] = []
    for i, kind in enumerate(steps):
        now = at(15 * (i + 1))
        assert state is not None
        item: Any
        if kind == "tick":
            item = ScheduleTick()
        elif kind == "run":
            item = run_now(f"r{i}")
        elif kind == "report":
            target = state.active[0].run_id if state.active else "sl-none"
            item = Report(target, "completed", "ok")
        else:
            active = state.active
            target = (active[0] if kind == "abort-first" else active[-1]).run_id if active else "x"
            item = abort(f"a{i}", target)
        step = schedule_step(state, now, item)
        assert schedule_step(state, now, item) == step
        ended += [
            r["run_id"]
            for r in records(step)
            if r["status"] not in ("running", "pending") and r["ended_at"]
        ]
        state = step.state
    assert len(ended) == len(set(ended))


# -- one-shot ----------------------------------------------------------------------------


def test_a_one_shot_is_validated_and_normalised() -> None:
    one = make(at="2026-01-05T10:15:00+01:00", timezone="Europe/Paris")
    assert one.one_shot
    spec = one.to_json()
    assert spec["at"] == "2026-01-05T09:15:00Z"
    assert "schedule" not in spec
    assert validate_schedule(spec) == one
    assert one.cron.expr == "15 10 5 1 *"  # its minute on its wall clock, shown
    with pytest.raises(ScheduleError, match=r"^at: give schedule .* not both"):
        validate_schedule({**spec, "schedule": "hourly"})
    with pytest.raises(ScheduleError, match=r"^at: '2026-01-05T10:15:00' has no offset"):
        make(at="2026-01-05T10:15:00")
    with pytest.raises(ScheduleError, match=r"^at: 'tomorrow' is not an ISO 8601 instant"):
        make(at="tomorrow")
    # What YAML reads from an unquoted instant: an aware datetime.
    assert make(at=datetime(2026, 1, 5, 9, 15, tzinfo=UTC)) == one.__class__(
        **{**one.__dict__, "timezone": "UTC", "cron": make(at="2026-01-05T09:15:00Z").cron}
    )


def test_a_one_shot_fires_once_and_is_retired_after_its_run() -> None:
    state = define(make(at="2026-01-05T09:20:00Z", action=START))
    assert state.next_slot_ms is not None
    assert state.due_ms() == state.next_slot_ms
    assert schedule_step(state, at(19), ScheduleTick()).effects == ()
    fired = schedule_step(state, at(20), ScheduleTick())
    assert kinds(fired) == ["Dispatch", "RunRecorded", "Retire"]
    [retire] = [e for e in fired.effects if isinstance(e, Retire)]
    assert retire == Retire(slot_id("s", at(20)), "completed")
    assert fired.state is not None
    assert fired.state.due_ms() is None  # nothing more, ever
    # Another step before the tombstone comes back retires nothing again.
    assert schedule_step(fired.state, at(21), ScheduleTick()).effects == ()
    # The tombstone read back removes it.
    assert schedule_step(fired.state, at(21), Remove()).state is None


def test_a_prompt_one_shot_is_retired_when_its_last_retry_ends() -> None:
    state = define(make(at="2026-01-05T09:20:00Z", max_retries=1, retry_backoff="1m"))
    fired = schedule_step(state, at(20), ScheduleTick())
    assert "Retire" not in kinds(fired)
    assert fired.state is not None
    failed = schedule_step(fired.state, at(21), Report(slot_id("s", at(20)), "failed", error="x"))
    assert "Retire" not in kinds(failed)  # a retry is due
    assert failed.state is not None
    retried = schedule_step(failed.state, at(22), ScheduleTick())
    assert "Retire" not in kinds(retried)
    assert retried.state is not None
    [active] = retried.state.active
    done = schedule_step(retried.state, at(23), Report(active.run_id, "completed", "ok"))
    assert kinds(done)[-1] == "Retire"
    assert done.effects[-1] == Retire(active.run_id, "completed")


def test_a_one_shot_defined_after_its_instant_is_missed_and_retired() -> None:
    step = schedule_step(None, at(30), Define(make(at="2026-01-05T09:20:00Z")))
    assert [(r["status"], r["error"]) for r in records(step)] == [
        ("missed", "missed: its instant had passed when it was defined")
    ]
    assert kinds(step)[-1] == "Retire"


def test_a_paused_one_shot_does_not_fire_and_a_run_now_does_not_retire_it() -> None:
    state = define(make(at="2026-01-05T09:20:00Z", action=START, enabled=False))
    assert state.due_ms() is None
    manual = schedule_step(state, at(5), run_now("m"))
    assert "Retire" not in kinds(manual)
    assert manual.state is not None
    again = make(at="2026-01-05T09:20:00Z", action=START)
    resumed = schedule_step(manual.state, at(10), Define(again))
    assert resumed.state is not None
    assert resumed.state.next_slot_ms is not None
    assert "Retire" in kinds(schedule_step(resumed.state, at(20), ScheduleTick()))


def test_a_one_shot_late_after_downtime_fires_unless_a_catchup_window_says_missed() -> None:
    late = schedule_step(
        define(make(at="2026-01-05T09:20:00Z", action=START)), at(90), ScheduleTick()
    )
    assert [r["status"] for r in records(late)] == ["completed"]
    windowed = define(make(at="2026-01-05T09:20:00Z", action=START, catchup_window="10m"))
    missed = schedule_step(windowed, at(90), ScheduleTick())
    assert [r["status"] for r in records(missed)] == ["missed"]
    assert kinds(missed)[-1] == "Retire"


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(1, 40),
            st.sampled_from(["tick", "report-ok", "report-fail", "run", "pause", "resume"]),
        ),
        min_size=1,
        max_size=15,
    ),
    retries=st.integers(0, 2),
)
def test_a_one_shot_fires_its_slot_at_most_once_and_is_retired_at_most_once(
    steps: list[tuple[int, str]], retries: int
) -> None:
    """Whatever comes (ticks, reports, runs now, pauses and resumes): its slot
    is dispatched at most once, and one step at most retires it."""
    spec = {"at": "2026-01-05T09:20:00Z", "max_retries": retries, "retry_backoff": "1m"}
    state: ScheduleState | None = define(make(**spec))
    now = T0
    slot_dispatches = 0
    retires = 0
    for minutes, kind in steps:
        if state is None:
            break
        now += timedelta(minutes=minutes)
        item: Any
        if kind == "tick":
            item = ScheduleTick()
        elif kind.startswith("report"):
            target = state.active[0].run_id if state.active else "sl-none"
            ok = kind == "report-ok"
            item = Report(target, "completed" if ok else "failed", "x", None if ok else "e")
        elif kind == "run":
            item = run_now(f"r{minutes}")
        else:
            item = Define(make(**spec, enabled=kind == "resume"))
        step = schedule_step(state, now, item)
        slot_dispatches += sum(
            1 for e in step.effects if isinstance(e, Dispatch) and e.triggered_by == "schedule"
        )
        retires += sum(1 for e in step.effects if isinstance(e, Retire))
        state = step.state
    assert slot_dispatches <= 1
    assert retires <= 1
