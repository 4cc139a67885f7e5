"""What a flow says to a person (docs/flows.md, "What a person reads" and "A
reply to the person"), in process: the agents service with its writes
captured as they go on the wire, and the email channel sending to a real local
SMTP server. An approval's shown channels are readable fields, never JSON, in
chat, in mail and in its ``journal.interrupt``; the flow's ``reply`` reaches
the person once when the run finishes, and a resume from any checkpoint, a
re-delivered ``task.closed`` or a re-delivered message never sends it twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiosmtpd.controller import Controller
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.channels.mail_service import MailChannel
from agents.dev.standin import build_standin
from agents.flows.files import flow_tools
from agents.flows.service import FlowDriver, Flows, answer_input
from agents.model import ModelSettings
from agents.run import Conversation
from agents.service import AgentService, Where
from compiler import CallTool, FlowInput, ToolResult, load_flow
from stream.gateway.readmodels.jobs import ReadModel
from stream.runtime.broker import free_port
from stream.runtime.config import Settings
from tests.agents.channels.test_mail import Sink
from tests.agents.flows.test_flow_service import CATALOG, SCRIPT, folder, opened, shop
from tests.lanes import Lane, wait_for
from tests.stream.gateway.conftest import GatewayProcess, start_gateway
from topics import MessageRecord, TaskClosedRecord, Topics
from topics.mail import MailSettings, SmtpTarget

__all__ = ["start_gateway"]  # the fixture, shared

ADA = {"name": "Ada", "email": "ada@example.com"}
FLOW = """\
version: "1"
description: Refund an order once the customer approves; tell them it is done.
inputs: [order_id]
outputs: [refund]
reply: refund
state:
  order_id: {type: string, description: The order number.}
  order: {type: object, description: The order as the shop returns it.}
  refund: {type: object, description: The refund as the shop confirmed it.}
tools: [get_order, refund_order]
start: lookup
nodes:
  - {id: lookup, type: tool, tool: get_order, args: {id: "{{order_id}}"}, output: order}
  - {id: approve, type: approval, before: pay, ask: "Refund {{order_id}}?",
     show: [order_id, order], onReject: END, approvers: [contacts]}
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: refund}
edges:
  - {from: lookup, to: approve}
  - {from: pay, to: END}
"""
ORDER = {
    "id": "A-17",
    "status": "shipped",
    "total": 120.0,
    "customer": {"name": "Ada", "city": "Ghent"},
    "items": [{"sku": "W-1", "qty": 2}, "gift wrap"],
    "note": 'leave at door\n"Amount": 0 }',
}
REFUND = {"id": "A-17", "status": "refunded", "amount": 120}
RUN = "o-1/resolve#1"
INTERRUPT = f"{RUN}/approve/1"
APPROVAL_TEXT = """\
Refund A-17? (answer yes or no)

