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
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from topics._keys import CONTACT_NAMED_BY
from topics._messages import Scalar, TopicRecord

__all__ = [
    "GROUNDED_SOURCES",
    "FactRememberedEffect",
    "MemoryErase",
    "MemoryFact",
    "ProfileFact",
    "SubjectProfile",
    "subject_key",
]

#: Who may vouch for a remembered fact: the world (a person, a system through
#: the gateway) or a verified tool result. Never an agent.
GROUNDED_SOURCES: tuple[Literal["world", "tool"], ...] = ("world", "tool")


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
    updated_at: str | None = None  # the newest fact's or erasure's instant
