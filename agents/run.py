"""A job's conversation and one run of its agent (docs/agents.md, "Runs").

:class:`Conversation` (agents/conversation.py) is what the agents service
keeps per job. :class:`Runner` runs the
conversation agent on it: compose, call the model, run the tools it asks for
through the trusted executor, publish facts, messages and journal records,
until the model stops talking or a bound is hit.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from compiler import to_iso
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue
from stream.runtime.tracing import span
from topics import (
    InboxEvent,
    JournalMail,
    JournalModelCall,
    JournalRun,
    JournalToolCall,
    MessageRecord,
    ProfileFact,
    Tokens,
)

from agents.catalog import CONVERSATION, MAX_DELEGATION_DEPTH, Bounds, Catalog
from agents.compose import ModelRequest, OpenTask, Turn, compose, compose_closing
from agents.contacts import addressee
from agents.conversation import Conversation, excerpt
from agents.errors import OutputError
from agents.memory.profiles import Profiles
from agents.memory.summary import keep_summary
from agents.model import Completion, Exchange, Model, ModelError, ToolCall, Usage
from agents.publish import Publish, Send
from agents.tools.executor import Executor, derived_key

__all__ = ["Conversation", "Outbox", "Publish", "RunEnd", "Runner", "Send", "excerpt"]

#: The tape's name for the closing turn's model reply.
CLOSING = "closing"

log = logging.getLogger(__name__)

#: What the person is told when a run ends by a bound, by the bound
#: (docs/agents.md, "Bounds").
STOPPED = {
    "max_turns": "it took more steps than I may take at once",
    "max_tool_calls": "it needed more actions than I may take at once",
    "max_tokens": "it needed more reading and writing than I may do at once",
    "max_seconds": "it took longer than I may take at once",
}


@dataclass(frozen=True)
class RunEnd:
    """How a run ended and what it used."""

    reason: str
    turns: int
    tool_calls: int
    tokens: int


def stopped_text(reason: str) -> str:
    """The one message a person gets when their run ends by a bound."""
    return (
        f"I stopped before finishing: {STOPPED[reason]}. "
        "Write to me again and I will carry on from here."
    )


@dataclass
class _Budget:
    """What a run, or one agent's part of it, has used, against its bounds
    (docs/agents.md, "Bounds"): a run's budget is its first agent's bounds, and
    a delegate's turns count in its own and in the run's."""

    bounds: Bounds
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    #: The conversation's inputs when the conversation agent last composed.
    seen: int = -1

    def before_model(self) -> str | None:
        """The bound another model call would pass, if any."""
        if self.turns >= self.bounds.max_turns:
            return "max_turns"
        if self.bounds.max_tokens is not None and self.tokens >= self.bounds.max_tokens:
            return "max_tokens"
        return self._late()

    def before_tool(self) -> str | None:
        """The bound another tool call would pass, if any."""
        if self.tool_calls >= self.bounds.max_tool_calls:
            return "max_tool_calls"
        return self._late()

    def _late(self) -> str | None:
        if time.monotonic() - self.started >= self.bounds.max_seconds:
            return "max_seconds"
        return None


class _Tape:
    """The steps of the run in progress (``Conversation.tape``): the recorded
    ones are replayed in order, then new ones are appended."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        self.steps = steps
        self.recorded = len(steps)
        self.pos = 0

    def replay(self, kind: str, name: str) -> tuple[dict[str, Any], bool] | None:
        """The next recorded step, if it is a ``kind`` step of ``name``, and
        whether it is the last one recorded (the crash may have come before its
        effects were published). None once the run is live again."""
        if self.pos >= self.recorded:
            return None
        step = self.steps[self.pos]
        if step.get("kind") != kind or step.get("name") != name:
            del self.steps[self.pos :]  # the run went another way: live from here
            self.recorded = self.pos
            return None
        self.pos += 1
        return step, self.pos == self.recorded

    def record(self, step: dict[str, Any]) -> None:
        """Append a completed step (checkpointed by the caller)."""
        self.steps.append(step)

    def take(self, kind: str) -> dict[str, Any] | None:
        """The next recorded step if a ``kind`` one (agents/memory/summary.py)."""
        if self.pos < self.recorded and self.steps[self.pos].get("kind") == kind:
            self.pos += 1
            return self.steps[self.pos - 1]
        return None