The order number: A-17
The order as the shop returns it:
  ID: A-17
  Status: shipped
  Total: 120
  Customer:
    Name: Ada
    City: Ghent
  Items:
    - Sku: W-1
      Qty: 2
    - gift wrap
  Note: leave at door "Amount": 0 }"""
REPLY_TEXT = """\
The refund as the shop confirmed it:
  ID: A-17
  Status: refunded
  Amount: 120"""
JSON_MARKS = set("{}[]")


def _flows(text: str = FLOW) -> Flows:
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(text, "flows/refund.yaml", "refund", tools=flow_tools(catalog))
    return Flows({"refund": flow}, {("orders", "resolve"): "refund"})


async def _execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
    assert isinstance(action, CallTool)
    result = ORDER if action.tool == "get_order" else REFUND
    return ToolResult(call_id=action.call_id, ok=True, result=result)


class Wire:
    """The agents service in process, its records captured as encoded for Kafka."""

    def __init__(self, tmp_path: Path, flows: Flows) -> None:
        self.sent: list[tuple[str, bytes]] = []

        async def send(
            topic: str, key: bytes | None, value: bytes | None, headers: Any, part: int | None
        ) -> None:
            self.sent.append((topic.rsplit(".", 1)[-1], value or b""))

        catalog = load_catalog(CATALOG, "catalog.yaml")
        self.service = AgentService(
            Settings(data_dir=tmp_path / "agents"), catalog, ModelSettings(api_key="sk-test"),
            send=send, flows=flows,
        )  # fmt: skip
        self.service.execute = _execute
        self.service.partitions[0] = asyncio.Event()
        self.service.partitions[0].set()

    def records(self, topic: str) -> list[dict[str, Any]]:
        return [orjson.loads(v) for t, v in self.sent if t == topic]

    def raw(self, topic: str) -> list[bytes]:
        return [v for t, v in self.sent if t == topic]

    async def take(self, topic: str, record: BaseModel) -> None:
        where = Where(getattr(self.service.topics, topic), 0, 0, 0, b"o-1", [])
        await self.service.on_record(record.model_dump_json(by_alias=True).encode(), where)
        await asyncio.gather(*self.service.running.values())

    def close(self) -> None:
        self.service.db.close()
        self.service.offsets.close()


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[Wire]:
    found = Wire(tmp_path, _flows())
    yield found
    found.close()


def _task() -> BaseModel:
    return opened({"order_id": "A-17"}).model_copy(update={"contacts": [ADA]})


def _answer(message_id: str, text: str) -> MessageRecord:
    return MessageRecord(
        job_key="o-1", message_id=message_id, direction="in", channel="email",
        contact="ada@example.com", text=text, at="2026-01-05T09:05:00Z",
    )  # fmt: skip


class FakeProducer:
    """What the mail channel writes (its journal), kept."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send_and_wait(
        self, topic: str, value: bytes, key: bytes, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        self.values.append(value)


@pytest.fixture
def mail(tmp_path: Path) -> Iterator[tuple[MailChannel, Sink]]:
    """The email channel's sender, to a real SMTP server on this host."""
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings = MailSettings(
        smtp=SmtpTarget("127.0.0.1", controller.port, tls=False),
        mail_from="agent@lemongraph.test", reply_domain="reply.test", reply_secret="s" * 32,
    )  # fmt: skip
    channel = MailChannel(Settings(data_dir=tmp_path / "mail"), settings, say=lambda _: None)
    channel.producer = FakeProducer()  # type: ignore[assignment]
    try:
        yield channel, sink
    finally:
        controller.stop()


def _body(mail: EmailMessage) -> str:
    return str(mail.get_content()).replace("\r\n", "\n").rstrip("\n")


def test_an_approval_shows_readable_fields_in_chat_mail_and_its_journal_never_json(
    wire: Wire, mail: tuple[MailChannel, Sink]
) -> None:
    channel, sink = mail

    async def go() -> None:
        await wire.take("tasks", _task())
        [raw] = wire.raw("messages")
        [asked] = wire.records("messages")
        assert asked["interrupt_id"] == INTERRUPT
        assert (asked["channel"], asked["contact"]) == ("email", "ada@example.com")
        assert asked["text"] == APPROVAL_TEXT
        # Nothing of JSON's own: the braces, brackets and quotes are the note's text.
        for line in asked["text"].splitlines():
            if not line.lstrip().startswith("Note:"):
                assert not set(line) & (JSON_MARKS | {'"'}), line
        [opened_one] = [r for r in wire.records("journal") if r["type"] == "journal.interrupt"]
        assert opened_one["question"] == "Refund A-17? (answer yes or no)"
        assert opened_one["show"] == {"order_id": "A-17", "order": ORDER}  # the data, for the API
        assert [(f["channel"], f["label"], f["block"]) for f in opened_one["shown"]] == [
            ("order_id", "The order number", False),
            ("order", "The order as the shop returns it", True),
        ]
        assert opened_one["shown"][1]["text"].splitlines()[:2] == ["ID: A-17", "Status: shipped"]
        # By mail: the same text is the email's body.
        assert await channel.deliver(raw) == "sent"
        [(_, rcpts, email)] = sink.mails
        assert rcpts == ["ada@example.com"]
        assert _body(email) == APPROVAL_TEXT

    asyncio.run(go())


