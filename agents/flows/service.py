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

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from compiler import (
    HISTORY,
    Action,
    Answer,
    Ask,
    AwaitApproval,
    Fail,
    Finish,
    FlowInput,
    FlowRun,
    FlowStart,
    FlowTick,
    Interrupt,
    action_from_json,
    bound_input,
    fields_text,
    flow_input_from_json,
    from_iso,
    output_too_large,
    readable,
    shown_fields,
    to_iso,
)
from pydantic import BaseModel
from topics import Answerer, JournalFlow, JournalInterrupt, MessageRecord, ShownField

from agents.compose import Turn
from agents.contacts import addressee, approves
from agents.flows.loading import CONVERSATION_TURNS, Flows, load_flows, remembering
from agents.flows.talking import answer_of, exchanged, next_run_id, turn_inputs
from agents.flows.track import KEPT_INPUTS, FlowTrack, dump, restore_tracks

__all__ = [
    "CONVERSATION_TURNS",
    "KEPT_INPUTS",
    "Execute",
    "FlowDriver",
    "FlowTrack",
    "Flows",
    "answer_of",
    "load_flows",
    "remembering",
    "restore_tracks",
]

log = logging.getLogger(__name__)

Publish = Callable[[Literal["inbox", "messages", "journal"], str, BaseModel], Awaitable[None]]
#: What a run of flow NAME starts with for the job (``Flows.inputs``, with the
#: subject's current facts): the service's, which reads the memory.
InputsOf = Callable[[Any, str], Awaitable[dict[str, Any]]]
#: Writes the checkpoint records a conversation's flow runs owe, alone
#: (agents/flows/checkpoint.py): a step of a large run checkpointed by its delta.
SaveRecords = Callable[[Any], Awaitable[None]]


