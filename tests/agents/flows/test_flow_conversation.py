"""Conversational flows in the agents service (docs/flows.md, "Conversational
flows"), in process: the real AgentService and FlowDriver, the real ``openai``
client against the stand-in model served on a local port, the service's writes
captured as they go on the wire. A flow with ``conversation: true`` runs once
per message of the person (and once when its task opens on a message not yet
answered); each run's ``reply`` goes to whoever wrote, on their channel, once,
and is the only answer (the conversation agent says nothing); the next run
reads the exchange in ``{{history}}``; a re-delivered message starts no run; a
run resumed from any checkpoint does not say its reply twice."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.flows.files import flow_tools
from agents.flows.service import FlowDriver, Flows
from agents.model import ModelSettings
from agents.run import Conversation
from agents.service import Where
from compiler import CallModel, FlowInput, ModelReply, load_flow
from stream.gateway.readmodels.jobs import ReadModel
from tests.agents.flows.test_flow_person import Wire as PersonWire
from tests.agents.flows.test_flow_service import CATALOG
from tests.compiler.flows.test_flow_conversation import CHAT
from topics import MessageRecord, TaskOpenedRecord, Topics

FLOW = CHAT  # a question about an order, answered in the light of the history
FIRST = "It left our warehouse in Ghent today."
SECOND = "Tomorrow before noon (you asked where A-17 is)."
#: The second answer is only given to a prompt whose history holds the first exchange.
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"prompt_contains": f'"answered": "{FIRST}"'}, "say": SECOND},
            {"when": {"prompt_contains": "Now: Where is A-17?"}, "say": FIRST},
        ]
    }
)
ADA = {"name": "Ada", "email": "ada@example.com"}
TASK = "o-1/chat"


def _flows() -> Flows:
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(FLOW, "flows/chat.yaml", "chat", tools=flow_tools(catalog))
    return Flows({"chat": flow}, {("orders", "chat"): "chat"})


def _opened() -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=TASK, job_key="o-1", milestone="chat", at="2026-01-05T09:00:00Z",
        instructions="Answer.", playbook_instructions="", integrations=["shop"],
        deadline="2026-01-08T09:00:00Z", frontier=["chat"], playbook_key="orders",
        subject={}, contacts=[ADA],
    )  # fmt: skip


def _message(message_id: str, text: str, channel: str, at: str) -> MessageRecord:
    return MessageRecord(
        job_key="o-1", message_id=message_id, direction="in", channel=channel,
        contact="ada@example.com", text=text, at=at,
    )  # fmt: skip


class Wire(PersonWire):
    """The agents service in process on the stand-in model (its flows' model
    calls through the real flow executor), its records captured as encoded
    for Kafka."""

    def __init__(self, tmp_path: Path, model_url: str) -> None:
        super().__init__(tmp_path, _flows())
        self.service.model_settings = ModelSettings(api_key="sk-test", base_url=f"{model_url}/v1")
        self.service.execute = None

    def said(self) -> list[dict[str, Any]]:
        return [m for m in self.records("messages") if m["direction"] == "out"]

    async def give(self, topic: str, record: BaseModel) -> None:
        """The record, taken; its run is not waited for."""
        where = Where(getattr(self.service.topics, topic), 0, 0, 0, b"o-1", [])
        await self.service.on_record(record.model_dump_json(by_alias=True).encode(), where)

    async def take(self, topic: str, record: BaseModel) -> None:
        """The record, taken, and the runs it started, done."""
        await self.give(topic, record)
        await self.settle()

    async def settle(self) -> None:
        while any(not t.done() for t in self.service.running.values()):
            await asyncio.gather(*self.service.running.values())

    def run(self, test: Callable[[], Awaitable[None]]) -> None:
        """The test in the service's loop; then the service closed (its model
        client, its store) in it."""

        async def go() -> None:
            try:
                await test()
            finally:
                await self.service.close()

        asyncio.run(go())


@pytest.fixture
def standin(serve: Callable[[Any], str]) -> tuple[Any, str]:
    model = build_standin(SCRIPT)
    return model, serve(model)


@pytest.fixture
def wire(tmp_path: Path, standin: tuple[Any, str]) -> Wire:
    return Wire(tmp_path, standin[1])


def _events(wire: Wire) -> list[tuple[str, str]]:
    return [
        (r["run_id"], r["event"])
        for r in wire.records("journal")
        if r["type"] == "journal.flow" and r["event"] != "node"
    ]


def test_two_messages_are_two_runs_and_two_replies_a_redelivery_none(
    wire: Wire, standin: tuple[Any, str]
) -> None:
    model, _ = standin

    async def go() -> None:
        # The first message comes before the task opens: the task's opening runs on it.
        first = _message("web-1", "Where is A-17?", "web", "2026-01-05T08:59:00Z")
        await wire.take("messages", first)
        assert wire.said() == []
        await wire.take("tasks", _opened())
        [reply] = wire.said()
        assert (reply["message_id"], reply["text"]) == (f"reply:{TASK}#1", FIRST)
        assert (reply["channel"], reply["contact"], reply["agent"]) == (
            "web", "ada@example.com", "flow:chat",
        )  # fmt: skip
        # The second comes by email, and is answered there, knowing the first exchange.
        second = _message("mail-2", "And when does it arrive?", "email", "2026-01-05T09:05:00Z")
        await wire.take("messages", second)
        replies = wire.said()
        assert [(m["message_id"], m["channel"], m["text"]) for m in replies] == [
            (f"reply:{TASK}#1", "web", FIRST),
            (f"reply:{TASK}#2", "email", SECOND),
        ]
        assert _events(wire) == [
            (f"{TASK}#1", "started"), (f"{TASK}#1", "finished"),
            (f"{TASK}#2", "started"), (f"{TASK}#2", "finished"),
        ]  # fmt: skip
        # Re-delivered, both messages and the task's opening start nothing.
        for topic, record in (("messages", first), ("messages", second), ("tasks", _opened())):
            await wire.take(topic, record)
        assert len(wire.said()) == 2
        assert len(_events(wire)) == 4
        # One reply per turn: the conversation agent never ran, and the model
        # was called once per message.
        assert [r for r in wire.records("journal") if r["type"] == "journal.run"] == []
        assert model.state.calls == 2
        # A reply is no evidence: nothing went to the inbox.
        assert wire.records("inbox") == []
        conv = wire.service.load("o-1")
        assert conv.remembered["chat"]["history"] == [
            {"at": "2026-01-05T09:00:00Z", "asked": "Where is A-17?", "answered": FIRST},
            {"at": "2026-01-05T09:05:00Z", "asked": "And when does it arrive?",
             "answered": SECOND},
        ]  # fmt: skip
        assert [(t.role, t.text) for t in conv.turns] == [
            ("person", "Where is A-17?"), ("agent", FIRST),
            ("person", "And when does it arrive?"), ("agent", SECOND),
        ]  # fmt: skip

    wire.run(go)


def test_a_message_while_a_run_is_out_gets_the_next_run(wire: Wire) -> None:
    async def go() -> None:
        await wire.take("tasks", _opened())
        assert wire.said() == []
        assert _events(wire) == []  # no message: no run
        await wire.give("messages", _message("web-1", "Where is A-17?", "web",
                                             "2026-01-05T09:01:00Z"))  # fmt: skip
        # The second message, by email, is taken while the first's model call is
        # out: the first reply still goes where the first message came from.
        await wire.give("messages", _message("mail-2", "And when does it arrive?", "email",
                                             "2026-01-05T09:02:00Z"))  # fmt: skip
        assert wire.said() == []
        await wire.settle()
        assert [(m["message_id"], m["channel"], m["text"]) for m in wire.said()] == [
            (f"reply:{TASK}#1", "web", FIRST), (f"reply:{TASK}#2", "email", SECOND),
        ]  # fmt: skip

    wire.run(go)


class Kept:
    """What a FlowDriver wrote: the person's messages, and each checkpoint."""

    def __init__(self) -> None:
        self.messages: list[MessageRecord] = []
        self.checkpoints: list[bytes] = []

    async def publish(self, topic: str, key: str, record: BaseModel) -> None:
        if isinstance(record, MessageRecord):
            self.messages.append(record)

    async def save(self, conv: Conversation) -> None:
        self.checkpoints.append(orjson.dumps(conv.to_json()))


