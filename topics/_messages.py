"""The messages. One pydantic model per ``type``."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, StringConstraints

from topics._keys import JobKey
from topics._vocab import SCHEMA, JobStatus, MilestoneStatus, Source, TaskOutcome, TimerKind

__all__ = [
    "APPROVERS_DEFAULT",
    "DEADLETTER_HEADERS",
    "FORWARDED_FROM_HEADER",
    "SCHEDULE_HEADER",
    "SCHEDULE_RUN_HEADER",
    "Answerer",
    "Approver",
    "AtomVerdict",
    "AuditRecord",
    "ClockBound",
    "DeadLetter",
    "DecisionInput",
    "DecisionRecord",
    "Effect",
    "EventInput",
    "ExplanationRecord",
    "Headers",
    "InboxEvent",
    "InboxMessage",
    "JobFinishedEffect",
    "JobSnapshot",
    "JobStart",
    "JournalFlow",
    "JournalHandlerCall",
    "JournalInterrupt",
    "JournalModelCall",
    "JournalRecord",
    "JournalRun",
    "JournalToolCall",
    "MessageRecord",
    "MilestoneSnapshot",
    "PlaybookRecord",
    "RecordForward",
    "RecordOrigin",
    "ScheduleId",
    "SchedulePromptTask",
    "ScheduleRecord",
    "ScheduleReport",
    "ScheduleRunRecord",
    "ScheduleRunsRecord",
    "ScheduleWake",
    "ShownField",
    "StartInput",
    "TaskClosedEffect",
    "TaskClosedRecord",
    "TaskOpenedEffect",
    "TaskOpenedRecord",
    "TaskRecord",
    "TickInput",
    "TickRecord",
    "TimerCancelledEffect",
    "TimerRecord",
    "TimerSetEffect",
    "Tokens",
    "TransitionRecord",
    "VerdictRecord",
]


Scalar = str | int | float | bool | None


class _Message(BaseModel):
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
    source: Source = "world"


#: A schedule's id (docs/schedules.md): a Kafka key and a URL segment.
SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
ScheduleId = Annotated[
    StrictStr, StringConstraints(min_length=1, max_length=64, pattern=SCHEDULE_ID_PATTERN)
]


class ScheduleWake(_Message):
    """Fire a schedule now (docs/schedules.md, "Wake"). The record key is the
    schedule id, so the record lands on the schedule's home partition.
    ``request_id`` names the request (a wake seen before does nothing); without
    one, the inbox position ``p<partition>@<offset>`` names it."""

    type: Literal["schedule.wake"] = "schedule.wake"
    schedule_id: ScheduleId
    request_id: StrictStr | None = Field(None, min_length=1, max_length=200)
    context: dict[str, Any] | None = None
    skip_if_running: bool = False

    @property
    def key(self) -> str:
        """The record key: the schedule id."""
        return self.schedule_id


InboxMessage = Annotated[JobStart | InboxEvent | ScheduleWake, Field(discriminator="type")]


# -- ticks ----------------------------------------------------------------------


class TickRecord(_Message):
    """The clock, for one partition: fire what is due at or before ``at``."""

    type: Literal["tick"] = "tick"
    partition: int = Field(ge=0)
    at: str  # ISO-8601 UTC instant


# -- a decision's parts ------------------------------------------------------------


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartInput(_Part):
    """A decision's input: the job.start it applied (the record key is the job key)."""

    type: Literal["job.start"] = "job.start"
    key: str
    playbook_key: str
    subject: dict[str, Any]
    contacts: list[Any]


class EventInput(_Part):
    """A decision's input: an event. ``id`` names the occurrence in verdicts
    (its inbox position, ``p<partition>@<offset>``, when it has no idempotency key)."""

    type: Literal["event"] = "event"
    action: str
    value: Scalar = None
    properties: dict[str, Any]
    source: Source
    idempotency_key: str | None = None
    id: str | None = None


class TickInput(_Part):
    """A decision's input: the clock moved."""

    type: Literal["tick"] = "tick"


DecisionInput = Annotated[StartInput | EventInput | TickInput, Field(discriminator="type")]


class TimerRecord(_Part):
    """A job timer: ``settle`` closes a milestone's window, ``due`` emits its task."""

    at: str
    kind: TimerKind
    milestone: str


