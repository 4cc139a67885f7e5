"""What a decision returns: effects (as values, for the shell to carry out),
transitions, and the step that holds them (docs/decisions.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from topics import JobStatus, MilestoneStatus, TaskOutcome
from topics.build import (
    decision_body,
    fact_remembered,
    job_finished,
    task_closed,
    task_opened,
    timer_cancelled,
    timer_set,
    transition,
    verdict,
)

from compiler._time import to_iso
from compiler.jobs._inputs import Input
from compiler.jobs._state import JobState, Timer

__all__ = [
    "Effect",
    "FactRemembered",
    "JobFinished",
    "Step",
    "TaskClosed",
    "TaskOpened",
    "TimerCancelled",
    "TimerSet",
    "Transition",
    "task_id",
]


def task_id(job_key: str, milestone: str) -> str:
    """A milestone opens at most once per job, so job and milestone name its task
    for good: the same id however often the input is re-delivered."""
    return f"{job_key}/{milestone}"


@dataclass(frozen=True, slots=True)
class TaskOpened:
    """Work a channel service may pick up: the milestone and the whole frontier."""

    job_key: str
    milestone: str
    at: datetime
    instructions: str
    playbook_instructions: str
    integrations: tuple[str, ...]
    deadline: datetime
    frontier: tuple[str, ...]

    def __init__(
        self,
        job_key: str,
        milestone: str,
        at: datetime,
        instructions: str,
        playbook_instructions: str,
        integrations: tuple[str, ...],
        deadline: datetime,
        frontier: tuple[str, ...],
    ) -> None:
        # Written out (see compiler/__init__.py, "Compiled"), as in the classes below.
        object.__setattr__(self, "job_key", job_key)
        object.__setattr__(self, "milestone", milestone)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "instructions", instructions)
        object.__setattr__(self, "playbook_instructions", playbook_instructions)
        object.__setattr__(self, "integrations", integrations)
        object.__setattr__(self, "deadline", deadline)
        object.__setattr__(self, "frontier", frontier)

    @property
    def task_id(self) -> str:
        """Stable across re-delivery."""
        return task_id(self.job_key, self.milestone)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``: as a decision's effect, which task, when and
        its deadline (the task record adds what it asks for and the frontier:
        ``topics.build.task_opened_record``, docs/kafka.md)."""
        return task_opened(
            self.task_id, self.job_key, self.milestone, to_iso(self.at), to_iso(self.deadline)
        )


@dataclass(frozen=True, slots=True)
class TaskClosed:
    """A task is over: done, knocked, timed_out or dropped."""

    job_key: str
    milestone: str
    at: datetime
    outcome: TaskOutcome

    def __init__(self, job_key: str, milestone: str, at: datetime, outcome: TaskOutcome) -> None:
        object.__setattr__(self, "job_key", job_key)
        object.__setattr__(self, "milestone", milestone)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "outcome", outcome)

    @property
    def task_id(self) -> str:
        """Stable across re-delivery."""
        return task_id(self.job_key, self.milestone)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        return task_closed(
            self.task_id, self.job_key, self.milestone, to_iso(self.at), self.outcome
        )


@dataclass(frozen=True, slots=True)
class TimerSet:
    """Remember to wake the job at ``timer.at``."""

    timer: Timer

    def __init__(self, timer: Timer) -> None:
        object.__setattr__(self, "timer", timer)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        t = self.timer
        return timer_set(to_iso(t.at), t.kind, t.milestone)


@dataclass(frozen=True, slots=True)
class TimerCancelled:
    """Forget a timer that was set."""

    timer: Timer

    def __init__(self, timer: Timer) -> None:
        object.__setattr__(self, "timer", timer)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        t = self.timer
        return timer_cancelled(to_iso(t.at), t.kind, t.milestone)


@dataclass(frozen=True, slots=True)
class JobFinished:
    """The job is over."""

    job_key: str
    status: JobStatus
    at: datetime

    def __init__(self, job_key: str, status: JobStatus, at: datetime) -> None:
        object.__setattr__(self, "job_key", job_key)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "at", at)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        return job_finished(self.job_key, self.status, to_iso(self.at))


