"""Command schedules in the engine, without a broker (docs/schedules.md,
"Command jobs"): a slot is a ``schedule.command`` task on ``tasks``, and the
agents service's report ends the run with its exit code; a run whose outcome
is unknown is not retried. The lane is test_schedules_engine.py's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.stream.engine.engine_harness import on
from tests.stream.engine.test_schedules_engine import T0, Lane, home, runs, slot
from topics import SCHEDULE_HEADER, SCHEDULE_RUN_HEADER, ScheduleCommandTask


def command_every_5m(schedule_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": schedule_id,
        "name": "Nightly",
        "schedule": "every 5m",
        "command": {"tool": "run_tests", "args": {"suite": "smoke"}},
        **extra,
    }


def test_a_command_slot_is_a_task_and_its_report_ends_the_run_with_its_exit_code() -> None:
    lane = Lane()
    p = home("nightly")
    lane.run(lane.define(command_every_5m("nightly", timeout="2m", deliver_to="web:ops")))
    fired = T0 + timedelta(minutes=5)
    batch = lane.run(lane.tick(fired, p))
    sid = slot("nightly", fired)
    [out] = on(batch, "tasks")
    task = ScheduleCommandTask.model_validate_json(out.value)
    assert (out.key, out.partition) == (b"nightly", p)
    assert dict(out.headers or []) == {
        SCHEDULE_HEADER: b"nightly",
        SCHEDULE_RUN_HEADER: sid.encode(),
    }
    assert (task.run_id, task.tool, task.args, task.attempt) == (
        sid,
        "run_tests",
        {"suite": "smoke"},
        0,
    )
    assert (task.slot, task.deadline) == ("2026-03-02T09:05:00Z", "2026-03-02T09:07:00Z")
    assert [r.status for r in runs(batch)] == ["running"]
    done = lane.run(
        lane.report(
            "nightly", sid, fired + timedelta(seconds=9),
            status="failed", output="FAILED test_login\n", error="failed: exit code 1",
            outcome="failed", exit_code=1,
        )
    )  # fmt: skip
    [run] = runs(done)
    assert (run.status, run.output, run.error, run.exit_code) == (
        "failed", "FAILED test_login\n", "failed: exit code 1", 1
    )  # fmt: skip
    [message] = on(done, "messages")  # delivered as a prompt run's result is
    assert b"Nightly (failed): failed: exit code 1" in (message.value or b"")


def test_a_run_whose_outcome_is_unknown_is_not_retried_and_a_failed_one_is() -> None:
    lane = Lane()
    lane.run(
        lane.define(command_every_5m("a", max_retries=2, retry_backoff="1m")),
        lane.define(command_every_5m("b", max_retries=2, retry_backoff="1m")),
    )
    fired = T0 + timedelta(minutes=5)
    lane.run(lane.tick(fired, home("a")), lane.tick(fired, home("b")))
    ended = fired + timedelta(seconds=5)
    lane.run(
        lane.report(
            "a", slot("a", fired), ended, status="failed", outcome="outcome_unknown",
            error="outcome unknown: ...; not retried",
        ),
        lane.report("b", slot("b", fired), ended, status="failed", outcome="failed", exit_code=3),
    )  # fmt: skip
    later = fired + timedelta(minutes=1, seconds=5)
    batch = lane.run(lane.tick(later, home("a")), lane.tick(later, home("b")))
    retried = [ScheduleCommandTask.model_validate_json(o.value) for o in on(batch, "tasks")]
    assert [(t.schedule_id, t.triggered_by, t.attempt) for t in retried] == [("b", "retry", 1)]