def _model_step(agent: str, reply: Completion) -> dict[str, Any]:
    u = reply.usage
    return {
        "kind": "model",
        "name": agent,
        "text": reply.text,
        "calls": [[c.call_id, c.name, c.arguments] for c in reply.calls],
        "usage": [u.input, u.output, u.cached, u.total] if u is not None else None,
        "seconds": reply.seconds,
    }


def _reply_of(step: dict[str, Any]) -> Completion:
    usage = step.get("usage")
    return Completion(
        text=step.get("text"),
        calls=tuple(ToolCall(i, n, a) for i, n, a in step.get("calls", [])),
        usage=Usage(*usage) if usage else None,
        seconds=float(step.get("seconds", 0.0)),
    )


class Outbox:
    """Where a run's records go: ``publish(topic, key, record)`` and
    ``save(conversation)``, a durable checkpoint taken before a call that must
    not run twice."""

    def __init__(self, publish: Publish, save: Callable[[Conversation], Awaitable[None]]) -> None:
        self.publish = publish
        self.save = save


class Runner:
    """Runs a job's conversation agent (and the delegates it calls)."""

    def __init__(
        self,
        catalog: Catalog,
        model: Model,
        executor: Executor,
        *,
        history: int = 20,
        channel: str = "web",
        clock: Callable[[], datetime] | None = None,
        guarded: Callable[[str], Mapping[str, frozenset[str]]] | None = None,
        memory: Profiles | None = None,
    ) -> None:
        self.catalog = catalog
        self.model = model
        self.executor = executor
        self.history = history
        self.channel = channel
        self.clock = clock or (lambda: datetime.now(UTC))
        #: By playbook key: the tools its flows guard with an approval, each
        #: with those flows; no agent is offered or runs them (docs/flows.md).
        self.guarded = guarded or (lambda playbook_key: {})
        #: The subjects' current facts (docs/memory.md, "Given to agents").
        self.memory = memory

    async def run(self, conv: Conversation, outbox: Outbox) -> RunEnd:
        """One run of the conversation agent on ``conv`` (mutated), then journaled.
        A run cut short (``conv.active``) resumes: its recorded steps are replayed,
        not repeated."""
        if conv.active is None:
            conv.runs += 1
            conv.active = f"{conv.job_key}#{conv.runs}"
            conv.tape = []
        run_id = conv.active
        with _agent_span(conv, run_id, CONVERSATION) as traced:
            budget = _Budget(self.catalog.agents[CONVERSATION].bounds)
            tape = _Tape(conv.tape)
            reason = await self._guarded(
                conv, run_id, CONVERSATION,
                self._loop(conv, outbox, run_id, CONVERSATION, None, budget, [], tape),
            )  # fmt: skip
            # What its last compose saw is done; an input after it owes another run.
            conv.ran = max(conv.ran, budget.seen if budget.seen >= 0 else conv.inputs)
            if reason == "task_closed" and conv.unanswered:
                conv.closing = True  # the service runs it once the decision's records are in
            if reason in STOPPED:
                await self._guarded(
                    conv, run_id, CONVERSATION, self._stopped(conv, outbox, run_id, budget, reason)
                )
            conv.active = None
            conv.tape = []
            end = RunEnd(reason, budget.turns, budget.tool_calls, budget.tokens)
            await self._journal_run(conv, outbox, run_id, CONVERSATION, end, tape.pos)
            _ended(traced, end)
        return end

    async def close(self, conv: Conversation, outbox: Outbox) -> RunEnd:
        """The closing turn (docs/agents.md, "The closing turn"): no task is open
        and the person's latest turn is unanswered, so the conversation agent
        tells them what was done, once. A run of its own (``ended: closing``);
        cut short, it resumes under its id and replays the reply it paid for."""
        if conv.active is None:
            conv.runs += 1
            conv.active = f"{conv.job_key}#{conv.runs}"
            conv.tape = []
        run_id = conv.active
        with _agent_span(conv, run_id, CONVERSATION) as traced:
            tape = _Tape(conv.tape)
            budget = _Budget(self.catalog.agents[CONVERSATION].bounds, seen=conv.inputs)
            reason = await self._guarded(
                conv, run_id, CONVERSATION, self._closing(conv, outbox, run_id, budget, tape)
            )
            conv.ran = max(conv.ran, budget.seen)
            # A message that came in after its compose owes another closing turn.
            conv.closing = conv.inputs > budget.seen and not conv.tasks
            conv.active = None
            conv.tape = []
            end = RunEnd(reason, 1, 0, budget.tokens)
            await self._journal_run(conv, outbox, run_id, CONVERSATION, end, tape.pos)
            _ended(traced, end)
        return end

    async def _closing(
        self, conv: Conversation, outbox: Outbox, run_id: str, budget: _Budget, tape: _Tape
    ) -> str:
        """The closing turn's one model call (replayed if paid for) and message."""
        request = compose_closing(
            self.catalog,
            playbook_instructions=conv.playbook_instructions,
            closed=conv.outcomes,
            subject=conv.subject,
            contacts=conv.contacts,
            turns=conv.turns,
            history=self.history,
        )
        composed_over = conv.turns[-1] if conv.turns else None
        replayed = tape.replay("model", CLOSING)
        reply = _reply_of(replayed[0]) if replayed is not None else None
        if reply is None:
            reply = await self._model_call(conv, outbox, run_id, request, ())
            if reply is not None:
                if reply.text:
                    conv.add_reply(reply.text, composed_over)
                tape.record({**_model_step(CONVERSATION, reply), "name": CLOSING})
                await outbox.save(conv)
        budget.turns = 1
        if reply is None:
            return "model_error"
        if reply.text:
            budget.tokens = reply.usage.total if reply.usage is not None else 0
            await self._said(conv, outbox, run_id, 1, reply.text, None)
        return CLOSING

    async def run_prompt(self, conv: Conversation, outbox: Outbox, agent: str) -> tuple[str, str]:
        """Run ``agent`` on ``conv`` (its run id is ``conv.active``), resuming from
        its tape; journal the run's end. (how it ended, its last reply)"""
        assert conv.active is not None
        with _agent_span(conv, conv.active, agent) as traced:
            budget = _Budget(self.catalog.agents[agent].bounds)
            tape = _Tape(conv.tape)
            said: list[str] = []
            reason = await self._guarded(
                conv, conv.active, agent,
                self._loop(conv, outbox, conv.active, agent, None, budget, said, tape),
            )  # fmt: skip
            end = RunEnd(reason, budget.turns, budget.tool_calls, budget.tokens)
            await self._journal_run(conv, outbox, conv.active, agent, end, tape.pos)
            _ended(traced, end)
        return reason, said[-1] if said else ""

    async def _guarded(
        self, conv: Conversation, run_id: str, agent: str, work: Awaitable[str]
    ) -> str:
        """How ``work`` ended; a fault of ours (a bug, a recursion) ends it
        ``error``, with a log line, never silently (docs/agents.md, "Bounds"); a
        record or checkpoint that could not be written is the service's to end
        (:class:`OutputError`, docs/agents.md, "Output bounds")."""
        try:
            return await work
        except OutputError:
            raise  # not the run's fault: the service ends the run and journals why
        except Exception:
            log.exception("agents: %s: run %s (%s) stopped on an error", conv.job_key, run_id,
                          agent)  # fmt: skip
            return "error"

    async def _stopped(
        self, conv: Conversation, outbox: Outbox, run_id: str, budget: _Budget, reason: str
    ) -> str:
        """A run that a bound ended says so to the person, once: one short
        message, after the run's last turn (the send guard applies)."""
        text = stopped_text(reason)
        conv.add_turn(Turn("agent", text))
        tasks = conv.open_tasks()
        await self._said(conv, outbox, run_id, budget.turns + 1, text, tasks[0] if tasks else None)
        return reason

    async def _journal_run(
        self, conv: Conversation, outbox: Outbox, run_id: str, agent: str, end: RunEnd,
        replayed: int,
    ) -> None:  # fmt: skip
        """The run's ``journal.run`` record."""
        await outbox.publish(
            "journal",
            conv.job_key,
            JournalRun(
                job_key=conv.job_key,
                run_id=run_id,
                agent=agent,
                at=self._now(),
                ended=end.reason,
                turns=end.turns,
                tool_calls=end.tool_calls,
                tokens=end.tokens,
                replayed=replayed,
            ),
        )

    # -- the loop ---------------------------------------------------------------------

    async def _loop(
        self,
        conv: Conversation,
        outbox: Outbox,
        run_id: str,
        agent: str,
        request_text: str | None,
        budget: _Budget,
        said: list[str],
        tape: _Tape,
        depth: int = 0,
    ) -> str:
        """Turns of ``agent`` (``depth`` delegates down) until it stops or a
        bound ends it, its own or the run's; the reason."""
        exchanges: list[Exchange] = []
        task = conv.open_tasks()[0] if conv.open_tasks() else None
        own = _Budget(self.catalog.agents[agent].bounds)
        while True:
            tasks = conv.open_tasks()
            if not tasks:
                return "task_closed"
            spent = own.before_model() or budget.before_model()
            if spent is not None:
                return spent
            # What this turn answers: the tasks, inputs and turns as they are now.
            # What comes in from here on (during the memory wait or the model call)
            # is after it: it owes the next turn or run, which sees it last.
            turns = list(conv.turns)
            composed_over = turns[-1] if turns else None
            known = earlier = None
            if agent == CONVERSATION:
                budget.seen = conv.inputs
                known = await self._known(conv)
                ask = functools.partial(self._model_call, conv, outbox, run_id)
                earlier = await keep_summary(conv, tape, self, ask, outbox, run_id)
            request = compose(
                self.catalog,
                playbook_instructions=conv.playbook_instructions,
                tasks=tasks,
                subject=conv.subject,
                contacts=conv.contacts,
                turns=turns,
                history=self.history,
                agent=agent,
                request=request_text,
                withheld=self.guarded(conv.playbook_key),
                known=known,
                known_tokens=self.memory.tokens if self.memory is not None else 0,
                earlier=earlier,
            )
            replayed = tape.replay("model", agent)
            if replayed is not None:
                step, unpublished = replayed
                reply: Completion | None = _reply_of(step)
            else:
                unpublished = True
                reply = await self._model_call(conv, outbox, run_id, request, exchanges)
                if reply is not None:
                    if reply.text and agent == CONVERSATION:
                        conv.add_reply(reply.text, composed_over)
                    tape.record(_model_step(agent, reply))
                    await outbox.save(conv)  # a paid reply is never asked for twice
            own.turns += 1
            budget.turns += 1
            if reply is None:
                return "model_error"
            tokens = reply.usage.total if reply.usage is not None else 0
            own.tokens += tokens
            budget.tokens += tokens
            if reply.text:
                said.append(reply.text)
                if agent == CONVERSATION and unpublished:
                    await self._said(conv, outbox, run_id, budget.turns, reply.text, task)
            if not reply.calls:
                return "done"
            for call in reply.calls:
                spent = own.before_tool() or budget.before_tool()
                if spent is not None:
                    return spent
                own.tool_calls += 1
                budget.tool_calls += 1
                output = await self._tool(
                    conv, outbox, run_id, agent, request, call, budget, tape, depth
                )
                exchanges.append(Exchange(call, output))

    async def _known(self, conv: Conversation) -> tuple[str, Sequence[ProfileFact]] | None:
        """The job's subject key and its current facts, once the memory read
        model has caught up (bounded); None without a subject or facts."""
        if self.memory is None or self.memory.of_job(conv.subject, conv.contacts) is None:
            return None  # no subject (a scheduled prompt's run): nothing to wait for
        await self.memory.ready()
        found = self.memory.of_job(conv.subject, conv.contacts)
        return found if found is not None and found[1] else None

    async def _model_call(
        self,
        conv: Conversation,
        outbox: Outbox,
        run_id: str,
        request: ModelRequest,
        exchanges: Sequence[Exchange],
    ) -> Completion | None:
        """One model call, journaled whatever its outcome; None when it failed."""
        started = time.monotonic()
        sent = request.messages[-1][1] if request.messages else ""
        reply: Completion | None = None
        tokens: Tokens | None = None
        try:
            reply = await self.model.call(request, exchanges)
        except ModelError as exc:
            outcome: Any = exc.kind
            answer = exc.message
            seconds = time.monotonic() - started
        else:
            outcome = "ok"
            answer = reply.text or ""
            if reply.calls:
                answer += " ".join(f"[call {c.name} {c.arguments}]" for c in reply.calls)
            seconds = reply.seconds
            u = reply.usage
            if u is not None:
                tokens = Tokens(input=u.input, output=u.output, cached=u.cached, total=u.total)
        await outbox.publish(
            "journal",
            conv.job_key,
            JournalModelCall(
                job_key=conv.job_key,
                run_id=run_id,
                agent=request.agent,
                at=self._now(),
                request=excerpt(f"{request.instructions}\n---\n{sent}"),
                response=excerpt(answer.strip()),
                latency_ms=_ms(seconds),
                tokens=tokens,
                outcome=outcome,
            ),
        )
        return reply

    async def _said(
        self,
        conv: Conversation,
        outbox: Outbox,
        run_id: str,
        turn: int,
        text: str,
        task: OpenTask | None,
    ) -> None:
        """What the agent told the person: a message, and an ``agent`` event
        (``agent_said``), which never counts toward a condition. The ids follow
        from the run and the turn, so a replay re-publishes under the same ids."""
        message_id = f"{run_id}.{turn}"
        # whom it answers: who wrote last if a contact of the job, else its first contact
        contact = addressee(conv.contacts, conv.turns)
        channel = conv.last_channel or ("email" if contact and "@" in contact else self.channel)
        digest = _digest(text, contact, channel, conv.frontier)
        if conv.last_sent[1:] == [digest] and conv.last_sent[0] != message_id:
            # The very message sent last, to the same person over the same frontier:
            # withheld (a re-publication of the same id is a replay, and goes out).
            await outbox.publish(
                "journal",
                conv.job_key,
                JournalMail(
                    job_key=conv.job_key, at=self._now(), direction="out", outcome="refused",
                    message_id=message_id, detail=f"withheld: the same message as "
                    f"{conv.last_sent[0]} (same text, contact, channel and frontier)",
                ),
            )  # fmt: skip
            return
        conv.last_sent = [message_id, digest]
        # The message sent, as a span (docs/operations.md, "Tracing"): never its text.
        sent: dict[str, AttributeValue] = {
            "lemongraph.message.id": message_id,
            "lemongraph.message.channel": channel,
        }
        with span("agents", f"send_message {channel}", sent, SpanKind.PRODUCER):
            await outbox.publish(
                "messages",
                conv.job_key,
                MessageRecord(
                    job_key=conv.job_key,
                    message_id=message_id,
                    direction="out",
                    channel=channel,
                    agent=CONVERSATION,
                    contact=contact,
                    task_id=task.task_id if task is not None else None,
                    text=text,
                    at=self._now(),
                ),
            )
        await outbox.publish(
            "inbox",
            conv.job_key,
            InboxEvent(
                key=conv.job_key,
                action="agent_said",
                properties={"text": excerpt(text, 200), "channel": channel},
                idempotency_key=message_id,
                source="agent",
            ),
        )

    async def _tool(
        self,
        conv: Conversation,
        outbox: Outbox,
        run_id: str,
        agent: str,
        request: ModelRequest,
        call: ToolCall,
        budget: _Budget,
        tape: _Tape,
        depth: int,
    ) -> str:
        """Run one call the model asked for; what the model is told."""
        offer = request.offers(call.name)
        task = self._task_for(conv, agent, call.name)
        task_id = task.task_id if task is not None else f"{conv.job_key}/-"
        if offer is not None and offer.kind == "delegate":
            return await self._delegate(
                conv, outbox, run_id, agent, call, task_id, budget, tape, depth + 1
            )
        replayed = tape.replay("tool", call.name)
        if replayed is not None:
            return await _replayed_tool(conv, outbox, *replayed)
        granted = [t.name for t in request.tools if t.kind == "tool"]
        guarded = self.guarded(conv.playbook_key)
        started = time.monotonic()
        parsed, refused = self.executor.check(call.name, call.arguments, granted, guarded)
        args: Any = parsed if parsed is not None else call.arguments
        identity = _identity(task_id, call.name, args)
        occurrence = conv.done_calls.get(identity, 0) + 1
        key = derived_key(task_id, call.name, args, occurrence)
        spec = self.catalog.tools.get(call.name)
        if refused is None and spec is not None and not spec.idempotent:
            if key in conv.pending:
                # Requested by a run that did not finish: it may have taken effect.
                output = (
                    '{"ok":false,"error":"this call was requested before and its outcome is '
                    'unknown: it may or may not have taken effect; do not repeat it"}'
                )
                await self._journal_tool(
                    conv, outbox, run_id, agent, call, task_id, "outcome_unknown", key,
                    None, None, output, started, None,
                )  # fmt: skip
                tape.record({"kind": "tool", "name": call.name, "output": output, "fact": None})
                await outbox.save(conv)
                return output
            conv.pending[key] = call.name
            await outbox.save(conv)  # durable before the side effect
        outcome = await self.executor.run(
            job_key=conv.job_key,
            task_id=task_id,
            name=call.name,
            arguments=call.arguments,
            granted=granted,
            occurrence=occurrence,
            guarded=guarded,
        )
        fact = outcome.fact
        if outcome.status == "done":
            conv.done_calls[identity] = occurrence
            conv.add_turn(Turn("tool", excerpt(outcome.output), call.name))
        if outcome.status != "outcome_unknown":
            conv.pending.pop(key, None)
        await self._journal_tool(
            conv, outbox, run_id, agent, call, task_id, outcome.status, outcome.key,
            outcome.http_status, outcome.url, outcome.output, started,
            fact.action if fact is not None else None, outcome.journaled(),
        )  # fmt: skip
        tape.record(
            {
                "kind": "tool",
                "name": call.name,
                "output": outcome.output,
                "fact": fact.compact() if fact is not None else None,
            }
        )
        await outbox.save(conv)  # then the fact: a replay re-publishes it under its key
        if fact is not None:
            await outbox.publish("inbox", conv.job_key, fact)
        return outcome.output

    async def _delegate(
        self,
        conv: Conversation,
        outbox: Outbox,
        run_id: str,
        caller: str,
        call: ToolCall,
        task_id: str,
        budget: _Budget,
        tape: _Tape,
        depth: int,
    ) -> str:
        """Run a delegate agent (``depth`` delegates down) on the plain-language
        request; its caller is told what it said (its tool results are the
        evidence). Deeper than :data:`MAX_DELEGATION_DEPTH`, the call is refused."""
        started = time.monotonic()
        try:
            args = orjson.loads(call.arguments or "{}")
            text = str(args.get("request") or "") if isinstance(args, dict) else ""
        except orjson.JSONDecodeError:
            text = ""
        said: list[str] = []
        reason = "too_deep"
        if depth <= MAX_DELEGATION_DEPTH:
            with _agent_span(conv, run_id, call.name):
                reason = await self._loop(
                    conv, outbox, run_id, call.name, text, budget, said, tape, depth
                )
        replayed = tape.replay("tool", call.name)
        if replayed is not None:
            return str(replayed[0]["output"])
        if reason == "too_deep":
            outcome = "refused"
            output = orjson.dumps({"ok": False, "error": (
                f"refused: a delegate {depth} deep; delegates go {MAX_DELEGATION_DEPTH} deep "
                "at most: do it yourself or say what is left")}).decode()  # fmt: skip
        else:
            outcome = "delegated"
            output = orjson.dumps(
                {"ok": reason == "done", "agent": call.name, "ended": reason, "said": said[-1:]}
            ).decode()
        await self._journal_tool(
            conv, outbox, run_id, caller, call, task_id, outcome, None, None, None,
            output, started, None,
        )  # fmt: skip
        tape.record({"kind": "tool", "name": call.name, "output": output, "fact": None})
        await outbox.save(conv)
        return output

    async def _journal_tool(
        self,
        conv: Conversation,
        outbox: Outbox,
        run_id: str,
        agent: str,
        call: ToolCall,
        task_id: str,
        outcome: Any,
        key: str | None,
        http_status: int | None,
        url: str | None,
        result: str,
        started: float,
        fact: str | None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        await outbox.publish(
            "journal",
            conv.job_key,
            JournalToolCall(
                job_key=conv.job_key,
                run_id=run_id,
                agent=agent,
                at=self._now(),
                tool=call.name,
                task_id=task_id,
                arguments=excerpt(call.arguments),
                outcome=outcome,
                key=key,
                http_status=http_status,
                url=url,
                result=excerpt(result),
                latency_ms=_ms(time.monotonic() - started),
                fact=fact,
                **(extra or {}),
            ),
        )

    def _task_for(self, conv: Conversation, agent: str, name: str) -> OpenTask | None:
        """The open task a call belongs to: the first (in frontier order) whose
        integrations grant the tool, or the delegate that runs it."""
        tasks = conv.open_tasks()
        for task in tasks:
            tools, delegates = self.catalog.grants(task.integrations)
            if name in tools or name in delegates:
                return task
            if agent != CONVERSATION and agent in delegates:
                return task
        return tasks[0] if tasks else None

    def _now(self) -> str:
        return to_iso(self.clock())


def _agent_span(conv: Conversation, run_id: str, agent: str) -> Any:
    """An agent's run as an ``invoke_agent AGENT`` span (docs/operations.md,
    "Tracing"): the model calls, tool calls and messages of the run are its
    children. Nothing when the agents service does not trace."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "lemongraph.job.key": conv.job_key,
        "lemongraph.run.id": run_id,
    }
    return span("agents", f"invoke_agent {agent}", attributes)


def _ended(traced: Span | None, end: RunEnd) -> None:
    """What a traced run used and how it ended."""
    if traced is not None:
        traced.set_attributes({"lemongraph.run.ended": end.reason, "lemongraph.run.turns":
                               end.turns, "lemongraph.run.tool_calls": end.tool_calls})  # fmt: skip


async def _replayed_tool(
    conv: Conversation, outbox: Outbox, step: dict[str, Any], unpublished: bool
) -> str:
    """A tool call recorded on the tape: its fact published again when the
    crash may have come before it was, its output as the model was told."""
    if unpublished and step.get("fact") is not None:
        await outbox.publish("inbox", conv.job_key, InboxEvent.model_validate(step["fact"]))
    return str(step["output"])


def _identity(task_id: str, tool: str, args: Any) -> str:
    canonical = orjson.dumps([task_id, tool, args], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:32]


def _digest(text: str, contact: str | None, channel: str, frontier: Sequence[str]) -> str:
    """What makes two messages the same message (the guard of ``_said``)."""
    canonical = orjson.dumps([" ".join(text.split()), contact, channel, list(frontier)])
    return hashlib.sha256(canonical).hexdigest()[:32]


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
