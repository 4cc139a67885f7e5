"""Composition: a job's conversation agent, re-composed over its frontier
(docs/agents.md, "What the model is given").

:func:`compose` is pure: the job's open tasks, its subject and contacts, the
conversation so far and the catalog in; the model request out. It is the only
place that decides what a model sees, so a test can read exactly that (but for
a long conversation's summary call: agents/memory/summary.py).

The request names the agent and the next best step on lines of their own
(``Agent: <name>``, ``Next best step: <milestone>``); the stand-in model's
script rules match on them (docs/agents.md, "The stand-in model").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from topics import ProfileFact, ProfileNote

from agents.catalog import CONVERSATION, Catalog
from agents.memory.recall import MEMORY_TOKENS, earlier_lines, known_lines

__all__ = [
    "DELEGATE_PARAMETERS",
    "TOOL_TURN",
    "ModelRequest",
    "OpenTask",
    "ToolOffer",
    "Turn",
    "compose",
    "compose_closing",
]

#: How an earlier tool result opens when the history shows it.
TOOL_TURN = "(tool result from "

#: What every agent is told of evidence.
EVIDENCE = (
    "Only a tool result confirms that something happened; say nothing happened "
    "that no tool result in this conversation confirms."
)

#: A delegate is offered as a tool that takes one plain-language request.
DELEGATE_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "What to do, in plain words."}},
    "required": ["request"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class OpenTask:
    """An open task of the job, as its ``task.opened`` record said."""

    task_id: str
    milestone: str
    instructions: str
    deadline: str
    integrations: tuple[str, ...]


@dataclass(frozen=True)
class Turn:
    """One turn of the conversation so far: what the person said, what an
    agent said, or a tool result (``name``: the tool, or the person who wrote)."""

    role: Literal["person", "agent", "tool"]
    text: str
    name: str | None = None


@dataclass(frozen=True)
class ToolOffer:
    """A function the model may call: a tool, or a delegate agent by its name."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: Literal["tool", "delegate"] = "tool"


@dataclass(frozen=True)
class ModelRequest:
    """What one model call is given: instructions, the conversation as
    messages (``role`` is ``user`` or ``assistant``), and the tools offered."""

    agent: str
    instructions: str
    messages: tuple[tuple[Literal["user", "assistant"], str], ...]
    tools: tuple[ToolOffer, ...] = field(default=())
    #: Images given with the last message, each a ``data:`` URL (docs/flows.md,
    #: "A model reads a file").
    images: tuple[str, ...] = field(default=())

    def offers(self, name: str) -> ToolOffer | None:
        """The offer named ``name``, if the request makes it."""
        return next((t for t in self.tools if t.name == name), None)


def compose(
    catalog: Catalog,
    *,
    playbook_instructions: str,
    tasks: Sequence[OpenTask],
    subject: Mapping[str, Any],
    contacts: Sequence[Any],
    turns: Sequence[Turn],
    history: int = 20,
    agent: str = CONVERSATION,
    request: str | None = None,
    withheld: Collection[str] = (),
    known: tuple[str, Sequence[ProfileFact]] | None = None,
    known_tokens: int = MEMORY_TOKENS,
    earlier: ProfileNote | None = None,
) -> ModelRequest:
    """The model request for ``agent`` on a job.

    ``tasks`` are the open tasks in frontier order: the first is the next best
    step. The conversation agent is offered exactly the tools and delegates the
    tasks' integrations grant; a delegate (``agent`` another catalog agent,
    ``request`` what it was asked) only its own. The last ``history`` turns are
    sent; the earlier ones are summarised as a count. No agent is offered a
    tool in ``withheld``: a flow of the job's playbook guards it with an
    approval, and only that flow calls it (docs/flows.md). ``known`` is the
    job's subject key and its current facts: the conversation agent is told
    the most relevant of them to the open tasks and the person's latest turn,
    within ``known_tokens`` (docs/memory.md, "Given to agents"). ``earlier``
    is the job's own summary of the turns no longer sent, shown in a section
    of its own as our unverified words (docs/memory.md, "Summaries are claims").
    """
    spec = catalog.agents[agent]
    lines = [f"Agent: {agent}", spec.instructions.strip()]
    lines.extend(catalog.skills[s].strip() for s in spec.skills if s in catalog.skills)
    if agent == CONVERSATION:
        lines += _job_lines(playbook_instructions, tasks, subject, contacts)
        if known is not None:
            lines += known_lines(known[0], known[1], _asked(tasks, turns), known_tokens)
        tool_names, delegates = catalog.grants(i for t in tasks for i in t.integrations)
    else:
        tool_names, delegates = spec.tools, spec.delegates
        if request is not None:
            lines.append(f"You were asked: {request.strip()}")
    lines.append(EVIDENCE)
    kept = _kept(turns, history, lines)
    if agent == CONVERSATION and len(kept) < len(turns):
        lines += earlier_lines(earlier)
    return ModelRequest(
        agent,
        "\n".join(line for line in lines if line),
        tuple(_message(t) for t in kept),
        _offers(catalog, tool_names, delegates, withheld),
    )


