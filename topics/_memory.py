"""Grounded memory's records (docs/memory.md): what a job remembered about its
subject, an erasure, and a subject's profile.

A job's *subject* is who the job is about (:func:`subject_key`). When an event
whose action its playbook names under ``remember`` is applied, and the event's
source is ``world`` or ``tool`` (never ``agent``), the decision's effects hold a
:class:`FactRememberedEffect`; the worker sends it to the ``memory-facts`` topic
as a :class:`MemoryFact`, keyed by the subject. The memory processor folds that
topic, in order, into one :class:`SubjectProfile` per subject on the compacted
``memory`` topic: a newer fact of a name closes the older one (``valid_to``)
rather than replacing it, so the profile reads "as of" any instant. A
:class:`MemoryErase` on ``memory-facts`` removes the subject's profile (a
tombstone on ``memory``) and every fact of it decided at or before the
erasure, including one that arrives later.

A :class:`MemoryNote` is a model's words, never a fact: the rolling summary of a
job's conversation that the agents service writes once its turns outgrow what
a model is sent (docs/memory.md, "Summaries are claims"). It is always
``agent``, names the turns it came from, and is folded into the profile's
``notes`` beside (never among) its ``facts``: shown to that job's conversation
agent at most, never read by a condition, never returned as a fact.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from topics._keys import CONTACT_NAMED_BY
from topics._messages import Scalar, TopicRecord

__all__ = [
    "GROUNDED_SOURCES",
    "NOTE_CHARS",
    "FactRememberedEffect",
    "MemoryErase",
    "MemoryFact",
    "MemoryNote",
    "ProfileFact",
    "ProfileNote",
    "SubjectProfile",
    "subject_key",
]

#: Who may vouch for a remembered fact: the world (a person, a system through
#: the gateway) or a verified tool result. Never an agent.
GROUNDED_SOURCES: tuple[Literal["world", "tool"], ...] = ("world", "tool")
#: The most characters a note's text holds (a longer summary is cut before it is kept).
NOTE_CHARS = 2000


def subject_key(subject: dict[str, Any], contacts: list[Any]) -> str | None:
    """The key that names a job's subject across jobs: the subject's ``id``
    (a non-empty string) as given, else its first contact's address (a string
    contact, or a contact object's ``email``, then ``id``) in lower case; None
    when the job names neither (it remembers nothing)."""
    given = subject.get("id")
    if isinstance(given, str) and given.strip():
        return given
    if not contacts:
        return None
    first = contacts[0]
    if isinstance(first, str) and first.strip():
        return first.strip().strip("<>").strip().lower()
    if isinstance(first, dict):
        for field in ("email", "id"):
            value = first.get(field)
            if field in CONTACT_NAMED_BY and isinstance(value, str) and value.strip():
                return value.strip().strip("<>").strip().lower() if field == "email" else value
    return None


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FactRememberedEffect(_Part):
    """A decision's effect: an applied event its playbook remembers (topics/_decisions.py)."""

    type: Literal["fact.remembered"] = "fact.remembered"
    subject: str
    name: str  # the event's action
    value: Scalar = None
    properties: dict[str, Any] = Field(default_factory=dict)
    source: Literal["world", "tool"]
    #: The event that proved it: its idempotency key, else its inbox position
    #: (``p<partition>@<offset>``), as the decision's verdicts cite it.
    event_id: str
    job_key: str
    at: str  # the decision's instant (ISO UTC): the fact's valid_from


class MemoryFact(FactRememberedEffect, TopicRecord):
    """``memory-facts``: a remembered fact, keyed by its subject."""

    type: Literal["memory.fact"] = "memory.fact"  # type: ignore[assignment]


class MemoryErase(TopicRecord):
    """``memory-facts``: erase a subject (``DELETE /v1/subjects/{id}``), keyed by it.
    ``request_id`` names the request; ``at`` is when the gateway took it."""

    type: Literal["memory.erase"] = "memory.erase"
    subject: StrictStr = Field(min_length=1)
    at: str
    request_id: str


class _NoteFields(BaseModel):
    """What a note says and where it came from (:class:`MemoryNote`, :class:`ProfileNote`)."""

    kind: Literal["summary"] = "summary"
    #: Always ``agent``: a model wrote it.
    source: Literal["agent"] = "agent"
    job_key: str
    #: Derived from our data (the job and the last turn it covers), so the
    #: same summary sent again is the same note.
    note_id: str
    text: str = Field(max_length=NOTE_CHARS)
    #: The turns of the job's conversation it summarises, counted from 1.
    turn_from: int = Field(ge=1)
    turn_to: int = Field(ge=1)
    at: str  # when it was written (ISO UTC)


class MemoryNote(_NoteFields, TopicRecord):
    """``memory-facts``: a note a model wrote for a job of the subject (its
    conversation's rolling summary), keyed by the subject."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["memory.note"] = "memory.note"
    subject: StrictStr = Field(min_length=1)
    run_id: str  # the run that wrote it


class ProfileNote(_NoteFields):
    """A note as the profile keeps it: the newest per job."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfileFact(_Part):
    """One version of one fact in a profile. ``valid_to`` is None while it is current."""

    name: str
    value: Scalar = None
    properties: dict[str, Any] = Field(default_factory=dict)
    source: Literal["world", "tool"]
    event_id: str
    job_key: str
    valid_from: str
    valid_to: str | None = None


class SubjectProfile(TopicRecord):
    """``memory`` (compacted, keyed by subject): every kept version of every
    remembered fact of one subject, by name, then ``valid_from``. A tombstone
    (no value) is an erased subject."""

    type: Literal["memory.profile"] = "memory.profile"
    subject: str
    facts: list[ProfileFact] = Field(default_factory=list)
    updated_at: str | None = None  # the newest fact's, note's or erasure's instant
    #: Notes (``agent``): the newest summary per job, by job key. Not facts:
    #: the API and the CLI never show them (docs/memory.md, "Summaries are claims").
    notes: list[ProfileNote] = Field(default_factory=list)
