"""Flows in the agents service (docs/flows.md, "Flows in the agents service").

A task whose milestone names a flow is run by the flow, not by the free
conversation agent. Its run is a :class:`FlowTrack` in the job's
:class:`~agents.run.Conversation` (so on the ``conversations`` changelog): the
:class:`~compiler.FlowState`, the actions still to carry out, the inputs
received and not yet stepped (answers, ticks), and every input stepped so far.
:class:`FlowDriver` carries the actions out one at a time through the flow
executor and feeds each result back to the pure step function; after every step
the conversation is checkpointed (acknowledged) before the next action, so a
resume re-runs no completed node: an action cut short is carried out again
under the same call id (a tool absorbs it by its idempotency key).

``ask`` and ``approval`` suspend the run: the interrupt is in the state, its
question goes to the person on the job's channel (a ``messages`` record,
``direction: out``, with the interrupt id) and a ``journal.interrupt``
(``open``) tells the gateway it may be answered. The answer (``POST
/v1/jobs/{key}/answers``, or the person's next message on the channel) is
queued on the track and consumed once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from compiler import (
    Action,
    Answer,
    ApprovalNode,
    Ask,
    AwaitApproval,
    Fail,
    Finish,
    Flow,
    FlowError,
    FlowInput,
    FlowRun,
    FlowStart,
    FlowState,
    FlowTick,
    Interrupt,
    LemongraphError,
    action_from_json,
    check_flow,
    fields_text,
    flow_input_from_json,
    from_iso,
    load_flow,
    readable,
    shown_fields,
    to_iso,
)
from pydantic import BaseModel
from stream.runtime.files import load_playbooks_dir
from topics import (
    APPROVERS_DEFAULT,
    Answerer,
    JournalFlow,
    JournalInterrupt,
    MessageRecord,
    ShownField,
)

from agents.catalog import Catalog
from agents.compose import Turn
from agents.contacts import addressee, approves
from agents.flows.files import (
    approval_bypasses,
    approval_guards,
    find_flow,
    flow_tools,
    milestone_context,
)

__all__ = [
    "Execute",
    "FlowDriver",
    "FlowTrack",
    "Flows",
    "answer_of",
    "load_flows",
    "remembering",
]

log = logging.getLogger(__name__)

#: Inputs a track keeps in its record of what was stepped (the oldest go first).
KEPT_INPUTS = 1000
#: Turns of the conversation a flow run starts with (its ``conversation`` channel).
CONVERSATION_TURNS = 20

Publish = Callable[[Literal["inbox", "messages", "journal"], str, BaseModel], Awaitable[None]]


class Execute(Protocol):
    """Carries out one call action of a flow (``FlowExecutor.execute``): its result."""

    def __call__(
        self, action: Action, *, job_key: str, flow: str, run_id: str
    ) -> Awaitable[FlowInput]: ...


def _dump(value: BaseModel) -> dict[str, Any]:
    data: dict[str, Any] = value.model_dump(mode="json", by_alias=True)
    return data


@dataclass
class FlowTrack:
    """One flow run of one milestone's task, as the conversation keeps it."""

    milestone: str
    task_id: str
    flow: str
    #: ``{task_id}#{n}``, n counting the flow runs of the conversation: from our
    #: own data, so call and interrupt ids (docs/flows.md, "Ids") are too.
    run_id: str
    #: The flow's inputs, from the job's subject (its ``inputs`` channels).
    inputs: dict[str, Any] = field(default_factory=dict)
    #: The FlowState (JSON); None until the run started.
    state: dict[str, Any] | None = None
    #: Actions returned by a step and not yet carried out, in order.
    actions: list[dict[str, Any]] = field(default_factory=list)
    #: Inputs received (answers, ticks) and not yet stepped.
    queued: list[dict[str, Any]] = field(default_factory=list)
    #: Every input stepped, in order (the recorded results a replay reads).
    stepped: list[dict[str, Any]] = field(default_factory=list)
    #: The time (ISO) each of ``stepped`` was stepped at: the ``now`` a replay passes.
    stepped_at: list[str] = field(default_factory=list)
    #: How many nodes of the state's trail are journaled (``journal.flow`` node),
    #: whether ``started`` is, and the last one's ``at`` (see ``_journal_nodes``).
    journaled: int = 0
    journaled_start: bool = False
    journaled_at: str | None = None
    #: The interrupt whose question was sent and journaled ``open``.
    asked: str | None = None
    #: Interrupts closed (answered, expired, cancelled): a later answer is ignored.
    closed: list[str] = field(default_factory=list)
    status: Literal["running", "waiting", "finished", "failed", "stopped"] = "running"
    #: Questions asked again under an id that had closed (a retried ``ask``).
    reasked: int = 0
    #: The contact the open question went to (None: to nobody on a channel, an
    #: approval the operators answer): only they answer it on their channel.
    asked_of: str | None = None
    #: Who gave the answer queued or stepped last (an Answerer's JSON), for the
    #: ``answered`` journal record.
    answered_by: dict[str, Any] | None = None
    #: Held while the run is stepped, journaled or ended (never while a call is
    #: out): a ``task.closed`` read meanwhile (:meth:`FlowDriver.stop`, from the
    #: service's consumer) waits for the step in hand instead of journaling its
    #: nodes and its end beside it. In memory only.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def active(self) -> bool:
        return self.status in ("running", "waiting")

    @property
    def owed(self) -> bool:
        """Work is waiting: the start, an action, or an input to step."""
        return self.active and (self.state is None or bool(self.actions) or bool(self.queued))

    def flow_state(self) -> FlowState | None:
        return FlowState.model_validate(self.state) if self.state is not None else None

    def interrupt(self) -> dict[str, Any] | None:
        """The interrupt the run waits on (JSON), if any."""
        if self.state is None or not self.active:
            return None
        found = self.state.get("interrupt")
        return found if isinstance(found, dict) else None

    def open_interrupt(self) -> str | None:
        """The id of the interrupt that may be answered now (asked, not closed)."""
        found = self.interrupt()
        if found is None or found.get("interrupt_id") != self.asked:
            return None
        return self.asked if self.asked not in self.closed else None

    def expires_at(self) -> datetime | None:
        found = self.interrupt()
        if found is None or not found.get("expires_at"):
            return None
        return datetime.fromisoformat(str(found["expires_at"]).replace("Z", "+00:00"))

    def to_json(self) -> dict[str, Any]:
        return {
            "milestone": self.milestone,
            "task_id": self.task_id,
            "flow": self.flow,
            "run_id": self.run_id,
            "inputs": self.inputs,
            "state": self.state,
            "actions": self.actions,
            "queued": self.queued,
            "stepped": self.stepped,
            "stepped_at": self.stepped_at,
            "journaled": self.journaled,
            "journaled_start": self.journaled_start,
            "journaled_at": self.journaled_at,
            "asked": self.asked,
            "closed": self.closed,
            "status": self.status,
            "reasked": self.reasked,
            "asked_of": self.asked_of,
            "answered_by": self.answered_by,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlowTrack:
        return cls(
            milestone=str(data["milestone"]),
            task_id=str(data["task_id"]),
            flow=str(data["flow"]),
            run_id=str(data["run_id"]),
            inputs=dict(data.get("inputs") or {}),
            state=data.get("state"),
            actions=list(data.get("actions") or []),
            queued=list(data.get("queued") or []),
            stepped=list(data.get("stepped") or []),
            stepped_at=[str(t) for t in data.get("stepped_at") or []],
            journaled=int(data.get("journaled", 0)),
            # A checkpoint from before the key wrote its start before saving.
            journaled_start=bool(data.get("journaled_start", True)),
            journaled_at=data.get("journaled_at"),
            asked=data.get("asked"),
            closed=list(data.get("closed") or []),
            status=data.get("status", "running"),
            reasked=int(data.get("reasked", 0)),
            asked_of=data.get("asked_of"),
            answered_by=data.get("answered_by"),
        )


@dataclass
class Flows:
    """The flows the service runs: by name, and the flow each (playbook,
    milestone) names."""

    by_name: dict[str, Flow] = field(default_factory=dict)
    by_milestone: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Who answers an approval whose node names no ``approvers`` (the catalog's).
    approvers: tuple[str, ...] = APPROVERS_DEFAULT
    #: Milestones whose flow is not run, with the flow as far as it could be
    #: compiled: it does not load with the catalog and the milestone, or it walks
    #: around another flow's approval (APPROVAL_BYPASS). What it guards stays
    #: guarded (its milestone is worked by the conversation agent).
    refused: dict[tuple[str, str], Flow] = field(default_factory=dict)

    def of(self, playbook_key: str, milestone: str) -> str | None:
        return self.by_milestone.get((playbook_key, milestone))

    def descriptions(self, name: str) -> dict[str, str]:
        """The ``description`` of each of flow ``name``'s channels that has one:
        the labels of what it shows a person."""
        flow = self.by_name.get(name)
        channels = flow.channels if flow is not None else {}
        return {k: c.description for k, c in channels.items() if c.description}

    def approvers_of(self, name: str, node: str) -> tuple[str, ...]:
        """Who may answer the approval ``node`` of flow ``name`` (docs/flows.md,
        "Who approves"): the node's ``approvers``, else the catalog's."""
        flow = self.by_name.get(name)
        nodes = flow.spec.nodes if flow is not None else ()
        for n in nodes:
            if n.id == node and isinstance(n, ApprovalNode) and n.approvers:
                return tuple(n.approvers)
        return self.approvers

    def guarded(self, playbook_key: str) -> dict[str, frozenset[str]]:
        """By tool, the flows of the playbook's milestones that guard it with an
        approval: only they call it; no agent is offered it (docs/flows.md, "An
        approval cannot be walked around")."""
        flows = [
            self.by_name[name]
            for (playbook, _), name in self.by_milestone.items()
            if playbook == playbook_key and name in self.by_name
        ]
        flows += [f for (playbook, _), f in self.refused.items() if playbook == playbook_key]
        return approval_guards(flows)

    def inputs(
        self,
        name: str,
        subject: Mapping[str, Any],
        turns: Sequence[Any] = (),
        remembered: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The values the flow's last run for the job left in the channels that
        ``remembers`` (those that still do), the flow's ``inputs`` channels the
        job's subject has, and the conversation so far (its last
        ``CONVERSATION_TURNS`` turns, as ``{role, text, name?}``) as the
        built-in ``conversation`` channel."""
        flow = self.by_name.get(name)
        if flow is None:
            return {}
        found = {k: v for k, v in (remembered or {}).items() if k in remembering(flow)}
        found.update({k: subject[k] for k in flow.spec.inputs if k in subject})
        found["conversation"] = [
            {"role": t.role, "text": t.text, **({"name": t.name} if t.name else {})}
            for t in turns[-CONVERSATION_TURNS:]
        ]
        return found


def remembering(flow: Flow) -> set[str]:
    """The flow's channels that ``remembers``."""
    return {k for k, v in flow.spec.state.items() if v.remembers}


def load_flows(folder: Path, catalog: Catalog | None, say: Callable[[str], None]) -> Flows:
    """The flows the playbooks of ``folder`` name (``flows/NAME.yaml``), each
    compiled with its milestone's tools. A playbook or flow that does not load
    is said and skipped (`lemongraph check` names its problems); its milestone
    is then worked by the conversation agent."""
    found = Flows(approvers=catalog.approvers if catalog is not None else APPROVERS_DEFAULT)
    if not folder.is_dir():
        return found
    playbooks = load_playbooks_dir(folder)
    tools = flow_tools(catalog) if catalog is not None else None
    for playbook in playbooks.by_key.values():
        for milestone in playbook.milestones:
            name = getattr(milestone, "flow", None)
            if not name:
                continue
            path = find_flow(folder, name)
            if path is None:
                say(f"agents: flow {name!r} of {playbook.key}/{milestone.id}: no flows/{name}.yaml")
                continue
            if name not in found.by_name:
                try:
                    found.by_name[name] = load_flow(
                        path.read_text(encoding="utf-8"),
                        str(path),
                        name,
                        tools=tools,
                        milestone=milestone_context(catalog, playbook, milestone.id),
                    )
                except (FlowError, LemongraphError, OSError, UnicodeDecodeError) as exc:
                    say(f"agents: flow {path} does not load: {exc}")
                    unchecked = _unchecked(path, name)
                    if unchecked is not None:
                        found.refused[(playbook.key, milestone.id)] = unchecked
                    continue
            found.by_milestone[(playbook.key, milestone.id)] = name
        # A flow that calls a tool another flow of the playbook guards, with no
        # approval of its own, is not run (`lemongraph check`: APPROVAL_BYPASS).
        flows = {m: f for (key, m), f in found.refused.items() if key == playbook.key}
        flows.update(
            (m, found.by_name[name]) for (key, m), name in found.by_milestone.items()
            if key == playbook.key
        )  # fmt: skip
        for bypass in approval_bypasses(playbook, flows, None):
            where = (playbook.key, bypass.milestone)
            if where in found.by_milestone:
                name = found.by_milestone.pop(where)
                found.refused[where] = found.by_name[name]
                say(f"agents: flow {name!r} of {'/'.join(where)} is not run: {bypass.message}")
    return found


def _unchecked(path: Path, name: str) -> Flow | None:
    """The flow compiled without the catalog and its milestone (so that what
    it guards is known), or None when even that fails."""
    try:
        return check_flow(path.read_text(encoding="utf-8"), str(path), name).flow
    except (OSError, UnicodeDecodeError):
        return None


def answer_of(record: MessageRecord) -> Any:
    """What a person's message answers: the answer as given to the API, else its text."""
    return record.answer if record.answer is not None else record.text


class FlowDriver:
    """Carries a flow run's actions out and steps it, checkpointing after each
    step (``save``, acknowledged) and journaling what happened."""

    def __init__(
        self,
        flows: Flows,
        execute: Execute | None,
        publish: Publish,
        save: Callable[[Any], Awaitable[None]],
        *,
        clock: Callable[[], datetime] | None = None,
        channel: str = "web",
    ) -> None:
        self.flows = flows
        self.execute = execute
        self.publish = publish
        self.save = save
        self.clock = clock or (lambda: datetime.now(UTC))
        self.channel = channel

    async def drive(self, conv: Any, track: FlowTrack) -> None:
        """Work the track until it waits (an interrupt, nothing queued) or ends."""
        async with track.lock:
            flow = self.flows.by_name.get(track.flow)
            if flow is None:
                await self._end(conv, track, "failed", error=f"flow {track.flow!r} is not loaded")
                return
            step = FlowRun(flow)
            if track.state is None and track.active:
                now = self.clock()
                state, actions = step.start(track.run_id, track.inputs, now)
                self._record(track, FlowStart(run_id=track.run_id, inputs=track.inputs), now)
                track.state = _dump(state)
                track.actions = [_dump(a) for a in actions]
                await self.save(conv)  # its started record is journaled with its nodes
        while True:
            async with track.lock:
                call = await self._advance(conv, track, step)
            if call is None:
                return
            # The call is out without the lock: the task may close meanwhile.
            assert self.execute is not None  # (a run without one failed in _advance)
            result = await self.execute(
                call, job_key=conv.job_key, flow=track.flow, run_id=track.run_id
            )
            async with track.lock:
                if _ended(track):
                    return  # the task closed meanwhile
                track.actions.pop(0)
                await self._step(conv, track, step, result)

    async def _advance(self, conv: Any, track: FlowTrack, step: FlowRun) -> Action | None:
        """With the lock: journal, ask, end and step what needs no call, until the
        run waits or ends (None) or its next action is a call (returned, still
        first of its actions)."""
        while track.active:
            await self._journal_nodes(conv, track)
            if track.actions:
                action = action_from_json(track.actions[0])
                if isinstance(action, Ask | AwaitApproval):
                    await self._ask(conv, track, action)
                    track.actions.pop(0)
                    track.status = "waiting"
                    await self.save(conv)
                    continue
                if isinstance(action, Finish | Fail):
                    await self._conclude(conv, track, action)
                    return None
                if self.execute is None:
                    await self._end(conv, track, "failed", error="no flow executor")
                    return None
                return action
            if track.queued:
                given = flow_input_from_json(track.queued.pop(0))
                if isinstance(given, Answer) and given.interrupt_id in track.closed:
                    await self.save(conv)  # consumed once: a second answer changes nothing
                    continue
                await self._step(conv, track, step, given)
                continue
            return None
        return None

    async def _conclude(self, conv: Any, track: FlowTrack, action: Finish | Fail) -> None:
        """The run's own end, as its step function said."""
        if isinstance(action, Finish):
            await self._end(conv, track, "finished", outputs=action.outputs)
        else:
            await self._end(conv, track, "failed", node=action.node, error=action.error)

    async def _step(self, conv: Any, track: FlowTrack, step: FlowRun, given: FlowInput) -> None:
        """Feed ``given`` to the step function; checkpoint; then say which
        interrupt it closed."""
        before = track.open_interrupt()
        state = track.flow_state()
        assert state is not None
        now = self.clock()
        try:
            after, actions = step.next(state, given, now)
        except ValueError as exc:
            # The flow changed since the run started (its digest): a run is only
            # stepped by the flow it started on, so it ends here.
            await self._end(conv, track, "failed", error=str(exc))
            return
        self._record(track, given, now)
        track.state = _dump(after)
        track.actions.extend(_dump(a) for a in actions)
        track.status = "waiting" if after.status == "waiting" else "running"
        closed: str | None = None
        if before is not None:
            still = after.interrupt.interrupt_id if after.interrupt is not None else None
            if still != before:
                closed = before
                track.closed.append(before)
        await self.save(conv)
        if closed is not None:
            status: Literal["answered", "expired"] = (
                "answered" if isinstance(given, Answer) else "expired"
            )
            answer = given.answer if isinstance(given, Answer) else None
            await self._journal_interrupt(conv, track, state.interrupt, status, answer)

    def _record(self, track: FlowTrack, given: FlowInput, now: datetime) -> None:
        track.stepped.append(_dump(given))
        track.stepped_at.append(to_iso(now))
        del track.stepped[:-KEPT_INPUTS]
        del track.stepped_at[:-KEPT_INPUTS]

    async def _journal_nodes(self, conv: Any, track: FlowTrack) -> None:
        """``started`` (once) and a record per node completed since, then counted
        in a checkpoint; a crash before it writes the same records again (their
        ``at`` from the checkpoint: docs/flows.md, "Crash safety")."""
        trail = list((track.state or {}).get("trail") or [])
        at = track.journaled_at
        owed: list[tuple[Literal["started", "node"], str | None]] = [("started", None)]
        owed = owed[int(track.journaled_start) :] + [("node", n) for n in trail[track.journaled :]]
        if not owed:
            return
        for event, node in owed:
            at = self._after(track, at)
            record = self._flow_record(conv, track, event, node, at=at)
            await self.publish("journal", conv.job_key, record)
        track.journaled_start, track.journaled, track.journaled_at = True, len(trail), at
        await self.save(conv)

    def _after(self, track: FlowTrack, last: str | None) -> str:
        """The ``at`` of the run's next journal.flow record: its last step's
        time, or just after ``last`` (strictly increasing in the run)."""
        at = from_iso(track.stepped_at[-1]) if track.stepped_at else self.clock()
        before = from_iso(last) if last is not None else None
        return to_iso(at if before is None or at > before else before + timedelta(microseconds=1))

    async def _ask(self, conv: Any, track: FlowTrack, action: Ask | AwaitApproval) -> None:
        """Put the question to the person (once per interrupt) and journal it open."""
        again = action.interrupt_id in track.closed
        if track.asked == action.interrupt_id and not again:
            return  # asked already (a resume)
        if again:
            # A retry of the node asks again under the same id (the same visit).
            track.closed.remove(action.interrupt_id)
            track.reasked += 1
        contact = addressee(conv.contacts, conv.turns)
        approvers: tuple[str, ...] = ()
        if isinstance(action, Ask):
            question = action.question
            answers = list(action.answers)
            if answers:
                question += f" (answer {', '.join(answers)})"
            show: dict[str, Any] = {}
            shown: list[ShownField] = []
            text, asked_of, asking = _one_line(question), contact, True
        else:
            # An approval goes to its approvers (docs/flows.md, "Who approves"):
            # to the contact only when the contact is one; otherwise the contact
            # is told it waits for an approval, and the operators answer it in
            # the UI or through the API.
            approvers = self.flows.approvers_of(track.flow, action.node)
            question = action.question or f"May I go ahead with {action.before}?"
            question += " (answer yes or no)"
            answers = []
            show = dict(action.show)
            # What it shows, as a person reads it: never JSON (docs/flows.md,
            # "What a person reads").
            shown = shown_fields(show, self.flows.descriptions(track.flow))
            approving = approves(approvers, contact, conv.contacts)
            asked_of, asking = (contact if approving else None), approving
            if approving:
                text = _one_line(question) + (f"\n\n{fields_text(shown)}" if shown else "")
            else:
                text = _one_line(_WAITING.format(ask=action.question or ""))
        channel = self._channel(conv, contact)
        task = conv.tasks.get(track.milestone)
        await self.publish(
            "messages",
            conv.job_key,
            MessageRecord(
                job_key=conv.job_key,
                message_id=f"ask:{action.interrupt_id}"
                + (f".{track.reasked + 1}" if again else ""),
                direction="out",
                channel=channel,
                agent=f"flow:{track.flow}",
                contact=contact,
                task_id=task.task_id if task is not None else track.task_id,
                text=text,
                at=self._now(),
                # The note to a contact who does not approve answers nothing.
                interrupt_id=action.interrupt_id if asking else None,
            ),
        )
        track.asked = action.interrupt_id
        track.asked_of = asked_of
        await self._journal_interrupt(
            conv,
            track,
            Interrupt(
                interrupt_id=action.interrupt_id,
                node=action.node,
                kind="ask" if isinstance(action, Ask) else "approval",
                question=question,
                answers=tuple(answers),
                show=show,
                expires_at=action.expires_at,
            ),
            "open",
            approvers=approvers,
            shown=shown,
        )

    async def _journal_interrupt(
        self,
        conv: Any,
        track: FlowTrack,
        found: Interrupt | None,
        status: Literal["open", "answered", "expired", "cancelled"],
        answer: Any = None,
        approvers: Sequence[str] = (),
        shown: Sequence[ShownField] = (),
    ) -> None:
        """A ``journal.interrupt``: the question opened (with who may answer it)
        or closed (answered: by whom)."""
        if found is None:
            return
        expires = found.expires_at
        opening = status == "open"
        by = track.answered_by if status == "answered" else None
        await self.publish(
            "journal",
            conv.job_key,
            JournalInterrupt(
                job_key=conv.job_key,
                run_id=track.run_id,
                flow=track.flow,
                node=found.node,
                interrupt_id=found.interrupt_id,
                at=self._now(),
                kind=found.kind,
                status=status,
                question=found.question if status == "open" else "",
                answers=list(found.answers),
                expires_at=to_iso(expires) if expires is not None and status == "open" else None,
                show=dict(found.show) if status == "open" else {},
                shown=list(shown) if opening else [],
                answer=answer,
                approvers=list(approvers) if opening else [],
                asked_of=track.asked_of if opening else None,
                by=Answerer.model_validate(by) if by is not None else None,
            ),
        )

    async def stop(self, conv: Any, track: FlowTrack) -> None:
        """The task closed: the run stops where it is (an open question is
        cancelled). A run whose step function had already said it ends (its last
        node's result stepped, often the very result that closed the task) ends
        as it said, not cut short."""
        async with track.lock:
            if not track.active:
                return
            if track.actions:
                last = action_from_json(track.actions[0])
                if isinstance(last, Finish | Fail):
                    await self._conclude(conv, track, last)
                    return
            state = track.flow_state()
            open_one = track.open_interrupt()
            if open_one is not None:
                track.closed.append(open_one)
            await self._end(conv, track, "stopped")
            if open_one is not None and state is not None:
                await self._journal_interrupt(conv, track, state.interrupt, "cancelled")

    async def _end(
        self,
        conv: Any,
        track: FlowTrack,
        how: Literal["finished", "failed", "stopped"],
        *,
        node: str | None = None,
        outputs: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """The run's end, journaled, then checkpointed: a crash in between ends
        it again on the resume, with the same record. The milestone does not
        advance on it: only the evidence its tools recorded counts."""
        await self._journal_nodes(conv, track)
        if how == "finished":
            await self._reply(conv, track, outputs or {})
        at = self._after(track, track.journaled_at)
        record = self._flow_record(conv, track, how, node, outputs=outputs, error=error, at=at)
        await self.publish("journal", conv.job_key, record)
        track.status, track.journaled_at = how, at
        track.actions = []
        track.queued = []
        if how != "stopped":
            self._remember(conv, track)
        await self.save(conv)

    async def _reply(self, conv: Any, track: FlowTrack, outputs: Mapping[str, Any]) -> None:
        """The run finished: the output its flow names as the ``reply`` goes to
        the person on the job's channel, as its questions do (docs/flows.md, "A
        reply to the person"). Written before the end is checkpointed, under an
        id from the run's: a resume that ends the run again writes the same
        message, which a channel delivers once; nothing when it is empty."""
        flow = self.flows.by_name.get(track.flow)
        name = flow.spec.reply if flow is not None else None
        value = outputs.get(name) if name is not None else None
        if flow is None or name is None or value in (None, "", [], {}):
            return
        spec = flow.channels.get(name)
        text = readable(value, "" if isinstance(value, str) or spec is None else spec.description)
        if not text:
            return
        contact = addressee(conv.contacts, conv.turns)
        await self.publish(
            "messages",
            conv.job_key,
            MessageRecord(
                job_key=conv.job_key,
                message_id=f"reply:{track.run_id}",
                direction="out",
                channel=self._channel(conv, contact),
                agent=f"flow:{track.flow}",
                contact=contact,
                task_id=track.task_id,
                text=text,
                at=self._now(),
            ),
        )
        # What the person was told is a turn of the conversation (checkpointed
        # with the end), so that the agents composed after it know it.
        conv.add_turn(Turn("agent", text))

    def _channel(self, conv: Any, contact: str | None) -> str:
        """Where the person is written to: the channel they last wrote on, else
        email to an address, else the service's default."""
        found: str = conv.last_channel or ("email" if contact and "@" in contact else self.channel)
        return found

    def _remember(self, conv: Any, track: FlowTrack) -> None:
        """A run that finished or failed leaves its ``remembers`` channels'
        values to the next run of its flow for the job (a stopped run, cut
        short by its task closing, leaves what the run before it left)."""
        flow = self.flows.by_name.get(track.flow)
        channels = (track.state or {}).get("channels") or {}
        if flow is None or not hasattr(conv, "remembered"):
            return
        kept = {k: channels[k] for k in sorted(remembering(flow)) if k in channels}
        if kept:
            conv.remembered[track.flow] = kept

    def _flow_record(
        self,
        conv: Any,
        track: FlowTrack,
        event: Literal["started", "node", "finished", "failed", "stopped"],
        node: str | None = None,
        *,
        outputs: dict[str, Any] | None = None,
        error: str | None = None,
        at: str | None = None,
    ) -> JournalFlow:
        return JournalFlow(
            job_key=conv.job_key,
            run_id=track.run_id,
            flow=track.flow,
            task_id=track.task_id,
            at=at if at is not None else self._now(),
            event=event,
            node=node,
            outputs=outputs,
            error=error,
        )

    def _now(self) -> str:
        return to_iso(self.clock())


def _ended(track: FlowTrack) -> bool:
    """Whether the run ended (read afresh: the task may close while a call runs)."""
    return not track.active


def tick_input() -> dict[str, Any]:
    return _dump(FlowTick())


def answer_input(interrupt_id: str, answer: Any) -> dict[str, Any]:
    return _dump(Answer(interrupt_id=interrupt_id, answer=answer))


#: What a contact who is not an approver is told while an approval waits.
_WAITING = (
    "That needs an approval first ({ask}). I have asked for it and will write again "
    "as soon as it is decided."
)


def _one_line(text: str) -> str:
    return " ".join(text.split())
