"""A schedule's health (docs/schedules.md, "Health"): what its records on
``schedule-runs`` add up to, folded one run at a time in a few counters, so a
reader keeps a bounded amount per schedule however many runs it has had.

Pure: :func:`health_of_run` takes the health so far, the run as it stood
before a record (None: not seen) and the run as it stands after, and returns
the new health; :func:`health_refused` and :func:`health_alert` fold the two
other things readers learn of a run (the core refused its input; a heartbeat's
alert). The gateway's read model (stream/gateway/readmodels/schedules.py) and
``lemongraph schedule show`` (stream/cli/schedule.py) fold the same records the
same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "HEALTH_FAILED",
    "HEALTH_OK",
    "ScheduleHealth",
    "health_alert",
    "health_of_run",
    "health_refused",
]

#: Run statuses that end a run.
ENDED = ("completed", "failed", "timeout", "aborted", "suppressed", "missed", "skipped", "refused")
#: Ends that count as a failure (``refused``: the core refused what the run sent).
HEALTH_FAILED = ("failed", "timeout", "refused")
#: Ends that break a run of failures.
HEALTH_OK = ("completed", "suppressed")
#: Statuses of a slot or request that never ran (not a "last run").
_NOT_RUN = ("missed", "skipped")
#: Alert run ids remembered, so that an alert written twice (a decision taken
#: again after a crash) counts once.
_ALERTS_SEEN = 8


@dataclass(frozen=True)
class ScheduleHealth:
    """The counters of docs/schedules.md, "Health". ``last_run``: the newest
    run that ran (``run_id``, ``status``, ``triggered_by``, ``at``: when it took
    that status); ``last_alert``: the newest heartbeat alert (``run_id``,
    ``severity``, ``at``). ``streak_run`` and ``streak_before`` say which run
    last moved ``failed_in_a_row`` and what it was before, so that a verdict
    that comes after (the core refused that run's input) can correct it."""

    last_run: Mapping[str, Any] | None = None
    retries: int = 0
    suppressed: int = 0
    missed: int = 0
    skipped: int = 0
    failed: int = 0
    failed_in_a_row: int = 0
    stale_recoveries: int = 0
    alerts: int = 0
    last_alert: Mapping[str, Any] | None = None
    streak_run: str | None = None
    streak_before: int = 0
    alerts_seen: tuple[str, ...] = ()

    def to_json(self, next_run: str | None) -> dict[str, Any]:
        """The ``health`` object of the API and ``lemongraph schedule show``
        (``next_run``: the schedule's next slot, which the definition says)."""
        return {
            "last_run": dict(self.last_run) if self.last_run is not None else None,
            "next_run": next_run,
            "retries": self.retries,
            "suppressed": self.suppressed,
            "missed": self.missed,
            "skipped": self.skipped,
            "failed": self.failed,
            "failed_in_a_row": self.failed_in_a_row,
            "stale_recoveries": self.stale_recoveries,
            "alerts": self.alerts,
            "last_alert": dict(self.last_alert) if self.last_alert is not None else None,
        }


def _last(run: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "run_id": str(run.get("run_id")),
        "status": str(run.get("status")),
        "triggered_by": str(run.get("triggered_by")),
        "at": run.get("at"),
    }


def health_of_run(
    health: ScheduleHealth | None, earlier: Mapping[str, Any] | None, run: Mapping[str, Any]
) -> ScheduleHealth:
    """The health after a record of ``run``: ``earlier`` is the run as its
    records said before this one (None: its first record), ``run`` as they say
    now (docs/schedules.md, "Health"). A run's end counts once: a record that
    repeats an end (written again after a crash) changes nothing."""
    h = health or ScheduleHealth()
    rid = str(run.get("run_id"))
    status = str(run.get("status"))
    before = earlier.get("status") if earlier is not None else None
    changes: dict[str, Any] = {}
    same = h.last_run is not None and h.last_run.get("run_id") == rid
    if same or (earlier is None and status not in _NOT_RUN):  # the newest run that ran
        changes["last_run"] = _last(run)
    if earlier is None and run.get("triggered_by") == "retry" and status not in _NOT_RUN:
        changes["retries"] = h.retries + 1
    if status in ENDED and before not in ENDED:
        if status == "missed":
            count = run.get("missed_count")
            changes["missed"] = h.missed + (count if isinstance(count, int) and count > 0 else 1)
        elif status == "skipped":
            changes["skipped"] = h.skipped + 1
        elif status == "suppressed":
            changes["suppressed"] = h.suppressed + 1
        if status == "timeout":  # the worker's sweep ended a run that never reported
            changes["stale_recoveries"] = h.stale_recoveries + 1
        if status in HEALTH_FAILED:
            changes.update(
                failed=h.failed + 1,
                failed_in_a_row=h.failed_in_a_row + 1,
                streak_run=rid,
                streak_before=h.failed_in_a_row,
            )
        elif status in HEALTH_OK:
            changes.update(failed_in_a_row=0, streak_run=rid, streak_before=h.failed_in_a_row)
    return replace(h, **changes) if changes else h


def health_refused(health: ScheduleHealth | None, run_id: str) -> ScheduleHealth:
    """The core refused what the ``completed`` run ``run_id`` sent (docs/schedules.md,
    "Run statuses"): a failure; the run of failures is corrected when that run was
    the last to move it (a verdict for an older run leaves it: later runs decided it)."""
    h = health or ScheduleHealth()
    changes: dict[str, Any] = {"failed": h.failed + 1}
    if h.streak_run == run_id:
        changes["failed_in_a_row"] = h.streak_before + 1
    if h.last_run is not None and h.last_run.get("run_id") == run_id:
        changes["last_run"] = {**h.last_run, "status": "refused"}
    return replace(h, **changes)


def health_alert(health: ScheduleHealth | None, alert: Mapping[str, Any]) -> ScheduleHealth:
    """A ``heartbeat.alert`` record (docs/schedules.md, "Heartbeats"), once per run."""
    h = health or ScheduleHealth()
    rid = str(alert.get("run_id"))
    if rid in h.alerts_seen:
        return h
    last = {"run_id": rid, "severity": alert.get("severity"), "at": alert.get("at")}
    return replace(
        h,
        alerts=h.alerts + 1,
        last_alert=last,
        alerts_seen=(*h.alerts_seen, rid)[-_ALERTS_SEEN:],
    )
