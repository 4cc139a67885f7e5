"""A schedule's state and the inputs and effects of its state machine
(docs/schedules.md, "Downtime and catch-up", "Overlap"): what a step reads and
returns. The step itself is ``_schedule.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from compiler.schedules._definition import Schedule, plain_data, validate_schedule
from compiler.schedules._ids import jitter_ms, slot_id

__all__ = [
    "HEARTBEAT_OK",
    "MAX_ACTIVE",
    "MAX_OUTPUT",
    "MAX_RECORDS",
    "MAX_REQUESTS",
    "ActiveRun",
    "AlertRecorded",
    "Define",
    "Deliver",
    "Dispatch",
    "Pending",
    "Remove",
    "Report",
    "Retire",
    "RetryDue",
    "RunRecorded",
    "ScheduleEffect",
    "ScheduleInput",
    "ScheduleState",
    "ScheduleStep",
    "ScheduleTick",
    "TriggeredBy",
    "Wake",
    "WakeControl",
    "at_ms",
    "fire_ms",
]


# -- the state machine (docs/schedules.md, "Downtime and catch-up", "Overlap") --

#: at most this many records of one kind (missed, coalesced) per step; past it,
#: one record stands for the rest (``missed_count``, ``slot`` to ``slot_last``)
MAX_RECORDS = 100
#: the wake request ids a state remembers for de-duplication
MAX_REQUESTS = 64
#: Prompt and command runs one schedule may have active at once (docs/schedules.md, "Overlap");
#: a run beyond is recorded ``skipped``.
MAX_ACTIVE = 32
#: the longest output excerpt a run record carries
MAX_OUTPUT = 2000
HEARTBEAT_OK = "HEARTBEAT_OK"

TriggeredBy = Literal["schedule", "manual", "wake", "retry"]
#: What an inbox ``schedule.wake`` asks (docs/schedules.md, "Run now", "Abort"):
#: ``wake`` fires the schedule (not while paused), ``run`` fires a ``manual``
#: run (paused or not), ``abort`` ends an active run ``aborted``.
WakeControl = Literal["wake", "run", "abort"]


def at_ms(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC instant."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def fire_ms(schedule: Schedule, slot_ms: int) -> int:
    """When a slot fires: the slot plus its deterministic jitter (epoch ms)."""
    if not schedule.jitter_ms:
        return slot_ms
    return slot_ms + jitter_ms(slot_id(schedule.id, at_ms(slot_ms)), schedule.jitter_ms)


@dataclass(frozen=True)
class ActiveRun:
    """A prompt or command run dispatched and not yet ended."""

    run_id: str
    slot_ms: int | None
    triggered_by: TriggeredBy
    attempt: int
    root_run_id: str
    started_ms: int
    deadline_ms: int
    context: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Pending:
    """``buffer_one``: the slot waiting for the active run to end."""

    run_id: str
    slot_ms: int


@dataclass(frozen=True)
class RetryDue:
    """Retry ``attempt`` (1, 2, ...) of the run ``root_run_id``, due at ``due_ms``."""

    root_run_id: str
    attempt: int
    due_ms: int
    slot_ms: int | None


@dataclass(frozen=True)
class ScheduleState:
    """What the worker keeps per schedule (JSON-able: :meth:`to_json`,
    :meth:`from_json`). ``next_slot_ms``: the nominal instant of the oldest slot
    not yet handled (None while paused); ``last_slot_ms``: the newest slot
    handled (fired, skipped or missed)."""

    schedule: Schedule
    version: int
    next_slot_ms: int | None
    last_slot_ms: int | None
    active: tuple[ActiveRun, ...] = ()
    buffered: Pending | None = None
    retries: tuple[RetryDue, ...] = ()
    requests: tuple[str, ...] = ()

    def due_ms(self) -> int | None:
        """When the next tick has something to do: the earliest of the next
        slot's fire instant (nominal + its jitter), the active runs' deadlines
        and the retries' dues, or a buffered slot's fire instant when no run is
        active (kept while switched off: the first tick releases it); None when
        nothing is due ever."""
        candidates = [run.deadline_ms for run in self.active]
        if self.buffered is not None and not self.active:
            candidates.append(fire_ms(self.schedule, self.buffered.slot_ms))
        candidates += [retry.due_ms for retry in self.retries]
        if self.next_slot_ms is not None:
            candidates.append(fire_ms(self.schedule, self.next_slot_ms))
        return min(candidates) if candidates else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule.to_json(),
            "version": self.version,
            "next": self.next_slot_ms,
            "last": self.last_slot_ms,
            "active": [
                [
                    r.run_id,
                    r.slot_ms,
                    r.triggered_by,
                    r.attempt,
                    r.root_run_id,
                    r.started_ms,
                    r.deadline_ms,
                    plain_data(r.context) if r.context is not None else None,
                ]
                for r in self.active
            ],
            "buffered": ([self.buffered.run_id, self.buffered.slot_ms] if self.buffered else None),
            "retries": [[r.root_run_id, r.attempt, r.due_ms, r.slot_ms] for r in self.retries],
            "requests": list(self.requests),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduleState:
        buffered = data.get("buffered")
        return cls(
            schedule=validate_schedule(data["schedule"]),
            version=int(data["version"]),
            next_slot_ms=data.get("next"),
            last_slot_ms=data.get("last"),
            active=tuple(
                ActiveRun(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
                for a in data.get("active", ())
            ),
            buffered=Pending(buffered[0], buffered[1]) if buffered else None,
            retries=tuple(RetryDue(r[0], r[1], r[2], r[3]) for r in data.get("retries", ())),
            requests=tuple(data.get("requests", ())),
        )


# inputs


@dataclass(frozen=True)
class Define:
    """A definition applied: create, update, pause (``enabled: false``), resume."""

    schedule: Schedule


@dataclass(frozen=True)
class Remove:
    """The schedule deleted (a tombstone)."""


@dataclass(frozen=True)
class ScheduleTick:
    """The clock reached ``now``: fire what is due."""


@dataclass(frozen=True)
class Wake:
    """Fire now (docs/schedules.md, "Wake")."""

    request_id: str
    context: Mapping[str, Any] | None = None
    skip_if_running: bool = False
    #: The prompt runs it comes from, ``<schedule id>/<run id>``, oldest first
    #: (docs/schedules.md, "Wake loops"); empty: a person's or a system's wake.
    origin: tuple[str, ...] = ()
    #: ``run`` (a run now) or ``abort`` (of the active run ``target``).
    control: WakeControl = "wake"
    target: str | None = None

    @property
    def key(self) -> str:
        """What the state remembers of it: its request id, ``run:`` or
        ``abort:`` before it for those controls (a wake's and a run now's
        request ids are apart)."""
        return self.request_id if self.control == "wake" else f"{self.control}:{self.request_id}"


@dataclass(frozen=True)
class Report:
    """How a prompt or command run ended (a ``schedule.report`` record).
    ``exit_code``: a command's; ``retry`` False: a failure that must not be
    tried again (a call whose outcome is unknown: it may have taken effect,
    docs/schedules.md, "Command jobs")."""

    run_id: str
    status: Literal["completed", "failed"]
    output: str = ""
    error: str | None = None
    exit_code: int | None = None
    retry: bool = True


ScheduleInput = Define | Remove | ScheduleTick | Wake | Report


# effects


@dataclass(frozen=True)
class Dispatch:
    """Carry out a run's action. ``action`` is the schedule's action object (a
    prompt's text has ``Context: <json>`` appended when the run carries a
    context); ``job_key``: the job a ``start_job`` starts (the slot id, the
    rendered key template, or the run id of a wake/retry run) or the job a
    ``send_event`` goes to; ``deadline_ms``: a prompt run's timeout instant."""

    run_id: str
    schedule_id: str
    slot_ms: int | None
    triggered_by: TriggeredBy
    attempt: int
    root_run_id: str
    action: Mapping[str, Any]
    context: Mapping[str, Any] | None = None
    job_key: str | None = None
    deadline_ms: int | None = None
    #: A wake run's origin (:attr:`Wake.origin`), which its prompt task carries.
    origin: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunRecorded:
    """A ``schedule.run`` record (every field of ``topics.ScheduleRunRecord``)."""

    run: Mapping[str, Any]


@dataclass(frozen=True)
class AlertRecorded:
    """A ``heartbeat.alert`` record (every field of ``topics.HeartbeatAlert``):
    a heartbeat's run that did not answer ``HEARTBEAT_OK`` (docs/schedules.md,
    "Heartbeats"), beside its run's last record."""

    alert: Mapping[str, Any]


@dataclass(frozen=True)
class Deliver:
    """Send ``text`` to ``target`` (``web:<job>`` or ``email:<address>``)."""

    run_id: str
    target: str
    text: str


@dataclass(frozen=True)
class Retire:
    """A one-shot ran (docs/schedules.md, "One-shot schedules"): remove its
    definition (a tombstone on ``schedules``, audited ``delete``). ``run_id``:
    the run it ended with; ``status``: how that run ended."""

    run_id: str
    status: str


ScheduleEffect = Dispatch | RunRecorded | AlertRecorded | Deliver | Retire


@dataclass(frozen=True)
class ScheduleStep:
    """The new state (None: removed) and the effects, in order."""

    state: ScheduleState | None
    effects: tuple[ScheduleEffect, ...]