class AtomVerdict(_Part):
    """One atom's part in a verdict: its verdict, its match count, the evidence ids."""

    atom: str
    verdict: Literal["TRUE", "FALSE", "UNKNOWN"]
    count: int
    evidence: list[str]


class ExplanationRecord(_Part):
    """Why a condition said what it said (``closed``: at its window's close)."""

    condition: str
    verdict: Literal["TRUE", "FALSE", "UNKNOWN"]
    closed: bool
    atoms: list[AtomVerdict]


class VerdictRecord(ExplanationRecord):
    """What one open milestone's condition said at one instant."""

    milestone: str
    at: str


class TransitionRecord(_Part):
    """A milestone moved from one status to another, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    milestone: str
    from_: MilestoneStatus = Field(alias="from")
    to: MilestoneStatus
    at: str
    reason: str


class TaskOpenedEffect(_Part):
    """A milestone's task is open; ``frontier`` is every open milestone in rank order."""

    type: Literal["task.opened"] = "task.opened"
    task_id: str
    job_key: str
    milestone: str
    at: str
    instructions: str
    playbook_instructions: str
    integrations: list[str]
    deadline: str
    frontier: list[str]


class TaskClosedEffect(_Part):
    """A task is over."""

    type: Literal["task.closed"] = "task.closed"
    task_id: str
    job_key: str
    milestone: str
    at: str
    outcome: TaskOutcome


class TimerSetEffect(TimerRecord):
    """Remember to wake the job at ``at``."""

    type: Literal["timer.set"] = "timer.set"


class TimerCancelledEffect(TimerRecord):
    """Forget a timer that was set."""

    type: Literal["timer.cancelled"] = "timer.cancelled"


class JobFinishedEffect(_Part):
    """The job is over."""

    type: Literal["job.finished"] = "job.finished"
    job_key: str
    status: Literal[JobStatus.DONE, JobStatus.FAILED]
    at: str


Effect = Annotated[
    TaskOpenedEffect | TaskClosedEffect | TimerSetEffect | TimerCancelledEffect | JobFinishedEffect,
    Field(discriminator="type"),
]


# -- tasks ----------------------------------------------------------------------


class TaskOpenedRecord(TaskOpenedEffect, _Message):
    """The task.opened effect on the tasks topic, with what a channel service
    needs to talk to the job's contacts."""

    playbook_key: str
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: list[Any] = Field(default_factory=list)


class TaskClosedRecord(TaskClosedEffect, _Message):
    """The task.closed effect on the tasks topic."""


class SchedulePromptTask(_Message):
    """A prompt schedule's run for the agents service (docs/schedules.md): run
    ``agent`` on ``prompt`` once per ``run_id`` and report on ``schedule-runs``
    (:class:`ScheduleReport`) by ``deadline``. The record key is the schedule id."""

    type: Literal["schedule.prompt"] = "schedule.prompt"
    schedule_id: str
    run_id: str
    agent: str
    prompt: str
    context: dict[str, Any] | None = None
    slot: str | None = None  # the nominal slot (ISO UTC); None: a wake run
    attempt: int = 0
    deadline: str
    triggered_by: Literal["schedule", "manual", "wake", "retry"] = "schedule"
    at: str | None = None  # when it was dispatched


TaskRecord = Annotated[
    TaskOpenedRecord | TaskClosedRecord | SchedulePromptTask, Field(discriminator="type")
]


# -- schedules (docs/schedules.md) ----------------------------------------------------

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


class ScheduleRecord(_Message):
    """A schedule's definition on the compacted ``schedules`` topic (key: the
    schedule id; a tombstone deletes it). ``spec`` is the definition as
    validated (``compiler.validate_schedule``), its ``id`` the record key."""

    type: Literal["schedule"] = "schedule"
    spec: dict[str, Any]
    updated_at: str
    by: str


class ScheduleRunRecord(_Message):
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


class ScheduleReport(_Message):
    """How a prompt run ended (``schedule-runs``, key: the schedule id), written
    by the agents service; the worker reads it and records the run's end."""

    type: Literal["schedule.report"] = "schedule.report"
    schedule_id: str
    run_id: str
    status: Literal["completed", "failed"]
    output: str = ""
    error: str | None = None
    at: str