class Execute(Protocol):
    """Carries out one call action of a flow (``FlowExecutor.execute``): its result."""

    def __call__(
        self, action: Action, *, job_key: str, flow: str, run_id: str
    ) -> Awaitable[FlowInput]: ...


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
        save_records: SaveRecords | None = None,
        inputs_of: InputsOf | None = None,
    ) -> None:
        self.flows = flows
        self.execute = execute
        self.publish = publish
        self.save = save
        #: Writes a large run's delta alone; None: every step saves the whole
        #: conversation (docs/flows.md, "Crash safety").
        self.save_records = save_records
        self.clock = clock or (lambda: datetime.now(UTC))
        self.channel = channel
        #: A conversational flow's next run's inputs (None: without the memory).
        self.inputs_of = inputs_of

    async def drive(self, conv: Any, track: FlowTrack) -> None:
        """Work the track until it waits (an interrupt, nothing queued) or ends."""
        async with track.lock:
            if not track.active and track.owed_turns:
                await self._next_turn(conv, track)
            flow = self.flows.by_name.get(track.flow)
            broken = f"flow {track.flow!r} is not loaded" if flow is None else track.broken
            if broken is not None:
                if track.active:
                    await self._end(conv, track, "failed", error=broken)
                return
            assert flow is not None
            step = FlowRun(flow)
            if track.state is None and track.active:
                now = self.clock()
                state, actions = step.start(track.run_id, track.inputs, now)
                track.record(FlowStart(run_id=track.run_id, inputs=track.inputs), now)
                track.inputs = {}  # the start it was stepped with holds them
                track.state = state
                track.actions = [dump(a) for a in actions]
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
                track.take()
                # An answer or result over the bound is stepped as the call's
                # failure, output_too_large (docs/flows.md, "Bounds").
                await self._step(conv, track, step, bound_input(result), light=True)

    async def _next_turn(self, conv: Any, track: FlowTrack) -> None:
        """A conversational flow's next run, for the first message owed one
        (docs/flows.md, "Conversational flows"): the run before it is over and
        checkpointed; this one is started (and checkpointed) by ``drive``."""
        if self.inputs_of is not None:
            inputs = await self.inputs_of(conv, track.flow)
        else:
            remembered = conv.remembered.get(track.flow)
            inputs = self.flows.inputs(track.flow, conv.subject, conv.turns, remembered)
        turn = track.owed_turns.pop(0)
        run_id = next_run_id(conv, track)
        track.renew(run_id, turn_inputs(self.flows.by_name.get(track.flow), inputs, turn), turn)

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
                    track.take()
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

    async def _step(
        self, conv: Any, track: FlowTrack, step: FlowRun, given: FlowInput, *, light: bool = False
    ) -> None:
        """Feed ``given`` to the step function; checkpoint (``light``: a call's
        result, by its delta alone when the run is large); then say which
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
        track.record(given, now)
        track.state = after
        track.actions.extend(dump(a) for a in actions)
        track.status = "waiting" if after.status == "waiting" else "running"
        closed: str | None = None
        if before is not None:
            still = after.interrupt.interrupt_id if after.interrupt is not None else None
            if still != before:
                closed = before
                track.closed.append(before)
        await self._checkpoint(conv, track, light=light and closed is None)
        if closed is not None:
            status: Literal["answered", "expired"] = (
                "answered" if isinstance(given, Answer) else "expired"
            )
            answer = given.answer if isinstance(given, Answer) else None
            await self._journal_interrupt(conv, track, state.interrupt, status, answer)

    async def _checkpoint(self, conv: Any, track: FlowTrack, *, light: bool) -> None:
        """After a step: a large run's delta alone (``light``, when nothing but
        the run changed and no new base is due), else the conversation."""
        log = track.log
        if light and self.save_records is not None and log.light and not log.due(track):
            log.mark(track)
            await self.save_records(conv)
            return
        await self.save(conv)

    async def _journal_nodes(self, conv: Any, track: FlowTrack) -> None:
        """``started`` (once) and a record per node completed since, then counted
        in a checkpoint; a crash before it writes the same records again (their
        ``at`` from the checkpoint: docs/flows.md, "Crash safety")."""
        trail = track.trail()
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
        await self._checkpoint(conv, track, light=True)

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
            elif action.expects == "file":
                question += " (send a file)"
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
            expects=action.expects if isinstance(action, Ask) else "text",
            accept=action.accept if isinstance(action, Ask) else None,
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
        expects: Literal["text", "file"] = "text",
        accept: str | None = None,
    ) -> None:
        """A ``journal.interrupt``: the question opened (with who may answer it,
        and whether the answer is a file) or closed (answered: by whom)."""
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
                expects=expects,
                accept=accept,
            ),
        )

    async def stop(self, conv: Any, track: FlowTrack) -> None:
        """The task closed: the run stops where it is (an open question is
        cancelled). A run whose step function had already said it ends (its last
        node's result stepped, often the very result that closed the task) ends
        as it said, not cut short."""
        async with track.lock:
            track.owed_turns = []  # its messages are the conversation agent's now
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
        said = await self._reply(conv, track, outputs or {}) if how == "finished" else None
        at = self._after(track, track.journaled_at)
        record = self._flow_record(conv, track, how, node, outputs=outputs, error=error, at=at)
        await self.publish("journal", conv.job_key, record)
        track.status, track.journaled_at = how, at
        track.drop_actions()
        track.queued = []
        if how != "stopped":
            self._remember(conv, track, said)
        await self.save(conv)

    async def _reply(self, conv: Any, track: FlowTrack, outputs: Mapping[str, Any]) -> str | None:
        """The run finished: the output its flow names as the ``reply`` goes to
        the person on the job's channel, as its questions do (docs/flows.md, "A
        reply to the person"); a conversational flow's, to whoever wrote the
        message, on the channel they wrote on ("Conversational flows"). Written
        before the end is checkpointed, under an id from the run's: a resume
        that ends the run again writes the same message, which a channel
        delivers once; nothing when it is empty. What was said, if anything."""
        flow = self.flows.by_name.get(track.flow)
        name = flow.spec.reply if flow is not None else None
        value = outputs.get(name) if name is not None else None
        if flow is None or name is None or value in (None, "", [], {}):
            return None
        spec = flow.channels.get(name)
        text = readable(value, "" if isinstance(value, str) or spec is None else spec.description)
        if not text:
            return None
        turn = track.turn or {}
        contact = turn.get("contact") or addressee(conv.contacts, conv.turns)
        channel = turn.get("channel") or self._channel(conv, contact)
        await self.publish(
            "messages",
            conv.job_key,
            MessageRecord(
                job_key=conv.job_key,
                message_id=f"reply:{track.run_id}",
                direction="out",
                channel=channel,
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
        return text

    def _channel(self, conv: Any, contact: str | None) -> str:
        """Where the person is written to: the channel they last wrote on, else
        email to an address, else the service's default."""
        found: str = conv.last_channel or ("email" if contact and "@" in contact else self.channel)
        return found

    def _remember(self, conv: Any, track: FlowTrack, said: str | None) -> None:
        """A run that finished or failed leaves its ``remembers`` channels'
        values to the next run of its flow for the job (a stopped run, cut
        short by its task closing, leaves what the run before it left); a
        conversational flow's run, its ``history`` with the exchange it
        finished (the message and ``said``, the reply) added."""
        flow = self.flows.by_name.get(track.flow)
        channels = track.state.channels if track.state is not None else {}
        if flow is None or not hasattr(conv, "remembered"):
            return
        kept = {k: channels[k] for k in sorted(remembering(flow)) if k in channels}
        if flow.spec.conversation:
            finished = track.turn if track.status == "finished" else None
            kept[HISTORY] = exchanged(channels.get(HISTORY), finished, said or "")
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
            outputs=_journaled(outputs),
            error=error,
        )

    def _now(self) -> str:
        return to_iso(self.clock())


def _ended(track: FlowTrack) -> bool:
    """Whether the run ended (read afresh: the task may close while a call runs)."""
    return not track.active


def tick_input() -> dict[str, Any]:
    return dump(FlowTick())


def answer_input(interrupt_id: str, answer: Any) -> dict[str, Any]:
    return dump(Answer(interrupt_id=interrupt_id, answer=answer))


#: What a contact who is not an approver is told while an approval waits.
_WAITING = (
    "That needs an approval first ({ask}). I have asked for it and will write again "
    "as soon as it is decided."
)


def _journaled(outputs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The outputs as ``journal.flow`` keeps them: one over the output bound
    (an ``append`` channel grown by a fan-out) is said, not copied, so the
    record stays under the producer's request size (docs/flows.md, "Bounds")."""
    if outputs is None:
        return None
    return {k: output_too_large(v, k) or v for k, v in outputs.items()}


def _one_line(text: str) -> str:
    return " ".join(text.split())
