"""A heartbeat's alert records (docs/schedules.md, "Heartbeats"): a run that did
not answer ``HEARTBEAT_OK`` has one ``heartbeat.alert`` beside its run record,
with the schedule's severity (``critical`` when it failed or timed out),
delivered once with the run; a suppressed, aborted or plain prompt run has none."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import (
    AlertRecorded,
    Define,
    Deliver,
    Report,
    RunRecorded,
    ScheduleError,
    ScheduleState,
    ScheduleStep,
    ScheduleTick,
    Wake,
    schedule_step,
    slot_id,
    validate_schedule,
)
from tests.compiler.schedules.test_schedule_step import PROMPT, T0, at
from topics import HeartbeatAlert


def running(**fields: Any) -> ScheduleState:
    """A heartbeat (unless ``meta`` says otherwise) whose 09:30 slot is running."""
    data: dict[str, Any] = {
        "id": "s", "name": "Queue check", "schedule": "every 30m", "action": PROMPT,
        "meta": {"heartbeat": True}, "deliver_to": "web:ops-desk", **fields,
    }  # fmt: skip
    state = schedule_step(None, T0, Define(validate_schedule(data))).state
    assert state is not None
    state = schedule_step(state, at(30), ScheduleTick()).state
    assert state is not None
    assert len(state.active) == 1
    return state


def alerts(step: ScheduleStep) -> list[dict[str, Any]]:
    out = [dict(e.alert) for e in step.effects if isinstance(e, AlertRecorded)]
    for alert in out:
        assert HeartbeatAlert.model_validate(alert).dump() == alert  # exactly its fields
    return out


RUN = slot_id("s", at(30))


def test_a_reply_that_is_not_heartbeat_ok_is_an_alert_with_the_schedules_severity() -> None:
    step = schedule_step(running(), at(31), Report(RUN, "completed", "Two tickets wait."))
    (alert,) = alerts(step)
    assert alert == {
        "type": "heartbeat.alert", "schema": 1, "schedule_id": "s", "run_id": RUN,
        "severity": "warning", "status": "completed", "triggered_by": "schedule",
        "name": "Queue check", "output": "Two tickets wait.", "error": None,
        "delivered_to": "web:ops-desk", "at": "2026-01-05T09:31:00Z",
    }  # fmt: skip
    # After the run's record; delivered once, with the run (the message id is the run's).
    kinds = [type(e).__name__ for e in step.effects]
    assert kinds == ["Deliver", "RunRecorded", "AlertRecorded"]
    assert [e.run_id for e in step.effects if isinstance(e, Deliver)] == [RUN]
    info = running(meta={"heartbeat": True, "severity": "info"})
    (quiet,) = alerts(schedule_step(info, at(31), Report(RUN, "completed", "FYI")))
    assert quiet["severity"] == "info"


def test_a_failed_or_timed_out_heartbeat_is_critical_whatever_its_severity() -> None:
    state = running(meta={"heartbeat": True, "severity": "info"})
    (failed,) = alerts(schedule_step(state, at(31), Report(RUN, "failed", error="model down")))
    assert (failed["severity"], failed["status"], failed["error"]) == (
        "critical", "failed", "model down",
    )  # fmt: skip
    (late,) = alerts(schedule_step(state, at(35), ScheduleTick()))
    assert (late["severity"], late["status"]) == ("critical", "timeout")


def test_suppressed_aborted_and_plain_prompt_runs_have_no_alert() -> None:
    state = running()
    assert alerts(schedule_step(state, at(31), Report(RUN, "completed", " HEARTBEAT_OK\n"))) == []
    abort = Wake("r1", control="abort", target=RUN)
    assert alerts(schedule_step(state, at(31), abort)) == []
    plain = running(meta={})
    assert alerts(schedule_step(plain, at(31), Report(RUN, "completed", "Two tickets."))) == []


def test_switched_off_the_alert_is_recorded_and_delivered_nowhere() -> None:
    step = schedule_step(running(), at(31), Report(RUN, "failed", error="x"), firing=False)
    (alert,) = alerts(step)
    assert alert["delivered_to"] is None
    assert not any(isinstance(e, Deliver) for e in step.effects)


@pytest.mark.parametrize("severity", ["urgent", 3, True])
def test_a_severity_that_is_none_of_the_three_is_refused(severity: object) -> None:
    data = {"name": "H", "schedule": "hourly", "action": PROMPT,
            "meta": {"heartbeat": True, "severity": severity}}  # fmt: skip
    with pytest.raises(ScheduleError, match=r"^meta\.severity: .*info, warning, critical"):
        validate_schedule(data)


OUTCOMES = st.one_of(
    st.tuples(st.just("completed"), st.sampled_from(["HEARTBEAT_OK", " HEARTBEAT_OK\n", "no"])),
    st.tuples(st.just("failed"), st.just("")),
    st.tuples(st.just("silent"), st.just("")),  # never reports: times out
)


def ending(kind: str, output: str, slot: int) -> tuple[datetime, Report | ScheduleTick]:
    """What ends the run of the slot ``slot`` minutes after T0: its report, or the
    tick at its deadline (10 minutes)."""
    run = slot_id("s", at(slot))
    if kind == "completed":
        return at(slot + 1), Report(run, "completed", output)
    if kind == "failed":
        return at(slot + 1), Report(run, "failed", error="down")
    return at(slot + 10), ScheduleTick()


@settings(max_examples=60, deadline=None)
@given(st.lists(OUTCOMES, min_size=1, max_size=8), st.sampled_from(["info", "warning", None]))
def test_every_run_that_is_not_suppressed_has_one_alert_beside_its_end(
    outcomes: list[tuple[str, str]], severity: str | None
) -> None:
    meta: dict[str, Any] = {"heartbeat": True}
    if severity is not None:
        meta["severity"] = severity
    data = {"id": "s", "name": "H", "schedule": "every 30m", "action": PROMPT, "meta": meta,
            "deliver_to": "web:ops", "timeout": "10m"}  # fmt: skip
    state = schedule_step(None, T0, Define(validate_schedule(data))).state
    ends: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []
    for n, (kind, output) in enumerate(outcomes):
        slot = 30 * (n + 1)
        for now, item in [(at(slot), ScheduleTick()), ending(kind, output, slot)]:
            assert state is not None
            step = schedule_step(state, now, item)
            state = step.state
            ends += [dict(e.run) for e in step.effects
                     if isinstance(e, RunRecorded) and e.run["status"] != "running"]  # fmt: skip
            seen += alerts(step)
    alerting = [r for r in ends if r["status"] != "suppressed"]
    assert [a["run_id"] for a in seen] == [r["run_id"] for r in alerting]
    for alert, run in zip(seen, alerting, strict=True):
        assert alert["status"] == run["status"]
        expected = (severity or "warning") if run["status"] == "completed" else "critical"
        assert alert["severity"] == expected
        assert alert["delivered_to"] == run["delivered_to"] == "web:ops"