ScheduleRunsRecord = Annotated[ScheduleRunRecord | ScheduleReport, Field(discriminator="type")]


class AuditRecord(_Message):
    """An operator's action on a schedule (``audit``, key: the schedule id),
    written by whoever performed it: the gateway, the CLI, or the worker
    registering ``schedules.yaml`` (``by: "schedules.yaml"``)."""

    type: Literal["audit"] = "audit"
    action: Literal["create", "update", "pause", "resume", "delete", "wake", "abort"]
    target: str  # "schedule:<id>"
    by: str
    at: str
    detail: dict[str, Any] = Field(default_factory=dict)


# -- decisions --------------------------------------------------------------------


#: The header a worker puts on an inbox record it forwards to the record's home
#: partition (its key's murmur2 partition): ``p<partition>@<offset>``, where
#: the producer's client put it. See docs/kafka.md, "Partitioning".
FORWARDED_FROM_HEADER = "lemongraph.forwarded-from"


class RecordForward(BaseModel):
    """Where the forwarded copy of an inbox record was read (its home partition)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int
    offset: int


class RecordOrigin(BaseModel):
    """Where a decision's input was produced: the topic, partition and offset the
    producer's client wrote it to. When that was not the record's home
    partition, ``forwarded`` says where the worker's copy of it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    partition: int
    offset: int
    forwarded: RecordForward | None = None


class ClockBound(BaseModel):
    """A decision whose ``now`` is not its record's timestamp, and why: the
    timestamp was ahead of the worker's clock by more than the allowed skew
    (``worker_clock``), behind the job's own clock (``job_clock``), or missing
    (``no_timestamp``: the worker's clock was used)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record_timestamp: int  # epoch ms, as the record carried it
    bound: Literal["worker_clock", "job_clock", "no_timestamp"]


class DecisionRecord(_Message):
    """One decision: enough to replay it through the pure core and compare."""

    type: Literal["decision"] = "decision"
    job_key: str
    playbook_key: str | None
    playbook_version: int | None
    origin: RecordOrigin | None
    now: str
    input: DecisionInput
    outcome: Literal["applied", "duplicate", "refused", "noop"]
    refused: str | None = None
    seq: int | None = None
    fired: list[TimerRecord] = Field(default_factory=list)
    verdicts: list[VerdictRecord] = Field(default_factory=list)
    transitions: list[TransitionRecord] = Field(default_factory=list)
    effects: list[Effect] = Field(default_factory=list)
    frontier: list[str] = Field(default_factory=list)
    status: JobStatus | None = None
    state_hash: str | None = None
    prev_state_hash: str | None = None
    clock: ClockBound | None = None


# -- the conversation and the journal (docs/agents.md) -----------------------------------


class Answerer(BaseModel):
    """Who answered a flow's question or approval (docs/api.md, "Approvals"):
    a token holder through ``POST /v1/jobs/{key}/answers`` (``source``, the
    token's ``name``, whether it holds the ``approver`` role), or a contact on
    their channel (``contact``, ``channel``). Stamped by the ingress, never by
    the body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source = "world"
    name: str = ""
    approver: bool = False
    contact: str | None = None
    channel: str | None = None


class ShownField(BaseModel):
    """One channel an approval shows, as a person reads it (docs/flows.md, "What
    a person reads"): its ``label`` (the channel's description, else its name in
    words) and its value as ``text``, never JSON. ``block``: the text is lines
    under the label (an object or a list), not one value beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: str
    label: str
    text: str
    block: bool = False


#: One who may answer an approval (docs/api.md, "Approvals"): ``operators``
#: (a ``world`` token with the ``approver`` role, through the API or the UI),
#: ``contacts`` (any contact of the job, on their own channel) or one contact's
#: address.
Approver = Annotated[
    str, StringConstraints(pattern=r"^(operators|contacts|[^@\s]+@[^@\s]+)$", max_length=254)
]

#: Who answers an approval when neither its flow node nor the catalog says:
#: operators holding a ``world`` token with the ``approver`` role.
APPROVERS_DEFAULT: tuple[str, ...] = ("operators",)


class MessageRecord(_Message):
    """One message of a job's conversation (messages topic). ``message_id`` is
    derived from our own data, so a re-run writes the same id again."""

    type: Literal["message"] = "message"
    job_key: str
    message_id: str
    direction: Literal["in", "out"]
    channel: str
    agent: str | None = None
    contact: str | None = None
    task_id: str | None = None
    text: str
    at: str
    #: A flow's question or approval (docs/flows.md, "Flows in the agents
    #: service"): on ``out``, the interrupt it asks; on ``in``, the interrupt
    #: this message answers (``POST /v1/jobs/{key}/answers``), with ``answer``
    #: as it was given (``text`` is its text).
    interrupt_id: str | None = None
    answer: Any = None
    #: On an answer written by ``POST /v1/jobs/{key}/answers``: who answered,
    #: as the gateway verified the token (the agents service checks it again).
    by: Answerer | None = None


#: The opening of an inbound message that its ``message_received`` event keeps.
RECEIVED_EXCERPT = 200


def inbound_message(
    job_key: str, message_id: str, channel: str, contact: str | None, text: str, at: str
) -> tuple[MessageRecord, InboxEvent]:
    """A person's message on a channel: the ``messages`` record (``direction:
    in``) and its ``message_received`` event for the inbox (``source: world``,
    idempotency key ``msg:<message_id>``), which proves that someone wrote and
    never what the text claims (docs/kafka.md, "Records of the conversation")."""
    record = MessageRecord(
        job_key=job_key,
        message_id=message_id,
        direction="in",
        channel=channel,
        contact=contact,
        text=text,
        at=at,
    )
    cut = text if len(text) <= RECEIVED_EXCERPT else text[: RECEIVED_EXCERPT - 1] + "…"
    properties: dict[str, Any] = {"channel": channel, "text": cut}
    if contact is not None:
        properties["contact"] = contact
    event = InboxEvent(
        key=job_key,
        action="message_received",
        properties=properties,
        idempotency_key=f"msg:{message_id}",
        source="world",
    )
    return record, event


class Tokens(BaseModel):
    """Tokens of one model call, as the server reported them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: int
    output: int
    cached: int = 0
    total: int


