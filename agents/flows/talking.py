"""Conversational flows in the agents service (docs/flows.md, "Conversational
flows"). A flow with ``conversation: true`` whose milestone's task is open
runs once per message of the person: the message is a turn of the job's
conversation and the flow's, never the conversation agent's; a message that
comes while a run is out waits for it to end, and gets the next run. A run is
started with the message in the flow's first input, the job's conversation,
and the flow's ``history`` in the job (one ``{at, asked, answered}`` per past
exchange); its ``reply`` goes to whoever wrote, on the channel they wrote on
(agents/flows/service.py, ``FlowDriver._reply``).

Pure bookkeeping on the job's conversation (``conv``: agents/conversation.py,
which imports this package, so it is not imported here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compiler import Flow
from topics import MessageRecord

from agents.compose import Turn
from agents.flows.loading import CONVERSATION_TURNS, Flows
from agents.flows.track import FlowTrack

__all__ = [
    "KEPT_EXCHANGES",
    "answer_of",
    "exchanged",
    "first_turn",
    "next_run_id",
    "take_turn",
    "talking",
    "turn_inputs",
]

#: Past exchanges a conversational flow's ``history`` keeps (the oldest go first).
KEPT_EXCHANGES = CONVERSATION_TURNS
#: Message ids a conversation keeps to know a re-delivery (agents/conversation.py,
#: ``KEPT_TURNS``).
_KEPT_RECEIVED = 200


def talking(conv: Any, flows: Flows) -> FlowTrack | None:
    """The run of the job's conversational flow whose task is open (the first
    in frontier order): where a person's message goes; None when there is none."""
    closed = {t.rpartition("/")[2] for t in conv.closed}
    tracks: dict[str, FlowTrack] = conv.flows
    order = [m for m in conv.frontier if m in tracks] + [
        m for m in tracks if m not in conv.frontier
    ]
    for milestone in order:
        track = tracks[milestone]
        if milestone in closed or track.status == "stopped":
            continue
        if flows.conversational(track.flow):
            return track
    return None


def take_turn(conv: Any, record: MessageRecord, flows: Flows) -> bool | None:
    """A person's message that answers no open question, to the job's
    conversational flow: a turn of the conversation, owed a run of the flow
    (True); not an input the conversation agent owes a run to. None when no
    conversational flow's task is open (the conversation agent's message)."""
    track = talking(conv, flows)
    if track is None:
        return None
    conv.received.append(record.message_id)
    del conv.received[:-_KEPT_RECEIVED]
    conv.last_channel = record.channel
    conv.add_turn(Turn("person", record.text, record.contact))
    track.owed_turns.append(_turn(record.message_id, record.contact, record.channel,
                                  record.text, answer_of(record), record.at))  # fmt: skip
    return True


def first_turn(conv: Any, track: FlowTrack, at: str) -> bool:
    """A conversational flow's task opened (at ``at``): a run for the
    person's latest message when it is unanswered (the conversation's last
    turn is theirs; its exchange is dated ``at``), else none until a message
    comes (``idle``). True when a run is owed."""
    last = conv.turns[-1] if conv.turns else None
    if last is None or last.role != "person":
        track.status = "idle"
        return False
    message_id = conv.received[-1] if conv.received else f"{track.task_id}.opened"
    track.owed_turns.append(_turn(message_id, last.name, conv.last_channel, last.text,
                                  last.text, at))  # fmt: skip
    track.status = "idle"
    return True


def next_run_id(conv: Any, track: FlowTrack) -> str:
    """The run id of the track's next run: an idle track's own (no run used
    it), else the next of the conversation's flow runs (docs/flows.md, "Ids")."""
    if track.status == "idle" and track.state is None:
        return track.run_id
    conv.flow_runs += 1
    return f"{track.task_id}#{conv.flow_runs}"


def turn_inputs(
    flow: Flow | None, inputs: Mapping[str, Any], turn: Mapping[str, Any]
) -> dict[str, Any]:
    """A run's inputs for the message ``turn``: the message (its text, or the
    file or answer it carries) in the flow's first input, over what the job's
    subject gave it."""
    found = dict(inputs)
    if flow is not None and flow.spec.inputs:
        found[flow.spec.inputs[0]] = turn.get("value", turn.get("text"))
    return found


def exchanged(history: Any, turn: Mapping[str, Any] | None, answered: str) -> list[Any]:
    """The flow's history after a run that finished: one ``{at, asked,
    answered}`` more (the message, and what the person was told), the last
    ``KEPT_EXCHANGES`` kept."""
    past = list(history) if isinstance(history, list) else []
    if turn is not None:
        past.append({"at": turn.get("at"), "asked": turn.get("text", ""), "answered": answered})
    return past[-KEPT_EXCHANGES:]


def _turn(
    message_id: str, contact: str | None, channel: str | None, text: str, value: Any, at: str | None
) -> dict[str, Any]:
    return {"message_id": message_id, "contact": contact, "channel": channel, "text": text,
            "value": value, "at": at}  # fmt: skip


def answer_of(record: MessageRecord) -> Any:
    """What a person's message carries: the answer as given to the API, else its text."""
    return record.answer if record.answer is not None else record.text
