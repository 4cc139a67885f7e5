"""The messages. One pydantic model per ``type``."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

__all__ = [
    "SCHEMA",
    "DeadLetter",
    "DecisionRecord",
    "InboxEvent",
    "InboxMessage",
    "JobSnapshot",
    "JobStart",
    "MilestoneSnapshot",
    "PlaybookRecord",
    "RecordOrigin",
    "TaskClosedRecord",
    "TaskOpenedRecord",
    "TaskRecord",
    "TickRecord",
]

#: The schema version this code writes and reads.
SCHEMA = 1

JobKey = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]
Scalar = str | int | float | bool | None


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(SCHEMA, alias="schema", ge=1, le=SCHEMA)

    def dump(self) -> dict[str, Any]:
        """JSON-ready, with ``schema`` under its wire name."""
        return self.model_dump(mode="json", by_alias=True)


# -- inbox ----------------------------------------------------------------------


class JobStart(_Message):
    """Start a job on a playbook. The record key is the job key."""

    type: Literal["job.start"] = "job.start"
    key: JobKey
    playbook_key: StrictStr = Field(min_length=1, max_length=200)
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: list[Any] = Field(default_factory=list)


class InboxEvent(_Message):
    """Something that happened to a job. ``source`` is stamped by the ingress."""

    type: Literal["event"] = "event"
    key: JobKey
    action: StrictStr = Field(min_length=1, max_length=200)
    value: Scalar = None
    properties: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: StrictStr | None = Field(None, min_length=1, max_length=200)
    source: Literal["world", "tool", "agent"] = "world"


InboxMessage = Annotated[JobStart | InboxEvent, Field(discriminator="type")]


# -- ticks ----------------------------------------------------------------------


class TickRecord(_Message):
    """The clock, for one partition: fire what is due at or before ``at``."""

    type: Literal["tick"] = "tick"
    partition: int = Field(ge=0)
    at: str  # ISO-8601 UTC instant


# -- tasks ----------------------------------------------------------------------


class TaskOpenedRecord(_Message):
    """A milestone's task is open; ``frontier`` is every open milestone in rank order."""

    type: Literal["task.opened"] = "task.opened"
    task_id: str
    job_key: str
    milestone: str
    at: str
    instructions: str
    playbook_key: str
    playbook_instructions: str
    integrations: list[str]
    deadline: str
    frontier: list[str]
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: list[Any] = Field(default_factory=list)


class TaskClosedRecord(_Message):
    """A task is over."""

    type: Literal["task.closed"] = "task.closed"
    task_id: str
    job_key: str
    milestone: str
    at: str
    outcome: Literal["done", "knocked", "timed_out", "dropped"]


TaskRecord = Annotated[TaskOpenedRecord | TaskClosedRecord, Field(discriminator="type")]


# -- decisions --------------------------------------------------------------------


class RecordOrigin(BaseModel):
    """Where a decision's input was read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    partition: int
    offset: int


class DecisionRecord(_Message):
    """One decision: enough to replay it through the pure core and compare."""

    type: Literal["decision"] = "decision"
    job_key: str
    playbook_key: str | None
    playbook_version: int | None
    origin: RecordOrigin | None
    now: str
    input: dict[str, Any]
    outcome: Literal["applied", "duplicate", "refused", "noop"]
    refused: str | None = None
    seq: int | None = None
    fired: list[dict[str, Any]] = Field(default_factory=list)
    verdicts: list[dict[str, Any]] = Field(default_factory=list)
    transitions: list[dict[str, Any]] = Field(default_factory=list)
    effects: list[dict[str, Any]] = Field(default_factory=list)
    frontier: list[str] = Field(default_factory=list)
    status: str | None = None
    state_hash: str | None = None
    prev_state_hash: str | None = None


# -- jobs -------------------------------------------------------------------------


class MilestoneSnapshot(BaseModel):
    """One milestone in a job snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: str
    opened_at: str | None = None
    deadline: str | None = None
    task_at: str | None = None
    settled_at: str | None = None
    outcome: str | None = None
    explanation: dict[str, Any] | None = None


class JobSnapshot(_Message):
    """A job as read models see it. ``milestones`` maps id → state."""

    type: Literal["job.snapshot"] = "job.snapshot"
    key: str
    status: Literal["running", "done", "failed"]
    playbook_key: str
    playbook_version: int
    seq: int
    started_at: str
    updated_at: str | None
    ended_at: str | None = None
    events: int = 0
    milestones: dict[str, str]
    detail: dict[str, MilestoneSnapshot]
    frontier: list[str]
    timers: list[dict[str, Any]]
    state_hash: str


# -- playbooks ----------------------------------------------------------------------


class PlaybookRecord(_Message):
    """A registered playbook version (the spec as validated)."""

    type: Literal["playbook"] = "playbook"
    key: str
    version: int
    spec: dict[str, Any]


# -- deadletter ----------------------------------------------------------------------


class DeadLetter(_Message):
    """A record that could not be used, with everything needed to retry it."""

    type: Literal["deadletter"] = "deadletter"
    topic: str
    partition: int
    offset: int
    key_b64: str | None
    value_b64: str | None
    value_text: str | None = None  # the value as UTF-8 text, when it is text
    reason: str
    at: str

    @classmethod
    def of(
        cls,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        at: str,
    ) -> DeadLetter:
        """The dead letter of a record, keeping its bytes exactly (base64), and its
        value as text too when it is UTF-8."""
        text = None
        if value is not None:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            key_b64=base64.b64encode(key).decode() if key is not None else None,
            value_b64=base64.b64encode(value).decode() if value is not None else None,
            value_text=text,
            reason=reason,
            at=at,
        )