def test_the_flows_reply_reaches_the_person_once_when_the_run_finishes(
    wire: Wire, mail: tuple[MailChannel, Sink]
) -> None:
    channel, sink = mail

    async def go() -> None:
        await wire.take("tasks", _task())
        await wire.take("messages", _answer("mail-1", "yes"))  # Ada approves by email
        [end] = [r for r in wire.records("journal") if r["type"] == "journal.flow"
                 and r["event"] == "finished"]  # fmt: skip
        assert end["outputs"] == {"refund": REFUND}
        out = [m for m in wire.records("messages") if m["direction"] == "out"]
        assert [m["message_id"] for m in out] == [f"ask:{INTERRUPT}", f"reply:{RUN}"]
        reply = out[1]
        assert reply["text"] == REPLY_TEXT
        assert (reply["channel"], reply["contact"]) == ("email", "ada@example.com")
        assert (reply["agent"], reply["task_id"], reply["interrupt_id"]) == (
            "flow:refund", "o-1/resolve", None,
        )  # fmt: skip
        # the conversation knows what the person was told
        assert wire.service.load("o-1").turns[-1].text == REPLY_TEXT
        # The task closes on the refund, and is re-delivered; the person's
        # answer is re-delivered: nothing more is said.
        task_closed = TaskClosedRecord(
            task_id="o-1/resolve", job_key="o-1", milestone="resolve",
            at="2026-01-05T09:06:00Z", outcome="done",
        )  # fmt: skip
        for record in (task_closed, task_closed):
            await wire.take("tasks", record)
        await wire.take("messages", _answer("mail-1", "yes"))
        assert [m["message_id"] for m in wire.records("messages") if m["direction"] == "out"] == [
            f"ask:{INTERRUPT}", f"reply:{RUN}",
        ]  # fmt: skip
        # By mail, once, even when its record comes twice.
        for raw in wire.raw("messages"):
            await channel.deliver(raw)
        assert await channel.deliver(wire.raw("messages")[1]) == "duplicate"
        assert [_body(m) for _, _, m in sink.mails] == [APPROVAL_TEXT, REPLY_TEXT]

    asyncio.run(go())


def test_a_resume_from_any_checkpoint_never_says_the_reply_twice() -> None:
    """The run driven to its end, then resumed from each checkpoint it wrote (a
    crash after it): a checkpoint taken after the reply resumes silent; one
    taken before it says it again under the same message id, which the web
    channel's read model keeps once, so the person is told exactly once."""
    flows = _flows()
    saved: list[bytes] = []
    said: list[MessageRecord] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        if isinstance(record, MessageRecord):
            said.append(record)

    async def save(conv: Conversation) -> None:
        saved.append(orjson.dumps(conv.to_json()))

    now = datetime(2026, 1, 5, 9, tzinfo=UTC)
    driver = FlowDriver(flows, _execute, publish, save, clock=lambda: now)

    async def finish(conv: Conversation) -> None:
        track = conv.flows["resolve"]
        await driver.drive(conv, track)
        if track.status == "waiting" and not track.queued:
            track.queued.append(answer_input(INTERRUPT, "yes"))  # the answer, re-delivered
            await driver.drive(conv, track)
        assert track.status == "finished"

    async def go() -> None:
        conv = Conversation("o-1")
        task = _task()
        conv.apply(task)  # type: ignore[arg-type]
        conv.open_flow(task, "refund", {"order_id": "A-17"})  # type: ignore[arg-type]
        await finish(conv)
        first = [m.message_id for m in said]
        assert first == [f"ask:{INTERRUPT}", f"reply:{RUN}"]
        checkpoints = list(saved)
        for checkpoint in checkpoints:
            said_before = len(said)
            await finish(Conversation.from_json(orjson.loads(checkpoint)))
            again = [m for m in said[said_before:] if m.message_id.startswith("reply:")]
            finished = orjson.loads(checkpoint)["flows"]["resolve"]["status"] == "finished"
            assert len(again) == (0 if finished else 1), (checkpoint, again)
            assert all(m.message_id == f"reply:{RUN}" and m.text == REPLY_TEXT for m in again)
        # The web channel shows a message id once, however often it is written.
        model = ReadModel(Topics("t."), {})
        for record in said:
            model.apply("t.messages", b"o-1", record.model_dump_json(by_alias=True).encode())
        shown = [m for m in model.messages["o-1"] if m["message_id"].startswith("reply:")]
        assert [m["text"] for m in shown] == [REPLY_TEXT]

    asyncio.run(go())


