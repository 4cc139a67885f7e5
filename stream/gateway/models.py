"""The gateway's request and response bodies (what its OpenAPI document shows).

Request bodies forbid unknown fields: in particular an event body cannot carry a
``source`` — the token decides it (docs/api.md, 'Tokens'), so a body that tries is refused 422.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

from topics import Contact, Contacts, IdempotencyKey, JobKey, LimitError, Source, plain_json

__all__ = [
    "Accepted",
    "DecisionList",
    "DevMailList",
    "EventBody",
    "EvidenceEvent",
    "FileValue",
    "Health",
    "InboundAccepted",
    "InboundEmail",
    "JobList",
    "JobStatus",
    "JobSummary",
    "JobView",
    "JournalList",
    "MessageAccepted",
    "MessageBody",
    "MessageList",
    "MilestoneView",
    "PendingWrite",
    "PlaybookList",
    "PlaybookView",
    "StartJobBody",
    "TimerView",
]

JobStatus = Literal["starting", "running", "done", "failed", "completed_with_override", "refused"]
Scalar = StrictStr | int | float | bool | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _encodable(cls, value: Any) -> Any:
        try:
            return plain_json(value)
        except LimitError as exc:
            raise ValueError(str(exc)) from None


class StartJobBody(_Body):
    """Start job ``key`` on the latest version of playbook ``playbook_key``."""

    key: JobKey  # topics/_keys.py: the rule the inbox applies too
    playbook_key: StrictStr = Field(min_length=1, max_length=200)
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: Contacts = Field(default_factory=list)  # topics/_keys.py: the key rule


class EventBody(_Body):
    """Something that happened to job ``key``: one occurrence of fact ``action``.
    The source is the token's, never the body's."""

    key: JobKey  # topics/_keys.py: the rule the inbox applies too
    action: StrictStr = Field(min_length=1, max_length=200)
    value: Scalar = None
    properties: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: IdempotencyKey | None = None  # topics/_keys.py: the key rule


#: The longest message text the web channel takes, in characters.
MESSAGE_MAX = 4000


class MessageBody(_Body):
    """What a person (``contact``) says in the job's conversation, on the web
    channel. ``message_id`` names the message: send the same one again to retry
    safely (it is accepted once); without one the gateway names it."""

    text: StrictStr = Field(min_length=1, max_length=MESSAGE_MAX)
    contact: Contact | None = None  # topics/_keys.py: the key rule
    message_id: StrictStr | None = Field(
        None, min_length=1, max_length=190, pattern=r"^[A-Za-z0-9._:@-]+$"
    )

    @field_validator("text", mode="after")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the text is empty (only white space)")
        return value


class AnswerBody(_Body):
    """The person's answer to a flow's open question or approval
    (docs/flows.md, "Flows in the agents service"): ``interrupt_id`` as
    ``GET /v1/jobs/{key}/interrupts`` (or the question's message) names it; an
    approval takes ``yes``/``y``/``approve``/``ok``/``true``, ``true`` or
    ``{"approved": true}`` as yes, anything else as no."""

    interrupt_id: StrictStr = Field(min_length=1, max_length=600)
    answer: StrictStr | StrictBool | dict[str, Any] = Field(union_mode="left_to_right")

    @field_validator("answer", mode="after")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("the answer is empty (only white space)")
        if isinstance(value, str) and len(value) > MESSAGE_MAX:
            raise ValueError(f"the answer is longer than {MESSAGE_MAX} characters")
        return value


class AnswerAccepted(BaseModel):
    """An answer on the ``messages`` topic (the broker acknowledged it): the
    agents service takes it once."""

    accepted: bool = True
    key: str
    interrupt_id: str
    message_id: str
    partition: int
    offset: int


class InterruptList(BaseModel):
    """A job's open flow questions and approvals, as their ``journal.interrupt``
    records said (``question``, ``answers`` allowed, ``expires_at``, for an
    approval the ``show`` values)."""

    key: str
    interrupts: list[dict[str, Any]]


class InboundEmail(_Body):
    """An email a provider received for a reply (or bounce) address, as its
    webhook delivers it (docs/agents.md, "Email"): sign the exact body bytes."""

    to: StrictStr = Field(min_length=3, max_length=1000)
    from_: StrictStr | None = Field(None, alias="from", max_length=1000)
    text: StrictStr = Field("", max_length=200_000)
    message_id: StrictStr | None = Field(None, max_length=1000)
    #: For a bounce: the delivery status, in words.
    reason: StrictStr = Field("", max_length=2000)
    #: The mail's top-level headers, name to value (any of them; those that mark a
    #: mail automatic are read: docs/agents.md, "Mail loops").
    headers: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=200)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class InboundAccepted(BaseModel):
    """A verified reply written (a message and its event), a bounce (an event), or
    an automatic mail (an auto-reply, a list's: journaled, nothing written)."""

    accepted: bool = True
    key: str
    kind: Literal["reply", "bounce", "automatic"]
    message_id: str
    event_id: str
    duplicate: bool = False


class FileValue(BaseModel):
    """A file channel's value (docs/flows.md, "File channels"): what an upload
    answers and what a flow holds, never the bytes."""

    model_config = ConfigDict(populate_by_name=True)

    #: The lowercase hex SHA-256 of the bytes: the same bytes are one file.
    id: str
    name: str
    media_type: str = Field(alias="mediaType")
    #: Where the file is served (``GET /v1/files/{id}``, with a token).
    url: str
    bytes: int


class MessageAccepted(BaseModel):
    """A message on the ``messages`` topic, and its ``message_received`` event on
    the inbox (both acknowledged by the broker)."""

    accepted: bool = True
    key: str
    message_id: str
    #: What verdict explanations cite for the ``message_received`` event.
    event_id: str
    partition: int
    offset: int
    #: True when this message id was accepted before: it counts once.
    duplicate: bool = False


class MessageList(BaseModel):
    """A job's conversation (the newest messages the gateway keeps), oldest first:
    what the agents said (``direction: out``) and what people answered (``in``)."""

    key: str
    messages: list[dict[str, Any]]
    kept: int
    #: How many were read for the job so far (kept or not): where its event
    #: stream resumes after these (``GET /v1/jobs/{key}/events?after=``).
    total: int


class Accepted(BaseModel):
    """A write that is on the inbox (the broker acknowledged it)."""

    accepted: bool = True
    type: Literal["job.start", "event"]
    key: str
    #: Where it landed; an event's ``event_id`` is what verdict explanations cite.
    partition: int
    offset: int
    event_id: str | None = None
    source: Source | None = None
    #: True when this idempotency key was accepted before: it is applied once.
    duplicate: bool = False


class TimerView(BaseModel):
    """A pending timer: ``settle`` closes a window, ``due`` emits a delayed task."""

    at: str
    kind: str
    milestone: str


class EvidenceEvent(BaseModel):
    """An event a verdict cites."""

    id: str
    action: str
    value: Any = None
    properties: dict[str, Any] = Field(default_factory=dict)
    source: str = "world"
    at: str | None = None


class MilestoneView(BaseModel):
    """One milestone: where it stands, why, and until when."""

    id: str
    state: str
    depth: int
    needs: list[str]
    merge: str
    condition: str | None
    instructions: str
    next_best: bool
    opened_at: str | None = None
    deadline: str | None = None
    #: When its task is handed to the agents (a milestone's ``due`` holds it back).
    task_at: str | None = None
    settled_at: str | None = None
    outcome: str | None = None
    explanation: dict[str, Any] | None = None
    evidence: list[EvidenceEvent] = Field(default_factory=list)


class PendingWrite(BaseModel):
    """A write this gateway accepted that no decision reflects yet."""

    type: Literal["job.start", "event"]
    action: str | None = None
    partition: int
    offset: int
    accepted_at: str


class JobView(BaseModel):
    """A job: status, milestones (in rank order), frontier and pending timers.

    ``accepted`` is true while the job is known only from this gateway's own
    accepted start (status ``starting``); ``pending_writes`` lists accepted
    writes no decision reflects yet, so a client reads what it just wrote."""

    key: str
    status: JobStatus
    accepted: bool
    playbook_key: str
    playbook_version: int | None
    seq: int
    started_at: str | None
    updated_at: str | None
    ended_at: str | None
    events: int
    goals: list[str]
    milestones: list[MilestoneView]
    frontier: list[str]
    next_step: str | None
    timers: list[TimerView]
    pending_writes: list[PendingWrite]
    refused: str | None = None
    #: What the job is about and who the agents talk to (from its start).
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: list[Any] = Field(default_factory=list)
    #: The key its subject's profile is kept under (docs/memory.md, "Subjects":
    #: the subject's id, else its first contact's address); None: it names none.
    subject_key: str | None = None
    #: False when this gateway let go of the job to bound its memory
    #: (docs/operations.md): status, milestone states and ``seq`` are its last
    #: snapshot's; deadlines, explanations, evidence and timers are not held
    #: (they are on the topics) until the job's next snapshot brings it back.
    in_memory: bool = True


class JobSummary(BaseModel):
    """A job in a list."""

    key: str
    status: JobStatus
    accepted: bool
    playbook_key: str
    playbook_version: int | None
    updated_at: str | None
    milestones: dict[str, str]
    next_step: str | None
    #: False for a job this gateway evicted from memory (see ``JobView``).
    in_memory: bool = True
    #: What the job is about (from its start), for the list to show.
    subject: dict[str, Any] = Field(default_factory=dict)


class JobList(BaseModel):
    """A page of jobs, by key. Pass ``next`` as ``cursor`` for the next page."""

    jobs: list[JobSummary]
    total: int
    next: str | None


class DecisionList(BaseModel):
    """A job's audit trail (the newest decisions the gateway keeps), oldest first."""

    key: str
    decisions: list[dict[str, Any]]
    kept: int
    #: How many were read for the job so far (kept or not): where its event
    #: stream resumes after these (``GET /v1/jobs/{key}/events?after=``).
    total: int


class JournalList(BaseModel):
    """A job's journal (the newest records the gateway keeps), oldest first:
    model calls with their tokens, tool calls with their outcomes, run ends
    (docs/agents.md)."""

    key: str
    records: list[dict[str, Any]]
    kept: int
    #: How many were read for the job so far (kept or not): where its event
    #: stream resumes after these (``GET /v1/jobs/{key}/events?after=``).
    total: int


class PlaybookView(BaseModel):
    """A playbook version as registered (the validated spec)."""

    key: str
    version: int
    versions: list[int]
    spec: dict[str, Any]


class PlaybookList(BaseModel):
    """The latest version of every known playbook."""

    playbooks: list[PlaybookView]


class DevMailList(BaseModel):
    """``GET /v1/dev/mail``: what the mail catcher of ``lemongraph dev`` received
    (newest 200, oldest first), each mail as it parsed it."""

    mails: list[dict[str, Any]]


class Health(BaseModel):
    """Is the gateway ready to answer from an up-to-date read model?"""

    status: Literal["ok", "starting", "degraded"]
    broker: bool
    caught_up: bool
    jobs: int
    playbooks: int
    schedules: int = 0
    #: Why the gateway cannot be trusted even with the broker up (a reset log).
    problem: str | None = None
