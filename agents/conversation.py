"""A job's conversation (docs/agents.md, "Runs"): what the agents service
keeps per job, the open tasks in frontier order, the subject and contacts, the
turns so far, and the bookkeeping that makes a run owed once per frontier
change and tool calls take effect once. agents/run.py runs the agent on it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from compiler import to_iso
from topics import Answerer, MessageRecord, TaskClosedRecord, TaskOpenedRecord

from agents.compose import OpenTask, Turn
from agents.contacts import approves, same_contact
from agents.flows.service import Flows, FlowTrack, answer_input, answer_of

__all__ = [
    "EXCERPT",
    "KEPT_TURNS",
    "Conversation",
    "answerer",
    "excerpt",
    "take_answer",
]

log = logging.getLogger(__name__)

#: Turns a conversation keeps (the model is sent the last ``history`` of them).
KEPT_TURNS = 200
#: How much of a long text the journal and the agent events keep.
EXCERPT = 500


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """The opening of ``text``, marked when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Conversation:
    """One job's conversation state (kept in the agents' table, as JSON)."""

    job_key: str
    playbook_key: str = ""
    playbook_instructions: str = ""
    subject: dict[str, Any] = field(default_factory=dict)
    contacts: list[Any] = field(default_factory=list)
    #: Open tasks by milestone; ``frontier`` orders them (next best first).
    tasks: dict[str, OpenTask] = field(default_factory=dict)
    frontier: list[str] = field(default_factory=list)
    #: Tasks closed (at most one per milestone of the playbook).
    closed: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    #: Completed tool calls per identity (task, tool, canonical arguments): the
    #: next such call is occurrence count + 1.
    done_calls: dict[str, int] = field(default_factory=dict)
    #: Derived keys of non-idempotent calls requested and not finished.
    pending: dict[str, str] = field(default_factory=dict)
    runs: int = 0
    #: The run in progress (its id) and its steps so far, in order: each model
    #: reply and each tool result, checkpointed as it completes. A run cut short
    #: resumes under the same id and replays these instead of paying again.
    active: str | None = None
    tape: list[dict[str, Any]] = field(default_factory=list)
    #: The partition of ``tasks`` (and of the changelog) the job's records are on.
    partition: int | None = None
    #: Inputs that owe a run (tasks opened, messages from people) so far, and how
    #: many of them the last finished run had seen (when it last composed): a
    #: run is owed while ``inputs > ran`` (an input that arrives after a run's
    #: last compose owes another; one before it was folded into that turn).
    inputs: int = 0
    ran: int = 0
    #: How each closed task's milestone ended (``done``, ``dropped``, ...), for
    #: the closing turn's evidence.
    outcomes: dict[str, str] = field(default_factory=dict)
    #: The last message the agent sent (its id and a digest of its text, contact,
    #: channel and frontier): the same message again is withheld, not sent.
    last_sent: list[str] = field(default_factory=list)
    #: Ids of the people's messages taken (the newest), so a re-delivery is not a
    #: second message.
    received: list[str] = field(default_factory=list)
    #: The channel the person last wrote on (the agent answers there).
    last_channel: str | None = None
    #: A closing turn is owed: the tasks closed while the person's latest turn
    #: was unanswered (docs/agents.md, "The closing turn").
    closing: bool = False
    #: Flow runs by milestone (a milestone whose playbook names a flow is run by
    #: it, not by the conversation agent: agents/flows/service.py), and how many
    #: were opened (run ids count them).
    flows: dict[str, FlowTrack] = field(default_factory=dict)
    flow_runs: int = 0
    #: By flow name, the values of its ``remembers`` channels when its last run
    #: finished or failed: the next run of that flow for this job starts with them.
    remembered: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Turns forgotten (beyond ``KEPT_TURNS``, or dropped for the checkpoint's
    #: bound), so a kept turn's number in the whole conversation is known; and
    #: the turns the rolling summary covers, counted from the first
    #: (docs/memory.md, "Summaries are claims").
    forgotten: int = 0
    summarized: int = 0

    @property
    def due(self) -> bool:
        """A run is owed: an input that no run's compose had seen, a task is
        still open, and no task of the newest frontier is still to open (the
        tasks one decision opens start one run, composed over them all)."""
        return self.inputs > self.ran and bool(self.tasks) and not self.waiting()

    def waiting(self) -> list[str]:
        """Milestones of the newest frontier whose ``task.opened`` has not come
        yet (neither a flow's nor closed): the decision's records are still
        arriving."""
        closed = set(self.outcomes) | {t.rpartition("/")[2] for t in self.closed}
        known = closed | set(self.tasks) | set(self.flows)
        return [m for m in self.frontier if m not in known]

    @property
    def unanswered(self) -> bool:
        """The conversation's latest turn is not the agent's: a person's message
        or a tool result the person has not been told of."""
        return bool(self.turns) and self.turns[-1].role != "agent"

    @property
    def flow_due(self) -> bool:
        """A flow run has work waiting (its start, an action, an answer or tick)."""
        return any(t.owed for t in self.flows.values())

    def owed_flow(self) -> FlowTrack | None:
        """The first flow run with work waiting."""
        return next((t for t in self.flows.values() if t.owed), None)

    def open_flow(self, record: TaskOpenedRecord, flow: str, inputs: dict[str, Any]) -> bool:
        """Take a task.opened whose milestone names ``flow``: a flow run, owed
        now; False for a re-delivery. The job's details are taken as
        :meth:`apply` takes them; the task is not the conversation agent's."""
        if record.milestone in self.flows or record.task_id in self.closed:
            return False
        self._take_job(record)
        self.flow_runs += 1
        run_id = f"{record.task_id}#{self.flow_runs}"
        self.flows[record.milestone] = FlowTrack(
            record.milestone, record.task_id, flow, run_id, inputs=inputs
        )
        return True

    def waiting_flow(self, interrupt_id: str | None = None) -> FlowTrack | None:
        """The flow run whose open interrupt is ``interrupt_id`` (any open one
        when None): what a person's answer goes to."""
        for track in self.flows.values():
            found = track.open_interrupt()
            if found is not None and (interrupt_id is None or found == interrupt_id):
                return track
        return None

    def apply(self, record: TaskOpenedRecord | TaskClosedRecord) -> bool:
        """Take a task record; True when it owes a run (a task newly opened)."""
        if isinstance(record, TaskOpenedRecord):
            if record.milestone in self.tasks or record.task_id in self.closed:
                # Re-delivered (a milestone opens once per job): the run it owed
                # is owed already or done, and its frontier is an old one.
                return False
            self._take_job(record)
            self.tasks[record.milestone] = OpenTask(
                record.task_id,
                record.milestone,
                record.instructions,
                record.deadline,
                tuple(record.integrations),
            )
            self.inputs += 1
            return True
        if record.task_id in self.closed:
            return False  # re-delivered
        self.closed.append(record.task_id)
        self.outcomes[record.milestone] = str(record.outcome)
        self.tasks.pop(record.milestone, None)
        self.frontier = [m for m in self.frontier if m != record.milestone]
        if not self.tasks and not self.flows_open() and self.spoken():
            # The job's last task closed: a change the person is told of, once
            # (docs/agents.md, "The closing turn").
            self.closing = True
        return self.closing

    def _take_job(self, record: TaskOpenedRecord) -> None:
        """What a task.opened says of the job: its playbook, subject, contacts, frontier."""
        self.playbook_key = record.playbook_key
        self.playbook_instructions = record.playbook_instructions
        self.subject = dict(record.subject)
        self.contacts = list(record.contacts)
        self.frontier = list(record.frontier)

    def receive(self, record: MessageRecord) -> bool:
        """Take a person's message (``direction: in``); True when it owes a run
        (a task is open to work on). A re-delivered message is not taken again."""
        if record.direction != "in" or record.message_id in self.received:
            return False
        self.received.append(record.message_id)
        del self.received[:-KEPT_TURNS]
        self.last_channel = record.channel
        self.add_turn(Turn("person", record.text, record.contact))
        self.inputs += 1
        if not self.tasks and self.closed and not self.waiting() and not self.flows_open():
            self.closing = True  # the job's work is over: still, an answer
        return bool(self.tasks) or self.closing

    def spoken(self) -> bool:
        """A person has written in this job (among the turns kept)."""
        return any(t.role == "person" for t in self.turns)

    def flows_open(self) -> bool:
        """A flow's task is still open (its run may ask the person)."""
        closed = {t.rpartition("/")[2] for t in self.closed}
        return any(m not in closed for m in self.flows)

    def open_tasks(self) -> list[OpenTask]:
        """Open tasks, next best step first."""
        ranked = [self.tasks[m] for m in self.frontier if m in self.tasks]
        return ranked + [t for m, t in self.tasks.items() if m not in self.frontier]

    def add_turn(self, turn: Turn) -> None:
        """Remember a turn (the oldest beyond ``KEPT_TURNS`` are forgotten)."""
        self.turns.append(turn)
        self.forget(len(self.turns) - KEPT_TURNS)

    def forget(self, oldest: int) -> None:
        """Forget the ``oldest`` turns (none when it is not positive), counted."""
        if oldest > 0:
            del self.turns[:oldest]
            self.forgotten += oldest

    def add_reply(self, text: str, composed_over: Turn | None) -> None:
        """The agent's reply to a request composed when ``composed_over`` was the
        latest turn: it goes right after that turn, so a person's message that
        came in while the model was answering stays after the reply, still
        unanswered, and the run it owes sees it last (docs/agents.md, "Runs")."""
        turn = Turn("agent", text)
        if composed_over is None:
            self.turns.insert(0, turn)
        else:
            at = next(
                (i for i in range(len(self.turns) - 1, -1, -1) if self.turns[i] is composed_over),
                None,
            )
            if at is None:  # forgotten meanwhile: only a flood of turns does that
                self.turns.append(turn)
            else:
                self.turns.insert(at + 1, turn)
        self.forget(len(self.turns) - KEPT_TURNS)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "job_key": self.job_key,
            "playbook_key": self.playbook_key,
            "playbook_instructions": self.playbook_instructions,
            "subject": self.subject,
            "contacts": self.contacts,
            "tasks": [
                [t.task_id, t.milestone, t.instructions, t.deadline, list(t.integrations)]
                for t in self.tasks.values()
            ],
            "frontier": self.frontier,
            "closed": self.closed,
            "turns": [[t.role, t.text, t.name] for t in self.turns],
            "done_calls": self.done_calls,
            "pending": self.pending,
            "runs": self.runs,
            "inputs": self.inputs,
            "received": self.received,
            "last_channel": self.last_channel,
            "closing": self.closing,
            "ran": self.ran,
            "outcomes": self.outcomes,
            "last_sent": self.last_sent,
            "active": self.active,
            "tape": self.tape,
            "partition": self.partition,
            "due": self.due or self.closing,
            "flows": {m: t.to_json() for m, t in self.flows.items()},
            "flow_runs": self.flow_runs,
            "remembered": self.remembered,
            "forgotten": self.forgotten,
            "summarized": self.summarized,
            "flow_due": self.flow_due,
            "flow_expires": _earliest(self.flows.values()),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Conversation:
        """The inverse of :meth:`to_json`."""
        tasks = [OpenTask(a, b, c, d, tuple(e)) for a, b, c, d, e in data.get("tasks", [])]
        return cls(
            job_key=data["job_key"],
            playbook_key=data.get("playbook_key", ""),
            playbook_instructions=data.get("playbook_instructions", ""),
            subject=dict(data.get("subject") or {}),
            contacts=list(data.get("contacts") or []),
            tasks={t.milestone: t for t in tasks},
            frontier=list(data.get("frontier") or []),
            closed=list(data.get("closed") or []),
            turns=[Turn(r, t, n) for r, t, n in data.get("turns", [])],
            done_calls=dict(data.get("done_calls") or {}),
            pending=dict(data.get("pending") or {}),
            runs=int(data.get("runs", 0)),
            inputs=int(data.get("inputs", 0)),
            received=list(data.get("received") or []),
            last_channel=data.get("last_channel"),
            closing=bool(data.get("closing", False)),
            ran=int(data.get("ran", 0)),
            outcomes={str(m): str(o) for m, o in (data.get("outcomes") or {}).items()},
            last_sent=[str(x) for x in data.get("last_sent") or []],
            active=data.get("active"),
            tape=list(data.get("tape") or []),
            partition=data.get("partition"),
            flows={m: FlowTrack.from_json(t) for m, t in (data.get("flows") or {}).items()},
            flow_runs=int(data.get("flow_runs", 0)),
            remembered={str(f): dict(v or {}) for f, v in (data.get("remembered") or {}).items()},
            forgotten=int(data.get("forgotten", 0)),
            summarized=int(data.get("summarized", 0)),
        )


def _earliest(tracks: Any) -> str | None:
    """When the soonest open interrupt of these flow runs expires (ISO), if any."""
    times = [t.expires_at() for t in tracks if t.open_interrupt() is not None]
    found = [t for t in times if t is not None]
    return to_iso(min(found)) if found else None


# -- a person's answer to a flow's open question (docs/api.md, "Approvals") --


def take_answer(conv: Conversation, record: MessageRecord, flows: Flows) -> bool | None:
    """A person's message that answers a flow's open question (the one it
    names, else any open one): queued on the flow run, consumed once. An
    answer to an interrupt not open (stale, answered) changes nothing. None
    for a message that answers nothing (the conversation agent's to take)."""
    if record.interrupt_id is None and conv.waiting_flow() is None:
        return None
    track = conv.waiting_flow(record.interrupt_id)
    by = answerer(conv, track, record, flows)
    if by is None and record.interrupt_id is None:
        return None  # not theirs to answer: a message for the conversation agent
    conv.received.append(record.message_id)
    del conv.received[:-200]
    if track is None or by is None:
        log.info("agents: %s: an answer to %s, not open or not theirs: ignored",
                 conv.job_key, record.interrupt_id)  # fmt: skip
        return False
    interrupt = track.open_interrupt()
    assert interrupt is not None
    if any(q.get("interrupt_id") == interrupt for q in track.queued):
        return False  # answered already (queued): consumed once
    conv.last_channel = record.channel
    track.answered_by = by.model_dump(mode="json")
    track.queued.append(answer_input(interrupt, answer_of(record)))
    return True


def answerer(
    conv: Conversation, track: FlowTrack | None, record: MessageRecord, flows: Flows
) -> Answerer | None:
    """Who answers ``track``'s open interrupt with ``record``, or None when
    they may not (docs/api.md, "Approvals"). Through the API (``by``, as the
    gateway verified the token): a ``world`` token answers a question, an
    approver's an approval its approvers let operators answer. On a channel:
    a question only from the contact it was asked of (from anyone who writes
    when it was asked of no one), an approval only from a contact its
    approvers name."""
    interrupt = track.interrupt() if track is not None else None
    if track is None or interrupt is None:
        return None
    approval = interrupt.get("kind") == "approval"
    approvers = flows.approvers_of(track.flow, str(interrupt.get("node")))
    if record.interrupt_id is not None:
        by = record.by
        if by is None or by.source != "world":
            return None
        if approval and not (by.approver and "operators" in approvers):
            return None
        return by
    if approval:
        allowed = approves(approvers, record.contact, conv.contacts)
    else:
        # asked of no one (the job has no contacts): any person's message
        allowed = track.asked_of is None or same_contact(
            conv.contacts, record.contact, track.asked_of
        )
    if not allowed:
        return None
    return Answerer(contact=record.contact, channel=record.channel)