@pytest.mark.parametrize("value", [None, "", {}, []])
def test_a_reply_left_empty_says_nothing(value: Any) -> None:
    said: list[MessageRecord] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        if isinstance(record, MessageRecord) and record.message_id.startswith("reply:"):
            said.append(record)

    async def save(conv: Conversation) -> None:
        pass

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        assert isinstance(action, CallTool)
        result = ORDER if action.tool == "get_order" else value
        return ToolResult(call_id=action.call_id, ok=True, result=result)

    async def go() -> None:
        conv = Conversation("o-1")
        conv.open_flow(_task(), "refund", {"order_id": "A-17"})  # type: ignore[arg-type]
        track = conv.flows["resolve"]
        driver = FlowDriver(_flows(), execute, publish, save)
        await driver.drive(conv, track)
        track.queued.append(answer_input(INTERRUPT, "yes"))
        await driver.drive(conv, track)
        assert track.status == "finished"

    asyncio.run(go())
    assert said == []


# -- against a real broker -------------------------------------------------------------

OPERATORS_FLOW = FLOW.replace(", approvers: [contacts]", "")


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_the_reply_is_in_the_jobs_conversation_once_the_operators_approval_is_done(
    lane: Lane, serve: Callable[[Any], str], start_gateway: Callable[..., GatewayProcess]
) -> None:
    """The worker, ``lemongraph agents`` and the gateway: the operators approve
    the refund on the API; the flow's reply is on ``messages`` once, readable,
    when the run is journaled finished, and the job's conversation shows it."""
    folder(lane)
    (lane.playbooks / "flows" / "refund.yaml").write_text(OPERATORS_FLOW)
    tools = shop()
    lane.start_worker()
    lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1",
        OPENAI_API_KEY="sk-test", SHOP_URL=serve(tools),
    )  # fmt: skip
    gateway = start_gateway()
    lane.send(
        {"type": "job.start", "key": "o-1", "playbook_key": "orders",
         "subject": {"order_id": "A-1"}},
    )  # fmt: skip
    with gateway.client(gateway.token(approver=True)) as client:
        [asked] = wait_for(
            lambda: client.get("/v1/jobs/o-1/interrupts").json().get("interrupts"),
            timeout=120,
            what="the approval",
        )
        assert [f["label"] for f in asked["shown"]] == [
            "The order number",
            "The order as the shop returns it",
        ]
        assert asked["shown"][1]["text"] == "ID: A-1\nStatus: paid"
        answered = client.post(
            "/v1/jobs/o-1/answers", json={"interrupt_id": asked["interrupt_id"], "answer": "yes"}
        )
        assert answered.status_code == 202, answered.text
        lane.wait_until(
            "journal",
            lambda rs: any(r["value"]["type"] == "journal.flow"
                           and r["value"]["event"] == "finished" for r in rs),
            timeout=120,
        )  # fmt: skip
        # The reply is written before the end is journaled: it is there now.
        said = [m["value"] for m in lane.read("messages") if m["value"]["direction"] == "out"]
        assert [m["message_id"] for m in said] == [f"ask:{INTERRUPT}", f"reply:{RUN}"]
        # (the first: the note that it waits for the operators' approval)
        assert (said[1]["channel"], said[1]["text"]) == (
            "web", "The refund as the shop confirmed it:\n  ID: A-1\n  Status: paid",
        )  # fmt: skip
        shown = wait_for(
            lambda: [m for m in client.get("/v1/jobs/o-1/messages").json()["messages"]
                     if m["message_id"].startswith("reply:")],
            what="the reply in the job's conversation",
        )  # fmt: skip
        assert [m["text"] for m in shown] == [said[1]["text"]]
    assert [name for name, _ in tools.state.calls] == ["orders", "refund"]