def _asked(tasks: Sequence[OpenTask], turns: Sequence[Turn]) -> list[str]:
    """What the subject's facts are ranked against: the open tasks' milestones
    and instructions, and the person's latest turn."""
    asked = [f"{t.milestone} {t.instructions}" for t in tasks]
    latest = next((t.text for t in reversed(turns) if t.role == "person"), None)
    return [*asked, latest] if latest is not None else asked


def _kept(turns: Sequence[Turn], history: int, lines: list[str]) -> list[Turn]:
    """The last ``history`` turns; a line in ``lines`` counts the earlier ones."""
    earlier = len(turns) - history if history >= 0 else 0
    if earlier > 0:
        lines.append(f"({earlier} earlier turns of this conversation are not shown.)")
        return list(turns[earlier:])
    return list(turns)


def compose_closing(
    catalog: Catalog,
    *,
    playbook_instructions: str,
    closed: Mapping[str, str],
    subject: Mapping[str, Any],
    contacts: Sequence[Any],
    turns: Sequence[Turn],
    history: int = 20,
) -> ModelRequest:
    """The closing turn's request (docs/agents.md, "The closing turn"): no task
    is open any more and the person's latest turn is unanswered, so the
    conversation agent tells them, once, what was done. ``closed`` is how each
    of the job's closed milestones ended; the tool results in the history are
    the evidence. No tool is offered: the job's work is over."""
    spec = catalog.agents[CONVERSATION]
    lines = [f"Agent: {CONVERSATION}", spec.instructions.strip()]
    lines.extend(catalog.skills[s].strip() for s in spec.skills if s in catalog.skills)
    if playbook_instructions:
        lines.append(f"Playbook: {playbook_instructions.strip()}")
    lines.append(
        "Closing: no task of this job is open any more. Answer the person's latest "
        "message and tell them, in one message, what was done; ask for nothing and "
        "promise nothing more."
    )
    done = [m for m, outcome in closed.items() if outcome == "done"]
    lines.append(f"Done: {', '.join(done) if done else 'nothing'}")
    others = [f"{m} ({outcome})" for m, outcome in closed.items() if outcome != "done"]
    if others:
        lines.append(f"Not done: {', '.join(others)}")
    lines.append(f"Subject: {_json(subject)}")
    lines.append(f"Contacts: {_json(list(contacts))}")
    lines.append(EVIDENCE)
    kept = _kept(turns, history, lines)
    return ModelRequest(
        CONVERSATION, "\n".join(line for line in lines if line), tuple(_message(t) for t in kept)
    )


def _job_lines(
    playbook_instructions: str,
    tasks: Sequence[OpenTask],
    subject: Mapping[str, Any],
    contacts: Sequence[Any],
) -> list[str]:
    """What the conversation agent is told of the job: its playbook, the next
    best step and the other open tasks, its subject and contacts."""
    lines = [f"Playbook: {playbook_instructions.strip()}" if playbook_instructions else ""]
    if tasks:
        first, *rest = tasks
        lines.append(f"Next best step: {first.milestone}")
        lines.append(f"  {first.instructions.strip()} (deadline {first.deadline})")
        if rest:
            lines.append("Also open (the person may prefer one of these):")
            lines.extend(
                f"- {t.milestone}: {t.instructions.strip()} (deadline {t.deadline})" for t in rest
            )
    else:
        lines.append("No task is open: answer, and promise nothing.")
    lines.append(f"Subject: {_json(subject)}")
    lines.append(f"Contacts: {_json(list(contacts))}")
    return lines


def _offers(
    catalog: Catalog,
    tool_names: Iterable[str],
    delegates: Iterable[str],
    withheld: Collection[str],
) -> tuple[ToolOffer, ...]:
    """The tools offered (those in the catalog, none ``withheld``, an mcp tool
    as its server lists it: docs/agents.md, "MCP servers"), then the delegates
    (called as tools)."""
    offered = (
        (name, catalog.offer(name))
        for name in tool_names
        if name in catalog.tools and name not in withheld
    )
    offers = [ToolOffer(name, *offer) for name, offer in offered if offer is not None]
    offers.extend(
        ToolOffer(
            name,
            catalog.agents[name].description or f"Ask the {name} agent, in plain words.",
            DELEGATE_PARAMETERS,
            "delegate",
        )
        for name in delegates
        if name in catalog.agents
    )
    return tuple(offers)


def _message(turn: Turn) -> tuple[Literal["user", "assistant"], str]:
    if turn.role == "agent":
        return ("assistant", turn.text)
    if turn.role == "tool":
        return ("user", f"{TOOL_TURN}{turn.name}) {turn.text}")
    return ("user", turn.text)


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