class JournalModelCall(_Message):
    """One model call: what was sent and came back (openings only), how long,
    the tokens, and the outcome (``ok``, or the error's kind)."""

    type: Literal["journal.model_call"] = "journal.model_call"
    job_key: str
    run_id: str
    agent: str
    at: str
    request: str
    response: str
    latency_ms: int
    tokens: Tokens | None = None
    outcome: Literal["ok", "status", "transport", "garbage"]
    #: A call a flow's llm node made (docs/flows.md): the flow and the node id.
    flow: str | None = None
    node: str | None = None


class JournalToolCall(_Message):
    """One tool call (or delegation): the tool, its arguments (opening), the
    outcome, our idempotency key, the endpoint (redacted) and how long."""

    type: Literal["journal.tool_call"] = "journal.tool_call"
    job_key: str
    run_id: str
    agent: str
    at: str
    tool: str
    task_id: str | None = None
    arguments: str
    outcome: Literal["done", "failed", "refused", "outcome_unknown", "delegated"]
    key: str | None = None
    http_status: int | None = None
    url: str | None = None
    result: str
    latency_ms: int
    fact: str | None = None
    #: A call a flow's tool node made (docs/flows.md): the flow and the node id.
    flow: str | None = None
    node: str | None = None


class JournalHandlerCall(_Message):
    """One call of a registered handler or router by a flow (docs/flows.md,
    "Handlers and routers"): the name, the outcome and what it returned
    (opening), or the error."""

    type: Literal["journal.handler_call"] = "journal.handler_call"
    job_key: str
    run_id: str
    at: str
    flow: str
    node: str
    kind: Literal["handler", "router"]
    name: str
    call_id: str
    outcome: Literal["ok", "error"]
    result: str
    latency_ms: int


class JournalRun(_Message):
    """A run ended: why (``done``, a bound, ``task_closed``, ``model_error``),
    and what it used."""

    type: Literal["journal.run"] = "journal.run"
    job_key: str
    run_id: str
    agent: str
    at: str
    ended: str
    turns: int
    tool_calls: int
    tokens: int
    #: Steps (model replies, tool results) of a run cut short that this run
    #: replayed from its checkpoint instead of asking or calling again.
    replayed: int = 0