@dataclass(frozen=True, slots=True)
class FactRemembered:
    """An applied event its playbook remembers (``remember``), said by the world
    or a tool, for the job's subject: the worker sends it to ``memory-facts``
    (docs/memory.md, "What is remembered")."""

    subject: str
    name: str
    value: Any
    properties: Mapping[str, Any] | None
    source: str
    event_id: str
    job_key: str
    at: datetime

    def __init__(
        self,
        subject: str,
        name: str,
        value: Any,
        properties: Mapping[str, Any] | None,
        source: str,
        event_id: str,
        job_key: str,
        at: datetime,
    ) -> None:
        object.__setattr__(self, "subject", subject)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "properties", properties)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "event_id", event_id)
        object.__setattr__(self, "job_key", job_key)
        object.__setattr__(self, "at", at)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        return fact_remembered(
            self.subject,
            self.name,
            self.value,
            self.properties,
            self.source,
            self.event_id,
            self.job_key,
            to_iso(self.at),
        )


Effect: TypeAlias = (
    FactRemembered | TaskOpened | TaskClosed | TimerSet | TimerCancelled | JobFinished
)


@dataclass(frozen=True, slots=True)
class Transition:
    """A milestone moved from one status to another, and why."""

    milestone: str
    before: MilestoneStatus
    after: MilestoneStatus
    at: datetime
    reason: str

    def __init__(
        self,
        milestone: str,
        before: MilestoneStatus,
        after: MilestoneStatus,
        at: datetime,
        reason: str,
    ) -> None:
        object.__setattr__(self, "milestone", milestone)
        object.__setattr__(self, "before", before)
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "reason", reason)

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """JSON-ready; ``at`` is left out when it is ``now``, the decision's
        (docs/kafka.md, "What a record no longer carries")."""
        at = None if self.at == now else to_iso(self.at)
        return transition(self.milestone, self.before, self.after, at, self.reason)


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What one open milestone's monitor said at one instant."""

    milestone: str
    at: datetime
    explanation: Mapping[str, Any]

    def __init__(self, milestone: str, at: datetime, explanation: Mapping[str, Any]) -> None:
        object.__setattr__(self, "milestone", milestone)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "explanation", explanation)

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """JSON-ready; ``at`` is left out when it is ``now``, the decision's
        (docs/kafka.md, "What a record no longer carries")."""
        at = None if self.at == now else to_iso(self.at)
        return verdict(self.milestone, at, self.explanation)


@dataclass(frozen=True)
class Step:
    """The result of ``JobGraph.next``.

    ``state`` is the new state (the same object when nothing applied).
    ``duplicate`` — the event's idempotency key was already applied;
    ``refused`` — the input cannot apply (a reason in words); ``noop`` — a tick
    with nothing due. In all three cases there are no effects.
    """

    state: JobState | None
    now: datetime
    input: Input
    fired: tuple[Timer, ...] = ()
    verdicts: tuple[Verdicts, ...] = ()
    transitions: tuple[Transition, ...] = ()
    effects: tuple[Effect, ...] = ()
    frontier: tuple[str, ...] = ()
    duplicate: bool = False
    refused: str | None = None
    noop: bool = False

    def __init__(
        self,
        state: JobState | None,
        now: datetime,
        input: Input,
        fired: tuple[Timer, ...] = (),
        verdicts: tuple[Verdicts, ...] = (),
        transitions: tuple[Transition, ...] = (),
        effects: tuple[Effect, ...] = (),
        frontier: tuple[str, ...] = (),
        duplicate: bool = False,
        refused: str | None = None,
        noop: bool = False,
    ) -> None:
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "now", now)
        object.__setattr__(self, "input", input)
        object.__setattr__(self, "fired", fired)
        object.__setattr__(self, "verdicts", verdicts)
        object.__setattr__(self, "transitions", transitions)
        object.__setattr__(self, "effects", effects)
        object.__setattr__(self, "frontier", frontier)
        object.__setattr__(self, "duplicate", duplicate)
        object.__setattr__(self, "refused", refused)
        object.__setattr__(self, "noop", noop)

    @property
    def applied(self) -> bool:
        """Did this input change the job?"""
        return not (self.duplicate or self.refused or self.noop)

    @property
    def outcome(self) -> str:
        """applied | duplicate | refused | noop."""
        if self.refused:
            return "refused"
        if self.duplicate:
            return "duplicate"
        return "noop" if self.noop else "applied"

    def to_json(self) -> dict[str, Any]:
        """The decision record's body (the shell adds where the input came from)."""
        state = self.state
        now = self.now
        return decision_body(
            to_iso(now),
            self.input.to_json(),
            self.outcome,
            self.refused,
            state.seq if state is not None else None,
            [t.to_json() for t in self.fired],
            [v.to_json(now) for v in self.verdicts],
            [t.to_json(now) for t in self.transitions],
            [e.to_json() for e in self.effects],
            self.frontier,
            state.status if state is not None else None,
            state.hash if state is not None else None,
        )
