"""A job's rolling summary (docs/memory.md, "Summaries are claims").

When a conversation outgrows the turns a model is sent (the last ``history``;
the earlier ones only as a count), the conversation agent's run first asks the
model, in a call of its own (agent ``summary``: journaled, counted and traced
like any model call), to summarise the turns that are no longer shown, folding
in the summary it wrote before. The summary is a :class:`topics.MemoryNote`:
``agent``, naming the turns it came from, keyed by the job's subject on
``memory-facts``; the memory processor keeps the newest per job in the
subject's profile, beside the facts and never among them. The job's later
turns are shown it as "Earlier in this conversation (our own summary, not
verified)" (agents/memory/recall.py, ``earlier_lines``). No condition reads it,
the profile API never returns it, and erasing the subject erases it.

**When**: once at least :data:`SUMMARY_EVERY` more turns are hidden than the
summary covers (``Conversation.summarized``), so a long conversation pays one
summary call per ten turns, not one per turn. **Bounded**: the call is given
at most :data:`SUMMARY_TURNS` turns (each cut to :data:`TURN_CHARS`) and the
previous summary; the note keeps at most ``NOTE_CHARS`` characters.

**Crash-safe and replay-safe**: the call is a step of the run's tape, recorded
(with the note) and checkpointed, with ``summarized``, before the note is
published; a run cut short replays the step and publishes the note again
under the same id (the job and the last turn it covers: ours, never the
model's), which the processor keeps once. A job without a subject keeps no
summary (it remembers nothing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from topics import NOTE_CHARS, MemoryNote, ProfileNote, subject_key

from agents.compose import TOOL_TURN, ModelRequest, Turn
from agents.conversation import Conversation, excerpt
from agents.memory.profiles import Profiles
from agents.model import Completion, Exchange
from agents.publish import Publish

__all__ = [
    "SUMMARY_AGENT",
    "SUMMARY_EVERY",
    "SUMMARY_TURNS",
    "TURN_CHARS",
    "Outbox",
    "Runner",
    "Span",
    "Tape",
    "due",
    "keep_summary",
    "summary_request",
]

#: The agent name of the summary call (the journal's, the metrics' and the
#: trace's; the stand-in model answers a request whose ``Agent:`` line names it).
SUMMARY_AGENT = "summary"
#: Summarise again once this many more turns are hidden than the summary covers.
SUMMARY_EVERY = 10
#: The most turns one summary call is given (the oldest hidden ones beyond it
#: are left to the previous summary).
SUMMARY_TURNS = 60
#: A turn as the summary call is given it, at most.
TURN_CHARS = 400

ModelCall = Callable[[ModelRequest, Sequence[Exchange]], Awaitable[Completion | None]]


class Tape(Protocol):
    """The run's tape (agents/run.py ``_Tape``), as far as a summary uses it:
    ``pos`` of ``recorded`` steps replayed so far."""

    pos: int
    recorded: int

    def take(self, kind: str) -> dict[str, Any] | None: ...

    def record(self, step: dict[str, Any]) -> None: ...


class Outbox(Protocol):
    """Where a run's records go (agents/run.py ``Outbox``)."""

    publish: Publish
    save: Callable[[Conversation], Awaitable[None]]


class Runner(Protocol):
    """The runner (agents/run.py ``Runner``), as far as a summary uses it."""

    memory: Profiles | None
    history: int

    def _now(self) -> str: ...


@dataclass(frozen=True)
class Span:
    """What a summary call covers: the turns numbered ``start + 1`` to ``end``
    of the whole conversation are given; ``previous`` is folded in."""

    start: int
    end: int
    previous: ProfileNote | None


def due(conv: Conversation, history: int, previous: ProfileNote | None) -> Span | None:
    """The span to summarise now, if a summary is due (see the module's docstring)."""
    end = conv.forgotten + max(0, len(conv.turns) - max(history, 0))
    if end - conv.summarized < SUMMARY_EVERY:
        return None
    start = max(end - SUMMARY_TURNS, conv.forgotten)
    if previous is not None and previous.turn_to <= end:
        start = max(start, previous.turn_to)
    else:
        previous = None  # a note of turns not hidden any more: not this conversation's
    return Span(start, end, previous)


