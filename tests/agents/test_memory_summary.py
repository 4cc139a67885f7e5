"""A job's rolling summary (agents/memory/summary.py; docs/memory.md, "Summaries
are claims"): runs of the conversation agent through the real openai client
against the stand-in model over HTTP, which records every request. A
conversation longer than the turns a model is sent gets one summary call (agent
``summary``, journaled), whose note is published to ``memory-facts`` under the
job's subject, labelled ``agent`` with the turns it came from, and shown to the
agent's turn in a section of its own; a run cut short after it replays it
without paying again and publishes the same note again."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
import pytest
from pydantic import BaseModel

from agents.compose import Turn
from agents.dev.standin import build_standin
from agents.memory.profiles import Profiles
from agents.memory.summary import SUMMARY_EVERY, due
from agents.model import Model, ModelSettings
from agents.run import Conversation, Outbox, RunEnd, Runner
from agents.tools.executor import Executor
from tests.agents.test_memory_service import Recording
from tests.agents.test_run import CATALOG, opened
from topics import JournalModelCall, MemoryNote, ProfileFact, ProfileNote, SubjectProfile, Topics

EARLIER = "Earlier in this conversation (our own summary, not verified; turns 1-10):"


class Rig:
    """The stand-in (recorded) and what runs published and saved."""

    def __init__(self, serve: Callable[[Any], str]) -> None:
        self.standin = Recording(build_standin())
        self.url = serve(self.standin)
        self.memory = Profiles(Topics())
        self.published: list[tuple[str, str, BaseModel]] = []
        self.saves: list[dict[str, Any]] = []

    def run(self, conv: Conversation) -> RunEnd:
        async def publish(topic: str, key: str, record: BaseModel) -> None:
            self.published.append((topic, key, record))

        async def save(c: Conversation) -> None:
            self.saves.append(copy.deepcopy(c.to_json()))

        async def go() -> RunEnd:
            model = Model(ModelSettings(api_key="sk-test", base_url=f"{self.url}/v1"))
            async with httpx2.AsyncClient() as client:
                executor = Executor(CATALOG, client, {})
                runner = Runner(CATALOG, model, executor, memory=self.memory)
                try:
                    return await runner.run(conv, Outbox(publish, save))
                finally:
                    await model.close()

        return asyncio.run(go())

    def requests(self, agent: str) -> list[str]:
        return [
            str(b["instructions"])
            for b in self.standin.bodies
            if f"Agent: {agent}\n" in str(b.get("instructions"))
        ]

    def notes(self) -> list[tuple[str, str, MemoryNote]]:
        return [(t, k, r) for t, k, r in self.published if isinstance(r, MemoryNote)]


@pytest.fixture
def rig(serve: Callable[[Any], str]) -> Rig:
    return Rig(serve)


def long_job(turns: int, subject: dict[str, Any] | None = None) -> Conversation:
    """A job whose conversation has ``turns`` turns, person and agent in turn."""
    conv = Conversation("job-1")
    record = opened("welcome", ["email"], ["welcome"])
    given = {"id": "s-long"} if subject is None else subject
    assert conv.apply(record.model_copy(update={"subject": given}))
    for n in range(1, turns + 1):
        if n % 2:
            conv.add_turn(Turn("person", f"Message number {n} about the invoice", "ada"))
        else:
            conv.add_turn(Turn("agent", f"Answer number {n}"))
    return conv


def test_a_long_conversation_is_summarised_once_as_an_agent_note_and_shown_apart(
    rig: Rig,
) -> None:
    conv = long_job(30)  # 20 shown: turns 1-10 are hidden
    end = rig.run(conv)
    assert end.reason == "done"
    [summary] = rig.requests("summary")
    assert "Summarise: turns 1-10 of the conversation of job job-1" in summary
    [(topic, key, note)] = rig.notes()
    assert (topic, key) == ("memory-facts", "s-long")
    assert (note.source, note.kind, note.job_key) == ("agent", "summary", "job-1")
    assert (note.turn_from, note.turn_to, note.note_id) == (1, 10, "job-1/summary/10")
    # The stand-in's summary names what the person said in turns 1-10, not later.
    assert "Message number 9 " in note.text
    assert "Message number 11 " not in note.text
    [asked] = rig.requests("conversation")
    section = asked.split(EARLIER, 1)
    assert len(section) == 2, asked
    assert section[1].lstrip().startswith(note.text)
    assert "(10 earlier turns of this conversation are not shown.)" in section[0]
    # Never read by a condition: nothing of it goes to the inbox (only the reply's agent_said).
    inbox = [r for t, _, r in rig.published if t == "inbox"]
    assert [(r.action, r.source) for r in inbox] == [("agent_said", "agent")]
    assert note.text not in str(inbox)
    journaled = [r for _, _, r in rig.published if isinstance(r, JournalModelCall)]
    assert [j.agent for j in journaled] == ["summary", "conversation"]
    assert conv.summarized == 10


def test_no_summary_before_ten_turns_are_hidden_nor_for_a_job_without_a_subject(
    rig: Rig,
) -> None:
    rig.run(long_job(20 + SUMMARY_EVERY - 1))
    conv = long_job(40, subject={})
    conv.contacts = []
    rig.run(conv)
    assert rig.requests("summary") == []
    assert rig.notes() == []
    assert all(EARLIER.split(";")[0] not in r for r in rig.requests("conversation"))


def test_a_run_cut_short_after_its_summary_replays_it_and_publishes_the_same_note(
    rig: Rig,
) -> None:
    rig.run(long_job(30))
    [(_, _, first)] = rig.notes()
    # The checkpoint taken right after the summary step, as a crash would leave it.
    taken = next(s for s in rig.saves if any(t["kind"] == "summary" for t in s["tape"]))
    assert taken["summarized"] == 10
    resumed = Conversation.from_json(taken)
    assert resumed.active is not None
    rig.run(resumed)
    assert len(rig.requests("summary")) == 1  # not paid for again
    [(_, _, _), (_, key, again)] = rig.notes()
    assert (key, again) == ("s-long", first)


def test_the_next_summary_rolls_the_previous_one_in() -> None:
    conv = long_job(40)
    conv.summarized = 10
    previous = ProfileNote(job_key="job-1", note_id="job-1/summary/10", text="Before.",
                           turn_from=1, turn_to=10, at="2026-01-05T09:00:00Z")  # fmt: skip
    span = due(conv, 20, previous)
    assert span is not None
    assert (span.start, span.end, span.previous) == (10, 20, previous)
    assert due(conv, 20, None) is not None
    conv.summarized = 15
    assert due(conv, 20, previous) is None  # 5 more hidden: not yet


def test_the_read_model_keeps_notes_apart_from_facts_and_drops_them_with_the_subject() -> None:
    memory = Profiles(Topics())
    note = ProfileNote(job_key="job-1", note_id="job-1/summary/10", text="Ada asked twice.",
                       turn_from=1, turn_to=10, at="2026-01-05T09:00:00Z")  # fmt: skip
    fact = ProfileFact(name="plan_chosen", value="pro", source="world", event_id="e1",
                       job_key="job-1", valid_from="2026-01-05T09:00:00Z")  # fmt: skip
    only_note = SubjectProfile(subject="s-a", notes=[note])
    both = SubjectProfile(subject="s-b", facts=[fact], notes=[note])
    memory.apply(b"s-a", only_note.model_dump_json(by_alias=True).encode())
    memory.apply(b"s-b", orjson.dumps(both.model_dump(mode="json", by_alias=True)))
    assert memory.facts("s-a") == ()
    assert memory.summary("s-a", "job-1") == note
    assert memory.summary("s-a", "job-2") is None
    assert [f.name for f in memory.facts("s-b")] == ["plan_chosen"]
    memory.apply(b"s-b", None)  # erased
    assert memory.summary("s-b", "job-1") is None
    assert memory.held_bytes == len(memory.held["s-a"]) + len(memory.notes["s-a"])
