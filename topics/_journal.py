"""The conversation and the journal (docs/agents.md): a job's messages, who
answered, and the journal's records of model, tool and handler calls, runs,
flows, interrupts and mail.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from topics._keys import Contact
from topics._messages import InboxEvent, TopicRecord
from topics._vocab import Source

__all__ = [
    "APPROVERS_DEFAULT",
    "Answerer",
    "Approver",
    "JournalFlow",
    "JournalHandlerCall",
    "JournalInterrupt",
    "JournalMail",
    "JournalModelCall",
    "JournalRecord",
    "JournalRun",
    "JournalToolCall",
    "JournalWorktree",
    "MessageRecord",
    "ShownField",
    "Tokens",
    "inbound_message",
]


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
    contact: Contact | None = None  # topics/_keys.py: the key rule
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


class MessageRecord(TopicRecord):
    """One message of a job's conversation (messages topic). ``message_id`` is
    derived from our own data, so a re-run writes the same id again."""

    type: Literal["message"] = "message"
    job_key: str
    message_id: str
    direction: Literal["in", "out"]
    channel: str
    agent: str | None = None
    contact: Contact | None = None  # topics/_keys.py: the key rule
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


class JournalModelCall(TopicRecord):
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
    outcome: Literal["ok", "status", "transport", "garbage", "too_large"]
    #: A call a flow's llm node made (docs/flows.md): the flow and the node id.
    flow: str | None = None
    node: str | None = None


class JournalToolCall(TopicRecord):
    """One tool call (or delegation): the tool, its arguments (opening), the
    outcome, our idempotency key, the endpoint or command (redacted) and how long."""

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
    #: A command tool's call (docs/agents.md, "Command tools"): its argv, the
    #: values read from the environment as ``***``; its exit code and the
    #: SHA-256 of its whole output.
    command: str | None = None
    exit_code: int | None = None
    output_sha256: str | None = None


class JournalHandlerCall(TopicRecord):
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


class JournalRun(TopicRecord):
    """A run ended: why (``done``, a bound such as ``max_turns``, ``task_closed``,
    ``model_error``, ``error``: docs/agents.md, "Bounds"), and what it used."""

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


class JournalFlow(TopicRecord):
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


class JournalInterrupt(TopicRecord):
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
    #: For asks: ``file`` when the answer is a file value (an upload's,
    #: docs/flows.md "File channels") of a media type ``accept`` allows.
    expects: Literal["text", "file"] = "text"
    accept: str | None = None


class JournalMail(TopicRecord):
    """One email of the email channel: sent (``out``), received or refused
    (``in``). ``outcome``: ``sent``, ``failed`` (the server refused it for good),
    ``received`` (a reply, written as a message), ``bounced`` (an
    ``email_bounced`` event), ``refused`` (in: an unsigned, tampered, expired or
    wrong-kind reply address, SMTP 550 at RCPT; out: a message to an address
    that is not a contact of the job, not published; nothing written either
    way), ``unverified`` (a reply whose sender is not the contact its reply
    address was issued to: not taken, nothing written), ``automatic`` (an
    auto-reply, a list's mail or a report at a reply address: taken, nothing
    written, no run; ``detail`` says why)."""

    type: Literal["journal.mail"] = "journal.mail"
    job_key: str
    at: str
    direction: Literal["in", "out"]
    outcome: Literal["sent", "failed", "received", "bounced", "refused", "unverified", "automatic"]
    message_id: str | None = None
    #: The address the mail went to (out) or came from (in).
    address: str | None = None
    #: ``unverified``: the contact the reply address was issued to.
    contact: str | None = None
    detail: str = ""


class JournalWorktree(TopicRecord):
    """A coding job's worktree while the job waits at a checkpoint
    (docs/coding.md, "A changed worktree: the 409"), as the agents service
    that holds it sees it: ``same`` (as the checkpoint's fingerprint
    ``expected`` says: the watch begins, or the files came back), ``changed``
    (its files changed: ``found`` is the fingerprint now, and the gateway
    answers an answer to the run's open question 409 ``worktree_changed``),
    ``moved`` (git moved its HEAD or branch: an answer is taken, and fails the
    job) or ``ended`` (an answer was taken: the watch is over)."""

    type: Literal["journal.worktree"] = "journal.worktree"
    job_key: str
    run_id: str
    #: The watch: one per checkpoint the job waits at (the ``pause`` call's id).
    #: A record said after its watch ``ended`` is stale.
    watch: str
    at: str
    status: Literal["same", "changed", "moved", "ended"]
    expected: dict[str, str] = Field(default_factory=dict)
    found: dict[str, str] | None = None
    why: str = ""


JournalRecord = Annotated[
    JournalModelCall
    | JournalToolCall
    | JournalHandlerCall
    | JournalRun
    | JournalFlow
    | JournalInterrupt
    | JournalMail
    | JournalWorktree,
    Field(discriminator="type"),
]