class JournalFlow(_Message):
    """A flow run of a milestone's task (docs/flows.md, "Flows in the agents
    service"): ``started``, each ``node`` completed (once, in order), and its end:
    ``finished`` (``outputs``), ``failed`` (``node``, ``error``) or ``stopped``
    (the task closed first)."""

    type: Literal["journal.flow"] = "journal.flow"
    job_key: str
    run_id: str
    flow: str
    task_id: str
    at: str
    event: Literal["started", "node", "finished", "failed", "stopped"]
    node: str | None = None
    outputs: dict[str, Any] | None = None
    error: str | None = None


class JournalInterrupt(_Message):
    """A flow's question (``ask``) or approval, as it opens and as it closes:
    ``open`` (asked; ``answers`` the allowed ones, empty for any), ``answered``
    (the answer consumed), ``expired`` (a tick past ``expires_at``) or
    ``cancelled`` (the task closed), or ``refused`` (an answer from someone
    who may not give it: the interrupt stays open, ``by`` says who tried). The
    gateway answers ``POST /v1/jobs/{key}/answers`` from these. ``approvers``
    (approvals) and ``asked_of`` (the contact the question went to, if any) say
    who may answer (docs/api.md, "Approvals")."""

    type: Literal["journal.interrupt"] = "journal.interrupt"
    job_key: str
    run_id: str
    flow: str
    node: str
    interrupt_id: str
    at: str
    kind: Literal["ask", "approval"]
    status: Literal["open", "answered", "expired", "cancelled", "refused"]
    question: str = ""
    answers: list[str] = Field(default_factory=list)
    expires_at: str | None = None
    #: For approvals: the ``show`` channels' values (nothing else of the run).
    show: dict[str, Any] = Field(default_factory=dict)
    #: For approvals: the same channels as a person reads them, in ``show``'s order.
    shown: list[ShownField] = Field(default_factory=list)
    answer: Any = None
    #: For approvals: who approves (``operators``, ``contacts``, or addresses).
    approvers: list[str] = Field(default_factory=list)
    #: The contact the question was sent to (None: to nobody but the operators).
    asked_of: str | None = None
    #: On ``answered`` and ``refused``: who answered (or tried to).
    by: Answerer | None = None


class JournalMail(_Message):
    """One email of the email channel: sent (``out``), received or refused
    (``in``). ``outcome``: ``sent``, ``failed`` (the server refused it for good),
    ``received`` (a reply, written as a message), ``bounced`` (an
    ``email_bounced`` event), ``refused`` (in: an unsigned, tampered, expired or
    wrong-kind reply address, SMTP 550 at RCPT; out: a message to an address
    that is not a contact of the job, not published; nothing written either
    way), ``unverified`` (a reply whose sender is not the contact its reply
    address was issued to: not taken, nothing written)."""

    type: Literal["journal.mail"] = "journal.mail"
    job_key: str
    at: str
    direction: Literal["in", "out"]
    outcome: Literal["sent", "failed", "received", "bounced", "refused", "unverified"]
    message_id: str | None = None
    #: The address the mail went to (out) or came from (in).
    address: str | None = None
    #: ``unverified``: the contact the reply address was issued to.
    contact: str | None = None
    detail: str = ""


JournalRecord = Annotated[
    JournalModelCall
    | JournalToolCall
    | JournalHandlerCall
    | JournalRun
    | JournalFlow
    | JournalInterrupt
    | JournalMail,
    Field(discriminator="type"),
]


# -- jobs -------------------------------------------------------------------------


