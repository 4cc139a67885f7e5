"""The messages: one pydantic model per ``type`` (docs/kafka.md). This module
holds what they all are (:class:`TopicRecord`: a ``type`` and a ``schema``
version) and what comes in: the inbox's job starts, events and schedule wakes,
and the ticks. A decision and what it produces are in ``_decisions.py``, the
schedules' records in ``_schedules.py``, the conversation and the journal in
``_journal.py``, dead letters in ``_deadletter.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, StringConstraints, model_validator

from topics._keys import Contacts, IdempotencyKey, JobKey
from topics._vocab import SCHEMA, Source

__all__ = [
    "SCHEDULE_ID_PATTERN",
    "InboxEvent",
    "InboxMessage",
    "JobStart",
    "OriginLink",
    "Scalar",
    "ScheduleId",
    "ScheduleWake",
    "TickRecord",
    "TopicRecord",
]


Scalar = str | int | float | bool | None


class TopicRecord(BaseModel):
    """What every message is: a frozen model with a ``schema`` version (and a
    ``type``, which each message declares)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(SCHEMA, alias="schema", ge=1, le=SCHEMA)

    def dump(self) -> dict[str, Any]:
        """JSON-ready, with ``schema`` under its wire name."""
        return self.model_dump(mode="json", by_alias=True)

    def compact(self) -> dict[str, Any]:
        """JSON-ready without the fields left at their defaults, except ``type``
        (what a producer needs to send: a reader fills the defaults back in)."""
        data = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        return {"type": getattr(self, "type"), **data}  # noqa: B009 (every message has one)


# -- inbox ----------------------------------------------------------------------


class JobStart(TopicRecord):
    """Start a job on a playbook. The record key is the job key."""

    type: Literal["job.start"] = "job.start"
    key: JobKey
    playbook_key: StrictStr = Field(min_length=1, max_length=200)
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: Contacts = Field(default_factory=list)  # topics/_keys.py: the key rule


class InboxEvent(TopicRecord):
    """Something that happened to a job. ``source`` is stamped by the ingress."""

    type: Literal["event"] = "event"
    key: JobKey
    action: StrictStr = Field(min_length=1, max_length=200)
    value: Scalar = None
    properties: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: IdempotencyKey | None = None  # topics/_keys.py: the key rule
    source: Source = "world"


#: A schedule's id (docs/schedules.md): a Kafka key and a URL segment.
SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
ScheduleId = Annotated[
    StrictStr, StringConstraints(min_length=1, max_length=64, pattern=SCHEDULE_ID_PATTERN)
]
#: One link of a wake's origin: ``<schedule id>/<run id>``.
OriginLink = Annotated[
    StrictStr,
    StringConstraints(
        max_length=265, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}/[A-Za-z0-9._:@-]{1,200}$"
    ),
]


class ScheduleWake(TopicRecord):
    """Fire a schedule now (docs/schedules.md, "Wake"). The record key is the
    schedule id, so the record lands on the schedule's home partition.
    ``request_id`` names the request (a wake seen before does nothing); without
    one, the inbox position ``p<partition>@<offset>`` names it. ``control``
    says what it asks: ``wake``; ``run``, a run now (triggered by ``manual``,
    paused or not: "Run now"); ``abort``, end the active run ``run_id``
    ("Abort"). Each is decided by the worker on the schedule's partition,
    exactly once per request id, as a wake is."""

    type: Literal["schedule.wake"] = "schedule.wake"
    schedule_id: ScheduleId
    request_id: IdempotencyKey | None = None  # topics/_keys.py: the key rule
    context: dict[str, Any] | None = None
    skip_if_running: bool = False
    #: The prompt runs the wake comes from, ``<schedule id>/<run id>``, oldest
    #: first (docs/schedules.md, "Wake loops"); the gateway fills it in.
    origin: list[OriginLink] = Field(default_factory=list, max_length=8)
    control: Literal["wake", "run", "abort"] = "wake"
    #: ``abort``'s run: the run id it ends.
    run_id: IdempotencyKey | None = None

    @model_validator(mode="after")
    def _aborts_name_a_run(self) -> ScheduleWake:
        if (self.control == "abort") != (self.run_id is not None):
            raise ValueError("run_id: an abort names the run it ends, and only an abort does")
        return self

    @property
    def key(self) -> str:
        """The record key: the schedule id."""
        return self.schedule_id


InboxMessage = Annotated[JobStart | InboxEvent | ScheduleWake, Field(discriminator="type")]


# -- ticks ----------------------------------------------------------------------


class TickRecord(TopicRecord):
    """The clock, for one partition: fire what is due at or before ``at``."""

    type: Literal["tick"] = "tick"
    partition: int = Field(ge=0)
    at: str  # ISO-8601 UTC instant
