"""A schedule's health folded from its run records (docs/schedules.md, "Health"):
each counter, a failure streak that a later success breaks and a late refusal
corrects, and, for any history, the same health whether a record comes once or
twice (a decision written again after a crash)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import (
    HEALTH_FAILED,
    HEALTH_OK,
    ScheduleHealth,
    health_alert,
    health_of_run,
    health_refused,
)


def fold(records: list[dict[str, Any]]) -> ScheduleHealth:
    """Records folded as the gateway and the CLI fold them."""
    runs: dict[str, dict[str, Any]] = {}
    health = ScheduleHealth()
    for record in records:
        rid = record["run_id"]
        earlier = runs.get(rid)
        runs[rid] = {**(earlier or {}), **record}
        health = health_of_run(health, earlier, runs[rid])
    return health


def rec(rid: str, status: str, **more: Any) -> dict[str, Any]:
    return {"run_id": rid, "status": status, "triggered_by": "schedule", "at": rid, **more}


def test_each_counter_counts_its_runs() -> None:
    health = fold(
        [
            rec("sl-1", "missed", missed_count=3),
            rec("sl-2", "missed"),
            rec("sl-3", "running"),
            rec("sl-3", "timeout"),
            rec("rt-1", "running", triggered_by="retry", attempt=1),
            rec("rt-1", "failed", triggered_by="retry", attempt=1),
            rec("sl-4", "skipped"),
            rec("sl-5", "running"),
            rec("sl-5", "suppressed"),
        ]
    )
    assert health.missed == 4
    assert health.stale_recoveries == 1
    assert health.retries == 1
    assert health.failed == 2
    assert health.failed_in_a_row == 0  # sl-5's suppressed broke it
    assert health.skipped == 1
    assert health.suppressed == 1
    assert health.last_run == {
        "run_id": "sl-5",
        "status": "suppressed",
        "triggered_by": "schedule",
        "at": "sl-5",
    }
    shown = health.to_json("2026-12-01T10:00:00Z")
    assert shown["next_run"] == "2026-12-01T10:00:00Z"
    assert set(shown) == {
        "last_run", "next_run", "retries", "suppressed", "missed", "skipped", "failed",
        "failed_in_a_row", "stale_recoveries", "alerts", "last_alert",
    }  # fmt: skip


def test_a_slot_that_never_ran_is_not_the_last_run() -> None:
    health = fold([rec("sl-1", "completed"), rec("sl-2", "skipped"), rec("sl-3", "missed")])
    assert health.last_run is not None
    assert health.last_run["run_id"] == "sl-1"
    # A run still going is the last run, and its end updates it.
    health = fold([rec("sl-1", "completed"), rec("wk-1", "running"), rec("sl-2", "skipped")])
    assert health.last_run is not None
    assert (health.last_run["run_id"], health.last_run["status"]) == ("wk-1", "running")


def test_failures_in_a_row_run_until_a_success() -> None:
    history = [rec("a", "failed"), rec("b", "timeout"), rec("c", "aborted"), rec("d", "failed")]
    assert fold(history).failed_in_a_row == 3  # aborted neither counts nor breaks it
    assert fold([*history, rec("e", "completed")]).failed_in_a_row == 0
    assert fold([*history, rec("e", "completed"), rec("f", "failed")]).failed_in_a_row == 1


def test_a_refusal_read_after_the_run_is_a_failure_and_corrects_the_streak() -> None:
    health = fold([rec("a", "failed"), rec("b", "completed", job_key="j")])
    assert (health.failed, health.failed_in_a_row) == (1, 0)
    refused = health_refused(health, "b")
    assert (refused.failed, refused.failed_in_a_row) == (2, 2)
    assert refused.last_run is not None
    assert refused.last_run["status"] == "refused"
    # A verdict for an older run leaves the streak that later runs decided.
    later = health_of_run(refused, None, rec("c", "completed"))
    assert health_refused(later, "b").failed_in_a_row == 0


def test_an_alert_counts_once_per_run() -> None:
    alert = {"run_id": "sl-1", "severity": "critical", "at": "t1"}
    health = health_alert(health_alert(None, alert), alert)
    assert health.alerts == 1
    assert health.last_alert == {"run_id": "sl-1", "severity": "critical", "at": "t1"}
    health = health_alert(health, {"run_id": "sl-2", "severity": "warning", "at": "t2"})
    assert health.alerts == 2
    assert health.last_alert is not None
    assert health.last_alert["severity"] == "warning"


ENDS = ["completed", "failed", "timeout", "aborted", "suppressed", "missed", "skipped"]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Runs in the order a worker writes them: some start (``running``) and end
    later, interleaved; some are one record; each may be written twice."""
    out: list[dict[str, Any]] = []
    going: list[str] = []
    for n in range(draw(st.integers(0, 30))):
        if going and draw(st.booleans()):
            rid = going.pop(draw(st.integers(0, len(going) - 1)))
            status = draw(st.sampled_from(["completed", "failed", "timeout", "suppressed"]))
            out.append(rec(rid, status))
        elif draw(st.booleans()):
            rid = f"r{n}"
            out.append(
                rec(rid, "running", triggered_by=draw(st.sampled_from(["schedule", "retry"])))
            )
            going.append(rid)
        else:
            out.append(
                rec(f"r{n}", draw(st.sampled_from(ENDS)), missed_count=draw(st.integers(1, 5)))
            )
        if draw(st.integers(0, 4)) == 0:
            out.append(dict(out[-1]))  # written again
    return out


def expected(records: list[dict[str, Any]]) -> dict[str, int]:
    """The counters recomputed from the runs' final statuses in the order they ended."""
    ended: dict[str, Mapping[str, Any]] = {}
    for record in records:
        if record["status"] != "running" and record["run_id"] not in ended:
            ended[record["run_id"]] = record
    streak = 0
    for record in ended.values():
        if record["status"] in HEALTH_FAILED:
            streak += 1
        elif record["status"] in HEALTH_OK:
            streak = 0
    statuses = [r["status"] for r in ended.values()]
    return {
        "failed": sum(s in HEALTH_FAILED for s in statuses),
        "failed_in_a_row": streak,
        "suppressed": statuses.count("suppressed"),
        "skipped": statuses.count("skipped"),
        "stale_recoveries": statuses.count("timeout"),
        "missed": sum(r["missed_count"] for r in ended.values() if r["status"] == "missed"),
        "retries": len({r["run_id"] for r in records if r["triggered_by"] == "retry"}),
    }


@settings(max_examples=150, deadline=None)
@given(histories())
def test_any_history_counts_each_run_once_whatever_is_written_twice(
    records: list[dict[str, Any]],
) -> None:
    health = fold(records)
    got = {name: getattr(health, name) for name in expected(records)}
    assert got == expected(records)
    once = [r for i, r in enumerate(records) if i == 0 or r != records[i - 1]]
    assert fold(once) == health