class MilestoneSnapshot(BaseModel):
    """One milestone in a job snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: MilestoneStatus
    opened_at: str | None = None
    deadline: str | None = None
    task_at: str | None = None
    settled_at: str | None = None
    outcome: TaskOutcome | None = None
    explanation: ExplanationRecord | None = None


class JobSnapshot(_Message):
    """A job as read models see it. ``milestones`` maps id → state."""

    type: Literal["job.snapshot"] = "job.snapshot"
    key: str
    status: JobStatus
    playbook_key: str
    playbook_version: int
    seq: int
    started_at: str
    updated_at: str | None
    ended_at: str | None = None
    events: int = 0
    milestones: dict[str, MilestoneStatus]
    detail: dict[str, MilestoneSnapshot]
    frontier: list[str]
    timers: list[TimerRecord]
    state_hash: str


# -- playbooks ----------------------------------------------------------------------


class PlaybookRecord(_Message):
    """A registered playbook version (the spec as validated)."""

    type: Literal["playbook"] = "playbook"
    key: str
    version: int
    spec: dict[str, Any]

    @property
    def record_key(self) -> bytes:
        """The Kafka key, ``KEY@vN``: one per version, so that compaction of the
        ``playbooks`` topic keeps every version a job may be pinned to
        (docs/kafka.md). ``@`` is not allowed in playbook keys."""
        return f"{self.key}@v{self.version}".encode()


# -- deadletter ----------------------------------------------------------------------

#: The header names of a dead letter (the usual dead-letter-queue shape, as
#: Kafka Connect writes it): the record's value and key are the original's,
#: byte for byte, and these headers say where it came from and why.
DEADLETTER_HEADERS = {
    "schema": "lemongraph.dlq.schema",
    "topic": "lemongraph.dlq.topic",
    "partition": "lemongraph.dlq.partition",
    "offset": "lemongraph.dlq.offset",
    "timestamp": "lemongraph.dlq.timestamp",
    "reason": "lemongraph.dlq.reason",
    "at": "lemongraph.dlq.at",
}

#: A reason is cut to this many characters, so that the headers stay small.
REASON_MAX = 1000

Headers = list[tuple[str, bytes]]


class DeadLetter(BaseModel):
    """Why a record could not be used and where it was read: the headers of its
    dead letter, whose key and value are the original record's bytes.

    A dead letter is never larger than the record it carries plus these headers
    (well under 1 KB): write it with :meth:`headers`, read it back with
    :meth:`from_headers`, and :meth:`describe` it for people.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(SCHEMA, alias="schema", ge=1, le=SCHEMA)
    topic: str
    partition: int
    offset: int
    #: The original record's timestamp (epoch ms; -1: it had none).
    timestamp: int = -1
    reason: str
    at: str

    @classmethod
    def of(
        cls,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        at: str,
        timestamp: int = -1,
    ) -> DeadLetter:
        """The dead letter of the record at ``topic``/``partition``/``offset``."""
        if len(reason) > REASON_MAX:
            reason = reason[: REASON_MAX - 3] + "..."
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp=timestamp,
            reason=reason,
            at=at,
        )

    def headers(self, original: Sequence[tuple[str, bytes]] = ()) -> Headers:
        """The record headers: the original record's own (a dead-letter header it
        carried is replaced), then these."""
        names = DEADLETTER_HEADERS
        ours = [
            (names["schema"], str(self.schema_).encode()),
            (names["topic"], self.topic.encode()),
            (names["partition"], str(self.partition).encode()),
            (names["offset"], str(self.offset).encode()),
            (names["timestamp"], str(self.timestamp).encode()),
            (names["reason"], self.reason.encode()),
            (names["at"], self.at.encode()),
        ]
        mine = {name for name, _ in ours}
        return [(n, v) for n, v in original if n not in mine] + ours

    @classmethod
    def from_headers(cls, headers: Sequence[tuple[str, bytes]]) -> DeadLetter:
        """Read the headers of a dead letter back. Raises ``ValueError`` when it
        is not one."""
        by_name = {name: value for name, value in headers}
        data: dict[str, Any] = {}
        for field_name, header in DEADLETTER_HEADERS.items():
            if header in by_name:
                data[field_name] = by_name[header].decode("utf-8", "replace")
        return cls.model_validate(data)

    def describe(self, key: bytes | None, value: bytes | None) -> dict[str, Any]:
        """JSON-ready: these fields, then the key and the value, each as text
        when it is UTF-8 (``key``, ``value_text``) and else as base64
        (``key_b64``, ``value_b64``). ``lemongraph tail deadletter`` prints this."""
        out: dict[str, Any] = {"type": "deadletter", **self.model_dump(mode="json", by_alias=True)}
        out["key"], out["key_b64"] = _text_or_b64(key)
        out["value_text"], out["value_b64"] = _text_or_b64(value)
        out["value_bytes"] = None if value is None else len(value)
        return out


def _text_or_b64(raw: bytes | None) -> tuple[str | None, str | None]:
    if raw is None:
        return None, None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(raw).decode()
