"""The schedule state machine, rule by rule: define/update/pause/resume, ticks
and catch-up, overlap, timeouts, retries, reports and heartbeats, wake and
remove (docs/schedules.md, "Overlap", "Timeouts and retries", "Downtime and
catch-up", "Heartbeats", "Wake")."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from compiler import (
    Define,
    Deliver,
    Dispatch,
    Remove,
    Report,
    RunRecorded,
    ScheduleState,
    ScheduleStep,
    ScheduleTick,
    Wake,
    jitter_ms,
    request_run_id,
    retry_id,
    schedule_step,
    slot_id,
    validate_schedule,
)
from compiler.schedules._definition import Schedule
from topics import ScheduleRunRecord

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
PROMPT = {"type": "prompt", "agent": "watcher", "prompt": "Check the queue."}
START = {"type": "start_job", "playbook_key": "review"}


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def make(**fields: Any) -> Schedule:
    data: dict[str, Any] = {"id": "s", "name": "S", "schedule": "every 30m", "action": PROMPT}
    data.update(fields)
    return validate_schedule(data)


def define(schedule: Schedule, now: datetime = T0) -> ScheduleState:
    state = schedule_step(None, now, Define(schedule)).state
    assert state is not None
    return state


def records(step: ScheduleStep) -> list[dict[str, Any]]:
    out = [dict(e.run) for e in step.effects if isinstance(e, RunRecorded)]
    for run in out:
        assert ScheduleRunRecord.model_validate(run).dump() == run  # exactly its fields
    return out


def brief(step: ScheduleStep) -> list[tuple[str, str | None, str | None]]:
    return [(r["status"], r["slot"], r["error"]) for r in records(step)]


def dispatches(step: ScheduleStep) -> list[Dispatch]:
    return [e for e in step.effects if isinstance(e, Dispatch)]


def delivers(step: ScheduleStep) -> list[Deliver]:
    return [e for e in step.effects if isinstance(e, Deliver)]


def tick(state: ScheduleState, now: datetime) -> tuple[ScheduleState, ScheduleStep]:
    step = schedule_step(state, now, ScheduleTick())
    assert step.state is not None
    return step.state, step


def slot(minutes: float) -> str:
    return slot_id("s", at(minutes))


# -- define -------------------------------------------------------------------------


def test_define_never_fires_past_slots() -> None:
    state = define(make(), at(10))
    assert state.version == 1
    assert state.next_slot_ms == ms(at(30))
    assert state.last_slot_ms is None
    assert state.due_ms() == ms(at(30))
    state, step = tick(state, at(29))
    assert step.effects == ()
    assert state.next_slot_ms == ms(at(30))


def test_a_state_with_no_schedule_ignores_everything_but_define() -> None:
    for item in (ScheduleTick(), Remove(), Wake("r"), Report("x", "completed", "")):
        assert schedule_step(None, T0, item) == ScheduleStep(None, ())


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule_step(None, datetime(2026, 1, 1), Define(make()))


# -- firing -------------------------------------------------------------------------


def test_a_prompt_slot_dispatches_and_runs() -> None:
    state, step = tick(define(make()), at(30))
    (dispatch,) = dispatches(step)
    assert dispatch == Dispatch(
        slot(30), "s", ms(at(30)), "schedule", 0, slot(30), PROMPT, None, None, ms(at(35))
    )
    (run,) = records(step)
    assert run["status"] == "running"
    assert (run["run_id"], run["root_run_id"], run["slot"]) == (slot(30), slot(30), iso(at(30)))
    assert (run["started_at"], run["ended_at"], run["at"]) == (iso(at(30)), None, iso(at(30)))
    assert [a.run_id for a in state.active] == [slot(30)]
    assert (state.last_slot_ms, state.next_slot_ms) == (ms(at(30)), ms(at(60)))
    assert state.due_ms() == ms(at(35))  # the run's deadline


def test_start_job_is_the_whole_run_and_never_active() -> None:
    state, step = tick(define(make(action=START)), at(30))
    (dispatch,) = dispatches(step)
    assert dispatch.job_key == slot(30)
    assert dispatch.deadline_ms is None
    (run,) = records(step)
    assert (run["status"], run["job_key"], run["ended_at"]) == ("completed", slot(30), iso(at(30)))
    assert state.active == ()


def test_start_job_key_template() -> None:
    action = {**START, "key": "review-{date}-{time}"}
    schedule = make(action=action, timezone="Europe/Paris")
    _, step = tick(define(schedule), at(30))
    assert dispatches(step)[0].job_key == "review-2026-01-05-1030"


def test_send_event_targets_its_job_with_the_slot_as_idempotency_key() -> None:
    action = {"type": "send_event", "job_key": "job-1", "event": {"action": "reminder_due"}}
    _, step = tick(define(make(action=action)), at(30))
    (dispatch,) = dispatches(step)
    assert (dispatch.run_id, dispatch.job_key) == (slot(30), "job-1")
    assert records(step)[0]["job_key"] == "job-1"


# -- reports and heartbeats ---------------------------------------------------------


def running(**fields: Any) -> ScheduleState:
    state, _ = tick(define(make(**fields)), at(30))
    return state


def report(
    state: ScheduleState,
    status: str = "completed",
    output: str = "",
    error: str | None = None,
    now: datetime | None = None,
) -> ScheduleStep:
    now = now or at(31)
    return schedule_step(state, now, Report(slot(30), status, output, error))  # type: ignore[arg-type]


def test_completed_report_delivers_the_result() -> None:
    state = running(deliver_to="web:job-7")
    step = report(state, output="All quiet; 3 items.")
    (run,) = records(step)
    assert (run["status"], run["output"], run["delivered_to"]) == (
        "completed",
        "All quiet; 3 items.",
        "web:job-7",
    )
    assert run["ended_at"] == iso(at(31))
    assert delivers(step) == [Deliver(slot(30), "web:job-7", "S: All quiet; 3 items.")]
    assert step.state is not None
    assert step.state.active == ()


def test_deliver_to_none_delivers_nothing() -> None:
    step = report(running(), output="done")
    assert delivers(step) == []
    assert records(step)[0]["delivered_to"] is None


def test_long_output_is_an_excerpt() -> None:
    step = report(running(), output="x" * 5000)
    assert records(step)[0]["output"] == "x" * 2000


@pytest.mark.parametrize(
    ("output", "suppressed"),
    [
        ("HEARTBEAT_OK", True),
        (" HEARTBEAT_OK\n", True),
        ("HEARTBEAT_OK extra", False),
        ("Status: OK", False),
        ("heartbeat_ok", False),
        ("", False),
    ],
)
def test_heartbeat_ok_is_suppressed_anything_else_alerts(output: str, suppressed: bool) -> None:
    state = running(meta={"heartbeat": True}, deliver_to="email:ops@example.com")
    step = report(state, output=output)
    (run,) = records(step)
    assert run["suppressed"] is suppressed
    assert run["status"] == ("suppressed" if suppressed else "completed")
    assert len(delivers(step)) == (0 if suppressed else 1)


def test_heartbeat_ok_on_a_plain_prompt_is_a_result() -> None:
    step = report(running(deliver_to="web:j"), output="HEARTBEAT_OK")
    assert records(step)[0]["status"] == "completed"
    assert len(delivers(step)) == 1


def test_failed_report_alerts() -> None:
    state = running(meta={"heartbeat": True}, deliver_to="web:j")
    step = report(state, "failed", error="model unavailable")
    (run,) = records(step)
    assert (run["status"], run["error"]) == ("failed", "model unavailable")
    (deliver,) = delivers(step)
    assert deliver.text == "S (failed): model unavailable"


def test_late_and_duplicate_reports_are_ignored() -> None:
    state = running()
    first = report(state, output="one")
    assert first.state is not None
    again = schedule_step(first.state, at(32), Report(slot(30), "completed", "two"))
    assert again == ScheduleStep(first.state, ())
    unknown = schedule_step(state, at(32), Report("sl-unknown", "failed", ""))
    assert unknown == ScheduleStep(state, ())


# -- timeouts and retries -----------------------------------------------------------


def test_timeout_ends_the_run_and_a_later_report_is_ignored() -> None:
    state = running(deliver_to="web:j")
    state, step = tick(state, at(35))
    (run,) = records(step)
    assert (run["status"], run["error"]) == ("timeout", "timeout: no report within 5m")
    assert len(delivers(step)) == 1
    assert state.active == ()
    assert report(state, output="late", now=at(36)) == ScheduleStep(state, ())


def test_retries_use_root_and_attempt_ids_then_stop() -> None:
    state = running(max_retries=2, retry_backoff="1m")
    step = report(state, "failed", error="boom")
    state = step.state  # type: ignore[assignment]
    assert [(r.root_run_id, r.attempt, r.due_ms) for r in state.retries] == [
        (slot(30), 1, ms(at(32)))
    ]
    assert state.due_ms() == ms(at(32))
    state, step = tick(state, at(32))
    (dispatch,) = dispatches(step)
    assert (dispatch.run_id, dispatch.triggered_by, dispatch.attempt, dispatch.root_run_id) == (
        retry_id(slot(30), 1),
        "retry",
        1,
        slot(30),
    )
    assert dispatch.slot_ms == ms(at(30))
    # the retry times out: attempt 2
    state, step = tick(state, at(37))
    assert brief(step) == [("timeout", iso(at(30)), "timeout: no report within 5m")]
    state, step = tick(state, at(38))
    assert dispatches(step)[0].run_id == retry_id(slot(30), 2)
    # attempt 2 fails: no attempts left
    step = schedule_step(state, at(39), Report(retry_id(slot(30), 2), "failed", "", "again"))
    assert step.state is not None
    assert step.state.retries == ()
    assert records(step)[0]["attempt"] == 2


def test_wake_runs_never_retry() -> None:
    state = define(make(max_retries=3))
    step = schedule_step(state, at(1), Wake("r1"))
    assert step.state is not None
    run = request_run_id("s", "r1")
    step = schedule_step(step.state, at(2), Report(run, "failed", "", "x"))
    assert step.state is not None
    assert step.state.retries == ()


# -- overlap ------------------------------------------------------------------------


def test_overlap_skip() -> None:
    state = running(timeout="1h")
    state, step = tick(state, at(60))
    assert brief(step) == [("skipped", iso(at(60)), f"overlap: run {slot(30)} still running")]
    assert dispatches(step) == []
    assert (state.last_slot_ms, state.next_slot_ms) == (ms(at(60)), ms(at(90)))


def test_overlap_buffer_one_keeps_the_newest_and_fires_it_when_the_run_ends() -> None:
    state = running(timeout="2h", overlap="buffer_one")
    state, step = tick(state, at(60))
    assert step.effects == ()
    assert state.buffered is not None
    assert state.buffered.slot_ms == ms(at(60))
    state, step = tick(state, at(90))
    assert brief(step) == [
        ("skipped", iso(at(60)), f"overlap: buffered slot replaced by the slot of {iso(at(90))}")
    ]
    step = report(state, output="done", now=at(95))
    assert [r["status"] for r in records(step)] == ["completed", "running"]
    (dispatch,) = dispatches(step)
    assert (dispatch.run_id, dispatch.slot_ms) == (slot(90), ms(at(90)))
    assert step.state is not None
    assert step.state.buffered is None


def test_overlap_allow_all_fires_alongside() -> None:
    state = running(timeout="2h", overlap="allow_all")
    state, step = tick(state, at(60))
    assert [d.run_id for d in dispatches(step)] == [slot(60)]
    assert [a.run_id for a in state.active] == [slot(30), slot(60)]


# -- catch-up -----------------------------------------------------------------------


def test_downtime_default_window_fires_the_newest_and_records_the_rest_missed() -> None:
    state = define(make(action=START))
    state, step = tick(state, at(105))  # 09:30, 10:00, 10:30 passed while down
    assert [(r["status"], r["slot"]) for r in records(step)] == [
        ("missed", iso(at(30))),
        ("missed", iso(at(60))),
        ("completed", iso(at(90))),
    ]
    assert (state.last_slot_ms, state.next_slot_ms) == (ms(at(90)), ms(at(120)))


def test_downtime_inside_an_explicit_window_coalesces() -> None:
    state = define(make(action=START, catchup_window="1h"))
    state, step = tick(state, at(105))  # window starts 09:45
    assert brief(step) == [
        ("missed", iso(at(30)), "missed: older than the catch-up window"),
        ("skipped", iso(at(60)), "coalesced"),
        ("completed", iso(at(90)), None),
    ]


def test_allow_all_fires_every_slot_inside_the_window() -> None:
    state = define(make(action=START, catchup_window="1h", overlap="allow_all"))
    state, step = tick(state, at(105))
    assert [(r["status"], r["slot"]) for r in records(step)] == [
        ("missed", iso(at(30))),
        ("completed", iso(at(60))),
        ("completed", iso(at(90))),
    ]


def test_a_year_down_is_bounded_and_accounts_for_every_slot() -> None:
    state = define(make(action=START, schedule="* * * * *"))
    started = time.perf_counter()
    state, step = tick(state, T0 + timedelta(days=365))
    assert time.perf_counter() - started < 2
    runs = records(step)
    assert len(runs) == 102
    assert [r["status"] for r in runs[:100]] == ["missed"] * 100
    summary = runs[100]
    assert summary["status"] == "missed"
    assert summary["slot"] == iso(at(101))
    assert summary["slot_last"] == iso(T0 + timedelta(days=365, minutes=-1))
    total = 365 * 1440
    assert 100 + summary["missed_count"] + 1 == total
    assert runs[101]["status"] == "completed"
    assert state.next_slot_ms == ms(T0 + timedelta(days=365, minutes=1))


def test_jitter_delays_the_fire_instant_deterministically() -> None:
    schedule = make(action=START, jitter="10m")
    delay = jitter_ms(slot(30), 600_000)
    assert 0 < delay <= 600_000
    state = define(schedule)
    assert state.due_ms() == ms(at(30)) + delay
    early = at(30) + timedelta(milliseconds=delay - 1)
    state, step = tick(state, early)
    assert step.effects == ()
    state, step = tick(state, early + timedelta(milliseconds=1))
    assert [r["slot"] for r in records(step)] == [iso(at(30))]


# -- pause, resume, update ----------------------------------------------------------


def test_pause_fires_nothing_and_resume_starts_after_now() -> None:
    state = define(make(action=START))
    step = schedule_step(state, at(10), Define(make(action=START, enabled=False)))
    paused = step.state
    assert paused is not None
    assert paused.next_slot_ms is None
    assert paused.version == 2
    assert paused.due_ms() is None
    paused, step = tick(paused, at(200))
    assert step.effects == ()
    step = schedule_step(paused, at(200), Define(make(action=START)))
    resumed = step.state
    assert step.effects == ()
    assert resumed is not None
    assert resumed.next_slot_ms == ms(at(210))
    resumed, step = tick(resumed, at(210))
    assert brief(step) == [("completed", iso(at(210)), None)]


def test_update_keeps_last_slot_and_active_runs() -> None:
    state = running(timeout="1h")
    step = schedule_step(state, at(40), Define(make(timeout="1h", schedule="hourly")))
    updated = step.state
    assert updated is not None
    assert updated.version == 2
    assert updated.last_slot_ms == ms(at(30))
    assert [a.run_id for a in updated.active] == [slot(30)]
    assert updated.next_slot_ms == ms(at(60))
    assert updated.schedule.cron.expr == "0 * * * *"


def test_update_first_decides_what_was_due() -> None:
    state = define(make(action=START))
    step = schedule_step(state, at(30), Define(make(action=START, name="Renamed")))
    assert brief(step) == [("completed", iso(at(30)), None)]


def test_pausing_skips_a_buffered_slot() -> None:
    state = running(timeout="2h", overlap="buffer_one")
    state, _ = tick(state, at(60))
    step = schedule_step(
        state, at(61), Define(make(timeout="2h", overlap="buffer_one", enabled=False))
    )
    assert brief(step) == [("skipped", iso(at(60)), "paused")]


# -- wake ---------------------------------------------------------------------------


def test_wake_fires_now_with_its_context() -> None:
    state = define(make())
    step = schedule_step(state, at(5), Wake("req-1", {"reason": "deploy", "n": 2}))
    run = request_run_id("s", "req-1")
    (dispatch,) = dispatches(step)
    assert (dispatch.run_id, dispatch.triggered_by, dispatch.slot_ms) == (run, "wake", None)
    assert dispatch.context == {"reason": "deploy", "n": 2}
    assert dispatch.action["prompt"] == 'Check the queue.\n\nContext: {"n":2,"reason":"deploy"}'
    (record,) = records(step)
    assert (record["status"], record["context"]) == ("running", {"reason": "deploy", "n": 2})
    assert step.state is not None
    assert step.state.requests == ("req-1",)
    # the same request again: nothing
    assert schedule_step(step.state, at(6), Wake("req-1")) == ScheduleStep(step.state, ())


def test_wake_start_job_uses_the_run_id_as_key() -> None:
    step = schedule_step(define(make(action={**START, "key": "r-{date}"})), at(5), Wake("q"))
    assert dispatches(step)[0].job_key == request_run_id("s", "q")


def test_wake_while_paused_is_skipped() -> None:
    state = define(make(enabled=False))
    step = schedule_step(state, at(5), Wake("q", {"a": 1}))
    assert brief(step) == [("skipped", None, "paused")]
    assert records(step)[0]["context"] == {"a": 1}


def test_wake_skip_if_running() -> None:
    state = running()
    step = schedule_step(state, at(31), Wake("q", None, True))
    assert brief(step) == [("skipped", None, f"skip_if_running: run {slot(30)} is running")]
    step = schedule_step(state, at(31), Wake("q2"))
    assert [d.triggered_by for d in dispatches(step)] == ["wake"]


def test_wake_remembers_the_last_64_requests() -> None:
    state = define(make(action=START))
    for i in range(70):
        state = schedule_step(state, at(1), Wake(f"r{i}")).state  # type: ignore[assignment]
    assert state.requests == tuple(f"r{i}" for i in range(6, 70))


# -- remove -------------------------------------------------------------------------


def test_remove_aborts_active_runs() -> None:
    state = running(timeout="2h", overlap="allow_all")
    state, _ = tick(state, at(60))
    step = schedule_step(state, at(61), Remove())
    assert step.state is None
    assert [(r["run_id"], r["status"]) for r in records(step)] == [
        (slot(30), "aborted"),
        (slot(60), "aborted"),
    ]


# -- determinism and persistence ----------------------------------------------------


def _history() -> list[tuple[datetime, Any]]:
    return [
        (at(30), ScheduleTick()),
        (at(31), Wake("w", {"k": [1, 2]})),
        (at(32), Report(slot(30), "failed", "", "bad")),
        (at(60), ScheduleTick()),
        (at(63), ScheduleTick()),
        (at(64), Report(request_run_id("s", "w"), "completed", "HEARTBEAT_OK")),
        (at(200), ScheduleTick()),
    ]


def test_same_state_now_and_input_give_byte_identical_effects() -> None:
    schedule = make(
        max_retries=1,
        retry_backoff="3m",
        overlap="buffer_one",
        catchup_window="1h",
        meta={"heartbeat": True},
        deliver_to="web:j",
        jitter="1m",
    )

    def run() -> list[str]:
        state: ScheduleState | None = define(schedule)
        out = []
        for now, item in _history():
            step = schedule_step(state, now, item)
            out.append(repr(step.effects))
            # what the worker stores and reads back decides the same
            assert step.state is not None
            stored = json.dumps(step.state.to_json(), sort_keys=True)
            state = ScheduleState.from_json(json.loads(stored))
            assert state == step.state
        return out

    assert run() == run()


def test_update_on_the_same_clock_keeps_a_slot_waiting_for_its_jitter() -> None:
    state = define(make(action=START, jitter="10m"))
    delay = jitter_ms(slot(30), 600_000)
    early = at(30) + timedelta(milliseconds=delay - 1)
    step = schedule_step(state, early, Define(make(action=START, jitter="10m", name="New")))
    assert step.effects == ()
    assert step.state is not None
    assert step.state.next_slot_ms == ms(at(30))
    # another expression: the clock starts again after now
    step = schedule_step(state, early, Define(make(action=START, schedule="hourly")))
    assert step.state is not None
    assert step.state.next_slot_ms == ms(at(60))


def test_a_tick_later_than_a_short_window_records_the_slot_missed() -> None:
    state = define(make(action=START, catchup_window="1m"))
    state, step = tick(state, at(30.5))
    assert brief(step) == [("completed", iso(at(30)), None)]
    state, step = tick(state, at(62))
    assert brief(step) == [("missed", iso(at(60)), "missed: older than the catch-up window")]
    assert (state.last_slot_ms, state.next_slot_ms) == (ms(at(60)), ms(at(90)))


# -- the global switch off (firing=False) --------------------------------------------


def test_switched_off_a_report_ends_its_run_but_keeps_the_buffered_slot() -> None:
    state = running(timeout="2h", overlap="buffer_one")
    state, _ = tick(state, at(60))
    step = schedule_step(state, at(70), Report(slot(30), "completed", "done"), firing=False)
    assert [r["status"] for r in records(step)] == ["completed"]
    assert dispatches(step) == []
    assert step.state is not None
    assert step.state.buffered is not None
    # firing again, the next tick releases it (the slot of 90 comes after)
    state, step = tick(step.state, at(80))
    assert [d.run_id for d in dispatches(step)] == [slot(60)]


def test_switched_off_a_define_decides_nothing_due_and_firing_again_catches_up() -> None:
    state = define(make(), at(0))  # next slot at 30
    step = schedule_step(state, at(45), Define(make(name="Renamed")), firing=False)
    assert step.effects == ()
    assert step.state is not None
    assert step.state.next_slot_ms == ms(at(30))
    # A new expression while off: its own slots since the undecided one come due.
    step = schedule_step(step.state, at(50), Define(make(schedule="every 15m")), firing=False)
    assert step.effects == ()
    assert step.state is not None
    assert step.state.next_slot_ms == ms(at(30))
    _, step = tick(step.state, at(50))
    assert [d.run_id for d in dispatches(step)] == [slot_id("s", at(45))]
    # the window is one period of the new clock (15m): the slot of 30 is older
    assert brief(step)[0] == ("missed", iso(at(30)), "missed: older than the catch-up window")


def test_the_longest_durations_step_without_leaving_the_calendar() -> None:
    # 366d (the most a duration may be, docs/schedules.md) for the jitter, the
    # window, the timeout and the backoff: a tick after a long downtime, a wake
    # and a failed run's retry are all still decided. (Far longer ones, now
    # refused, made a tick raise OverflowError.)
    longest = {"jitter": "366d", "catchup_window": "366d", "timeout": "366d"}
    state = define(make(**longest, retry_backoff="366d", max_retries=1, overlap="skip"))
    step = schedule_step(state, T0 + timedelta(days=800), ScheduleTick())
    assert step.state is not None
    assert any(isinstance(e, Dispatch) for e in step.effects)
    step = schedule_step(step.state, T0 + timedelta(days=801), Wake("r1"))
    assert step.state is not None
    run = request_run_id("s", "r1")
    assert [d.run_id for d in step.effects if isinstance(d, Dispatch)] == [run]
    first = next(a.run_id for a in step.state.active if a.triggered_by == "schedule")
    step = schedule_step(step.state, T0 + timedelta(days=802), Report(first, "failed", "", "x"))
    assert step.state is not None
    assert [r.attempt for r in step.state.retries] == [1]


def test_runs_active_at_once_are_bounded() -> None:
    from compiler.schedules._runstate import MAX_ACTIVE

    state = define(make(timeout="1h", overlap="allow_all"))
    for n in range(MAX_ACTIVE):
        step = schedule_step(state, at(1), Wake(f"req-{n}"))
        assert step.state is not None
        state = step.state
    assert len(state.active) == MAX_ACTIVE
    step = schedule_step(state, at(2), Wake("one-more"))
    assert dispatches(step) == []
    (record,) = records(step)
    assert record["status"] == "skipped"
    assert record["error"].startswith(f"too many runs active ({MAX_ACTIVE})")
    assert step.state is not None
    assert len(step.state.active) == MAX_ACTIVE


def test_switched_off_a_report_delivers_nothing() -> None:
    state = running(deliver_to="web:ops-1")
    step = schedule_step(state, at(40), Report(slot(30), "completed", "Status: OK"), firing=False)
    assert delivers(step) == []
    (record,) = records(step)
    assert (record["status"], record["delivered_to"]) == ("completed", None)
    step = schedule_step(state, at(40), Report(slot(30), "completed", "Status: OK"))
    assert [d.target for d in delivers(step)] == ["web:ops-1"]