def test_a_resume_from_any_checkpoint_never_says_the_reply_twice() -> None:
    """Two exchanges driven to their end, then each resumed from every
    checkpoint written (a SIGKILL after it): the replies are said under their
    run's message id, which the web channel's read model shows once, and the
    history holds each exchange once."""
    flows = _flows()
    kept = Kept()
    saved, said = kept.checkpoints, kept.messages

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        assert isinstance(action, CallModel)
        return ModelReply(call_id=action.call_id, text=f"answer to {run_id}")

    now = datetime(2026, 1, 5, 9, tzinfo=UTC)
    driver = FlowDriver(flows, execute, kept.publish, kept.save, clock=lambda: now)

    async def work(conv: Conversation) -> None:
        while (track := conv.owed_flow()) is not None:
            await driver.drive(conv, track)

    def message(n: int) -> MessageRecord:
        return _message(f"web-{n}", f"question {n}", "web", f"2026-01-05T09:0{n}:00Z")

    async def go() -> None:
        from agents.flows.talking import take_turn

        conv = Conversation("o-1")
        conv.open_flow(_opened(), "chat", {})
        conv.flows["chat"].status = "idle"
        for n in (1, 2):
            assert take_turn(conv, message(n), flows) is True
        await work(conv)
        replies = [(m.message_id, m.text) for m in said]
        assert replies == [
            (f"reply:{TASK}#1", f"answer to {TASK}#1"),
            (f"reply:{TASK}#2", f"answer to {TASK}#2"),
        ]
        ended = orjson.loads(saved[-1])
        for checkpoint in list(saved):
            resumed = Conversation.from_json(orjson.loads(checkpoint))
            await work(resumed)
            # every resume ends where the run without a crash ended
            assert resumed.to_json()["remembered"] == ended["remembered"]
            assert resumed.to_json()["flows"]["chat"]["run_id"] == f"{TASK}#2"
        assert {(m.message_id, m.text) for m in said} == set(replies)
        model = ReadModel(Topics("t."), {})
        for record in said:
            model.apply("t.messages", b"o-1", record.model_dump_json(by_alias=True).encode())
        shown = [m for m in model.messages["o-1"] if m["message_id"].startswith("reply:")]
        assert [(m["message_id"], m["text"]) for m in shown] == replies
        history = ended["remembered"]["chat"]["history"]
        assert [h["asked"] for h in history] == ["question 1", "question 2"]

    asyncio.run(go())