def _line(turn: Turn) -> str:
    text = excerpt(" ".join(turn.text.split()), TURN_CHARS)
    if turn.role == "person":
        return f"person ({turn.name}): {text}" if turn.name else f"person: {text}"
    if turn.role == "tool":
        return f"{TOOL_TURN}{turn.name}) {text}"
    return f"agent: {text}"


def summary_request(conv: Conversation, span: Span) -> ModelRequest:
    """The summary call's request: the previous summary in the instructions,
    the turns as one transcript."""
    first = span.previous.turn_from if span.previous is not None else span.start + 1
    lines = [
        f"Agent: {SUMMARY_AGENT}",
        f"Summarise: turns {first}-{span.end} of the conversation of job {conv.job_key}",
        "Write a short summary of this conversation for yourself, to carry on with it "
        "later: who said what, what was asked, what was promised. It is your own note, "
        "not evidence: say nothing happened that a tool result in it does not confirm. "
        f"At most {NOTE_CHARS} characters; no preamble.",
    ]
    if span.previous is not None:
        p = span.previous
        lines.append(f"Your summary of turns {p.turn_from}-{p.turn_to} so far:\n{p.text}")
    turns = conv.turns[span.start - conv.forgotten : span.end - conv.forgotten]
    transcript = "\n".join(f"{n}. {_line(t)}" for n, t in enumerate(turns, start=span.start + 1))
    return ModelRequest(SUMMARY_AGENT, "\n".join(lines), (("user", transcript),))


async def keep_summary(
    conv: Conversation, tape: Tape, runner: Runner, call: ModelCall, outbox: Outbox, run_id: str
) -> ProfileNote | None:
    """Before a conversation agent's turn: the job's summary to show it (None:
    none), after writing a new one when one is due (or replaying the one its
    tape recorded)."""
    memory, publish = runner.memory, outbox.publish
    subject = subject_key(conv.subject, conv.contacts)
    if memory is None or subject is None:
        return None  # nothing is remembered of a job without a subject
    step = tape.take("summary")
    if step is not None:
        if step.get("note") is None:
            return memory.summary(subject, conv.job_key)
        note = MemoryNote.model_validate(step["note"])
        await publish("memory-facts", subject, note)  # again: the processor keeps it once
        return _kept(note)
    previous = memory.summary(subject, conv.job_key)
    live = tape.pos >= tape.recorded  # past the recorded steps: decided afresh
    span = due(conv, runner.history, previous) if live else None
    if span is None:
        return previous
    reply = await call(summary_request(conv, span), ())
    text = (reply.text or "").strip() if reply is not None else ""
    fresh = None
    if text:
        fresh = MemoryNote(
            subject=subject,
            job_key=conv.job_key,
            note_id=f"{conv.job_key}/summary/{span.end}",
            text=excerpt(text, NOTE_CHARS),
            turn_from=span.previous.turn_from if span.previous is not None else span.start + 1,
            turn_to=span.end,
            at=runner._now(),
            run_id=run_id,
        )
    tape.record({"kind": "summary", "name": SUMMARY_AGENT,
                 "note": fresh.dump() if fresh is not None else None})  # fmt: skip
    # A failed call is not asked again before ten more turns are hidden.
    conv.summarized = span.end
    await outbox.save(conv)  # before the note: a replay publishes it again
    if fresh is None:
        return previous
    await publish("memory-facts", subject, fresh)
    return _kept(fresh)


def _kept(note: MemoryNote) -> ProfileNote:
    """The note as a profile keeps it."""
    return ProfileNote.model_validate(note.model_dump(exclude={"schema_", "type", "subject",
                                                               "run_id"}))  # fmt: skip
