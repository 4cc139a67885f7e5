"""The schedules' records (docs/schedules.md): a definition, a run as it
stands, a prompt run's report, an operator's action, and the headers of an inbox
record a schedule's run dispatched.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from topics._messages import TopicRecord

__all__ = [
    "HEARTBEAT_ALERT",
    "SCHEDULE_HEADER",
    "SCHEDULE_RUN_HEADER",
    "AuditRecord",
    "HeartbeatAlert",
    "ScheduleRecord",
    "ScheduleReport",
    "ScheduleRunRecord",
    "ScheduleRunsRecord",
]


#: The headers of an inbox record a schedule's run dispatched (a ``job.start``
#: or an ``event``): the schedule id and the run id.
SCHEDULE_HEADER = "lemongraph.schedule"
SCHEDULE_RUN_HEADER = "lemongraph.run"

RunStatus = Literal[
    "pending",
    "running",
    "completed",
    "failed",
    "timeout",
    "aborted",
    "suppressed",
    "missed",
    "skipped",
]


class ScheduleRecord(TopicRecord):
    """A schedule's definition on the compacted ``schedules`` topic (key: the
    schedule id; a tombstone deletes it). ``spec`` is the definition as
    validated (``compiler.validate_schedule``), its ``id`` the record key."""

    type: Literal["schedule"] = "schedule"
    spec: dict[str, Any]
    updated_at: str
    by: str


class ScheduleRunRecord(TopicRecord):
    """One run of a schedule, as it stands (``schedule-runs``, key: the schedule
    id), written by the worker only: a run that starts and then ends has two
    records with the same ``run_id``. ``missed`` records with ``missed_count``
    stand for a span of slots, ``slot`` to ``slot_last``."""

    type: Literal["schedule.run"] = "schedule.run"
    schedule_id: str
    run_id: str
    status: RunStatus
    triggered_by: Literal["schedule", "manual", "wake", "retry"]
    slot: str | None = None
    slot_last: str | None = None
    missed_count: int | None = None
    attempt: int = 0
    root_run_id: str
    started_at: str | None = None
    ended_at: str | None = None
    at: str
    output: str | None = Field(None, max_length=2000)
    error: str | None = None
    suppressed: bool = False
    context: dict[str, Any] | None = None
    job_key: str | None = None
    delivered_to: str | None = None
    #: A command run's exit code, when its tool ran a program (docs/schedules.md,
    #: "Command jobs").
    exit_code: int | None = None


#: How a command run's tool call went (the executor's outcome, docs/agents.md).
ToolOutcome = Literal["done", "failed", "refused", "outcome_unknown"]


class ScheduleReport(TopicRecord):
    """How a prompt or command run ended (``schedule-runs``, key: the schedule
    id), written by the agents service; the worker reads it and records the
    run's end. A command run's report says its tool call's ``outcome`` and,
    when the tool ran a program, its ``exit_code`` (``output``: the output's
    tail); a run whose ``outcome`` is ``outcome_unknown`` is not retried."""

    type: Literal["schedule.report"] = "schedule.report"
    schedule_id: str
    run_id: str
    status: Literal["completed", "failed"]
    output: str = ""
    error: str | None = None
    at: str
    outcome: ToolOutcome | None = None
    exit_code: int | None = None


#: The ``type`` of a heartbeat's alert on ``schedule-runs``.
HEARTBEAT_ALERT = "heartbeat.alert"
#: How much an alert asks of a person: a heartbeat's ``meta.severity`` (default
#: ``warning``), ``critical`` for a run that failed or timed out.
Severity = Literal["info", "warning", "critical"]


class HeartbeatAlert(TopicRecord):
    """A heartbeat's run that did not answer ``HEARTBEAT_OK`` (docs/schedules.md,
    "Heartbeats"): written by the worker beside the run's last ``schedule.run``
    record (``schedule-runs``, key: the schedule id), once per run. Its
    delivery is the run's (``delivered_to``; a ``message`` with id
    ``sched-<run id>``); ``suppressed`` runs have none."""

    type: Literal["heartbeat.alert"] = "heartbeat.alert"
    schedule_id: str
    run_id: str
    severity: Severity
    status: Literal["completed", "failed", "timeout"]
    triggered_by: Literal["schedule", "manual", "wake", "retry"]
    name: str
    output: str | None = Field(None, max_length=2000)
    error: str | None = None
    delivered_to: str | None = None
    at: str


ScheduleRunsRecord = Annotated[
    ScheduleRunRecord | ScheduleReport | HeartbeatAlert, Field(discriminator="type")
]


class AuditRecord(TopicRecord):
    """An operator's action on a schedule (``audit``, key: the schedule id),
    written by whoever performed it: the gateway, the CLI, or the worker
    registering ``schedules.yaml`` (``by: "schedules.yaml"``)."""

    type: Literal["audit"] = "audit"
    action: Literal["create", "update", "pause", "resume", "delete", "wake", "run", "abort"]
    target: str  # "schedule:<id>"
    by: str
    at: str
    detail: dict[str, Any] = Field(default_factory=dict)
