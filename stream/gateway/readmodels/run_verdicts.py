"""Whether the core took what a schedule run sent (docs/schedules.md, "Run
statuses"): the join of a run with the decision of its input, shared by the
gateway's read model (stream/gateway/readmodels/schedules.py) and ``lemongraph schedule
runs`` (stream/cli/schedule.py).

The worker records a ``start_job`` or ``send_event`` run ``completed`` as soon
as it has produced the run's ``job.start`` or ``event`` to the inbox: the run is
decided on the schedule's home partition, the input on the job's, often another
partition or worker, so the schedule's decision cannot wait for the job's. What
became of the input is on ``decisions``; a reader joins the two, here. The
join key is what the worker derives from its own data (stream/engine/schedules.py,
``_dispatch``):

* a ``job.start`` is produced under the run's ``job_key`` and stamped with the
  instant the run started, and the core decides a record at its timestamp: its
  decision's ``now`` is the run's ``started_at``;
* an ``event`` is produced with the run id as its idempotency key, from the
  ``world`` source.

A run whose input was refused reads ``refused``, its ``error`` the core's reason.
The first decision of a mark counts: a crash re-decides a slot and sends the
same ``job.start`` again, refused because the job exists, while the run did
start it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

__all__ = ["REFUSED", "decision_mark", "judge", "run_marks"]

#: A run's status when the core refused its input: read from ``decisions``,
#: never written on ``schedule-runs``.
REFUSED = "refused"


def _ms(text: object) -> int | None:
    """An ISO instant as epoch milliseconds (formats differ in their fraction)."""
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _start_mark(job_key: str, ms: int) -> str:
    return f"start\n{job_key}\n{ms}"


def _event_mark(job_key: str, idempotency_key: str) -> str:
    return f"event\n{job_key}\n{idempotency_key}"


def decision_mark(record: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """What a decision says of an input a run may have sent: (its mark, the
    core's reason when refused, else None); None for a decision no run's
    input can have (a tick, an event of another source or without a key)."""
    given = record.get("input")
    if not isinstance(given, Mapping) or not record.get("job_key"):
        return None
    key = str(record["job_key"])
    if given.get("type") == "job.start":
        ms = _ms(record.get("now"))
        if ms is None:
            return None
        mark = _start_mark(key, ms)
    elif (
        given.get("type") == "event"
        and given.get("source") == "world"
        and given.get("idempotency_key")
    ):
        mark = _event_mark(key, str(given["idempotency_key"]))
    else:
        return None
    if record.get("outcome") == "refused":
        return mark, str(record.get("refused") or "refused")
    return mark, None


def run_marks(run: Mapping[str, Any]) -> tuple[str, ...]:
    """The marks the input of a ``completed`` run with a job may have: its
    ``job.start``'s and its ``event``'s (the action is not on the run record;
    only one of them can be decided)."""
    key = run.get("job_key")
    if run.get("status") != "completed" or not key:
        return ()
    marks = [_event_mark(str(key), str(run.get("run_id")))]
    ms = _ms(run.get("started_at"))
    if ms is not None:
        marks.append(_start_mark(str(key), ms))
    return tuple(marks)


def judge(run: Mapping[str, Any], verdicts: Mapping[str, str | None]) -> dict[str, Any]:
    """The run as its input's decision says: ``refused`` with the core's reason
    when ``verdicts`` (mark → reason, None: taken) refused it, else as it was."""
    for mark in run_marks(run):
        if mark in verdicts:
            reason = verdicts[mark]
            if reason is not None:
                return {**run, "status": REFUSED, "error": reason}
            break
    return dict(run)
