"""A scenario's model: the event script and expectation of a playbook scenario,
and the downtime, wakes, operator changes and scripted prompt replies of a
schedule scenario (docs/playbooks.md; docs/schedules.md, "Proving schedules on a
virtual clock"). Both the job simulator and the schedules' virtual clock read it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from topics import Source

from compiler._durations import parse_duration
from compiler._time import require_aware

__all__ = [
    "DownSpan",
    "Expectation",
    "Scenario",
    "ScenarioChange",
    "ScenarioEvent",
    "ScenarioWake",
    "ScriptedReply",
]


def _offset(value: str) -> str:
    parse_duration(value)
    return value


class ScenarioEvent(BaseModel):
    """One scripted event, ``at`` an offset from the scenario's base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str
    action: str = Field(min_length=1)
    value: str | int | float | bool | None = None
    properties: dict[str, Any] = Field(default_factory=dict)
    source: Source = "world"
    idempotency_key: str | None = None

    _check_at = field_validator("at")(_offset)

    @property
    def offset(self) -> timedelta:
        """``at`` as a timedelta."""
        return parse_duration(self.at)


class Expectation(BaseModel):
    """Where the job should land. Lists compare as sets; ``tasks`` in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["running", "done", "failed", "completed_with_override"] | None = None
    done: list[str] | None = None
    knocked: list[str] | None = None
    dropped: list[str] | None = None
    open: list[str] | None = None
    pending: list[str] | None = None
    unreachable: list[str] | None = None
    tasks: list[str] | None = None
    #: Schedule scenarios (docs/schedules.md): every run, in order, and runs per status.
    runs: list[str] | None = None
    #: schedule id → that schedule's runs only, in order
    runs_of: dict[str, list[str]] | None = None
    count: dict[str, int] | None = None


class DownSpan(BaseModel):
    """The worker is down from ``from`` to ``to`` (offsets from ``base``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    start: str = Field(alias="from")
    to: str

    _check = field_validator("start", "to")(_offset)

    @model_validator(mode="after")
    def _ordered(self) -> DownSpan:
        if parse_duration(self.to) <= parse_duration(self.start):
            raise ValueError(f"to ({self.to}) must be after from ({self.start})")
        return self


class ScriptedReply(BaseModel):
    """How one prompt run ends: its reply (``output``) or its failure, ``after``
    it started; ``never``: it does not report (it times out). ``repeat``: this
    reply answers every later run too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str = ""
    status: Literal["completed", "failed"] = "completed"
    error: str | None = None
    after: str = "0s"
    never: bool = False
    repeat: bool = False

    _check = field_validator("after")(_offset)


class ScenarioWake(BaseModel):
    """A wake command at ``at`` (docs/schedules.md, "Wake"); with ``control``, a
    run now (``run``: "Run now") or an abort (``abort``: "Abort") of the run
    ``run``, by default the one the schedule has running then."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str
    schedule: str = Field(min_length=1)
    request_id: str | None = None
    context: dict[str, Any] | None = None
    skip_if_running: bool = False
    control: Literal["wake", "run", "abort"] = "wake"
    run: str | None = Field(None, min_length=1)

    _check = field_validator("at")(_offset)

    @model_validator(mode="after")
    def _run_is_an_aborts(self) -> ScenarioWake:
        if self.run is not None and self.control != "abort":
            raise ValueError("run names the run an abort ends: set control: abort")
        return self


class ScenarioChange(BaseModel):
    """An operator's change at ``at``: fields of the definition replaced
    (``set``: ``{enabled: false}`` pauses, ``{enabled: true}`` resumes), or the
    schedule removed (docs/schedules.md, "Downtime and catch-up")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str
    schedule: str = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)
    remove: bool = False

    _check = field_validator("at")(_offset)

    @model_validator(mode="after")
    def _one(self) -> ScenarioChange:
        if self.remove == bool(self.set):
            raise ValueError("a change either sets fields or removes the schedule")
        if "id" in self.set:
            raise ValueError("a change cannot set id")
        return self


class Scenario(BaseModel):
    """A named event script and its expectation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    base: datetime
    events: list[ScenarioEvent] = Field(default_factory=list)
    until: str | None = None
    subject: dict[str, Any] = Field(default_factory=dict)
    expect: Expectation = Field(default_factory=Expectation)
    #: Schedule scenarios only (docs/schedules.md, "Proving schedules on a virtual clock").
    down: list[DownSpan] = Field(default_factory=list)
    replies: dict[str, list[str | ScriptedReply]] = Field(default_factory=dict)
    wakes: list[ScenarioWake] = Field(default_factory=list)
    changes: list[ScenarioChange] = Field(default_factory=list)

    _check_until = field_validator("until")(lambda v: v if v is None else _offset(v))

    @field_validator("base")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"base must have a time zone, e.g. {value.strftime('%Y-%m-%dT%H:%M:%S')}Z"
            )
        return require_aware(value, "base")
