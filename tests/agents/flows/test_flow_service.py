"""Flows in the agents service (docs/flows.md, "Flows in the agents service").

In process: a flow run driven step by step, checkpointed in the conversation,
suspended on ``ask`` and resumed from the JSON a restart reads back. Against a
real broker: the real worker, ``lemongraph agents`` and ``lemongraph gateway``
processes, the stand-in model and a local shop. The service is SIGKILLed while
the flow waits on its question; the answer comes through the API after a
restart; no node runs twice, no call is paid twice, a stale or second answer
is refused with 409, and the milestone completes on the flow's tool result."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.flows.files import flow_tools
from agents.flows.service import FlowDriver, Flows, answer_input
from agents.model import ModelSettings
from agents.run import Conversation
from agents.service import AgentService, Where
from compiler import CallTool, FlowInput, ModelReply, ToolResult, load_flow
from stream.gateway.readmodels.jobs import ReadModel
from stream.runtime.config import Settings
from tests.lanes import Lane, wait_for
from tests.stream.gateway.conftest import GatewayProcess, launch_gateway, start_gateway
from topics import MessageRecord, TaskOpenedRecord, Topics

__all__ = ["start_gateway"]

CATALOG = """\
integrations:
  email: {}
  shop: {tools: [get_order, refund_order]}
agents:
  conversation: {instructions: Help the customer.}
tools:
  get_order:
    description: Look an order up.
    parameters:
      type: object
      properties: {id: {type: string}}
      required: [id]
      additionalProperties: false
    http: {url: "${SHOP_URL}/orders", method: POST}
    idempotent: true
    writes: false
    records: {fact: order_found, properties: {status: "$.status"}}
  refund_order:
    description: Refund an order.
    parameters:
      type: object
      properties: {id: {type: string}}
      required: [id]
      additionalProperties: false
    http: {url: "${SHOP_URL}/refund", method: POST}
    idempotent: true
    records: {fact: order_refunded, properties: {id: "$.id"}}
"""
PLAYBOOK = """\
key: orders
version: 1
instructions: Help the customer with their order.
milestones:
  - id: resolve
    instructions: Resolve the customer's order.
    condition: order_refunded
    integrations: [shop, email]
    flow: refund
"""
FLOW = """\
version: "1"
description: Look the order up, decide, ask the customer, then refund.
inputs: [order_id]
outputs: [reply]
state:
  order_id: {type: string, description: The order.}
  order: {type: object, description: The order as the shop returns it.}
  decision: {type: object, description: What should happen.}
  reply: {type: string, description: The customer's answer.}
  refund: {type: object, description: The refund.}
tools: [get_order, refund_order]
start: lookup
nodes:
  - {id: lookup, type: tool, tool: get_order, args: {id: "{{order_id}}"}, output: order}
  - id: decide
    type: llm
    prompt: "Order: {{order}}. What should happen?"
    output: decision
    schema:
      type: object
      properties: {action: {type: string, enum: [refund, nothing]}}
      required: [action]
  - id: confirm
    type: ask
    ask: "Shall I refund order {{order_id}}?"
    answers: ["yes", "no"]
    output: reply
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: refund}
edges:
  - {from: lookup, to: decide}
  - {from: decide, to: confirm}
  - from: confirm
    type: conditional
    when: reply
    routes: {"yes": pay, "no": END}
  - {from: pay, to: END}
"""
SCRIPT = StandinScript.model_validate(
    {"rules": [{"when": {"flow": "refund", "flow_node": "decide"}, "json": {"action": "refund"}}]}
)
NODES = ["lookup", "decide", "confirm", "pay"]


def opened(subject: dict[str, Any]) -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id="o-1/resolve", job_key="o-1", milestone="resolve", at="2026-01-05T09:00:00Z",
        instructions="Resolve.", playbook_instructions="", integrations=["shop"],
        deadline="2026-01-08T09:00:00Z", frontier=["resolve"], playbook_key="orders",
        subject=subject,
    )  # fmt: skip


def test_a_flow_run_suspends_on_ask_and_resumes_from_its_checkpoint() -> None:
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(FLOW, "flows/refund.yaml", "refund", tools=flow_tools(catalog))
    flows = Flows({"refund": flow}, {("orders", "resolve"): "refund"})
    published: list[tuple[str, Any]] = []
    saved: list[dict[str, Any]] = []
    calls: list[str] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append((topic, record.model_dump(mode="json", by_alias=True)))

    async def save(conv: Conversation) -> None:
        saved.append(conv.to_json())

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        calls.append(action.call_id)
        if isinstance(action, CallTool):
            return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1"})
        return ModelReply(call_id=action.call_id, text='{"action": "refund"}')

    driver = FlowDriver(flows, execute, publish, save)

    async def go() -> None:
        conv = Conversation("o-1")
        assert conv.open_flow(opened({"order_id": "A-1"}), "refund", {"order_id": "A-1"})
        assert not conv.open_flow(opened({}), "refund", {})  # re-delivered: nothing
        track = conv.owed_flow()
        assert track is not None
        assert track.run_id == "o-1/resolve#1"
        await driver.drive(conv, track)
        assert track.status == "waiting"
        assert track.open_interrupt() == "o-1/resolve#1/confirm/1"
        assert calls == ["o-1/resolve#1/lookup/1/1", "o-1/resolve#1/decide/1/1"]
        [question] = [r for t, r in published if t == "messages"]
        assert question["interrupt_id"] == "o-1/resolve#1/confirm/1"
        assert question["direction"] == "out"
        assert "A-1" in question["text"]
        # What a restart reads back: the checkpoint, not the live object.
        back = Conversation.from_json(saved[-1])
        assert not back.flow_due  # waiting: nothing to do until an answer or a tick
        waiting = back.waiting_flow("o-1/resolve#1/confirm/1")
        assert waiting is not None
        waiting.queued.append(answer_input("o-1/resolve#1/confirm/1", "yes"))
        waiting.queued.append(answer_input("o-1/resolve#1/confirm/1", "no"))  # a second one
        assert back.owed_flow() is waiting
        await driver.drive(back, waiting)
        assert waiting.status == "finished"
        assert calls[2:] == ["o-1/resolve#1/pay/1/1"]  # nothing before the ask again
        journal = [r for t, r in published if t == "journal"]
        nodes = [r["node"] for r in journal if r["type"] == "journal.flow" and r["event"] == "node"]
        assert nodes == NODES
        interrupts = [(r["status"], r.get("answer")) for r in journal
                      if r["type"] == "journal.interrupt"]  # fmt: skip
        assert interrupts == [("open", None), ("answered", "yes")]
        [end] = [r for r in journal if r["type"] == "journal.flow" and r["event"] == "finished"]
        assert end["outputs"] == {"reply": "yes"}

    asyncio.run(go())


def _racing_driver() -> tuple[FlowDriver, list[tuple[str, Any]], list[str]]:
    """The refund flow's driver in process, its writes acknowledged after a
    moment (as the broker's are), so that a ``task.closed`` read meanwhile
    (``stop``, from the service's consumer) can come between them; what it
    published and the ids of the calls it made."""
    published: list[tuple[str, Any]] = []
    calls: list[str] = []
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(FLOW, "flows/refund.yaml", "refund", tools=flow_tools(catalog))
    flows = Flows({"refund": flow}, {("orders", "resolve"): "refund"})

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append((topic, record.model_dump(mode="json", by_alias=True)))
        await asyncio.sleep(0.01)

    async def save(conv: Conversation) -> None:
        await asyncio.sleep(0.01)

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        calls.append(action.call_id)
        await asyncio.sleep(0.05)
        if isinstance(action, CallTool):
            return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1"})
        return ModelReply(call_id=action.call_id, text='{"action": "refund"}')

    return FlowDriver(flows, execute, publish, save), published, calls


async def _answered_yes(driver: FlowDriver) -> tuple[Conversation, Any, asyncio.Task[None]]:
    """The refund run, waiting on its question, answered "yes": the conversation,
    its track and the drive that goes on from the answer (a task, under way)."""
    conv = Conversation("o-1")
    conv.open_flow(opened({"order_id": "A-1"}), "refund", {"order_id": "A-1"})
    track = conv.owed_flow()
    assert track is not None
    await driver.drive(conv, track)
    assert track.status == "waiting"
    track.queued.append(answer_input("o-1/resolve#1/confirm/1", "yes"))
    return conv, track, asyncio.create_task(driver.drive(conv, track))


def _flow_events(published: list[tuple[str, Any]]) -> list[str]:
    return [
        r["node"] if r["event"] == "node" else r["event"]
        for t, r in published
        if t == "journal" and r["type"] == "journal.flow"
    ]


def test_the_task_closing_on_the_flows_own_result_ends_the_run_once_as_finished() -> None:
    """The refund's fact closes the task while the driver is still journaling
    the pay node and the run's end (its writes take a moment): ``task.closed``
    waits for the step in hand, the pay node is journaled once and the run ends
    ``finished``, as its step function said, not ``stopped`` beside it."""
    driver, published, calls = _racing_driver()

    async def go() -> None:
        conv, track, running = await _answered_yes(driver)
        # the pay call is out, then its result is stepped and checkpointed: the
        # task closes on it while the driver writes what follows
        while "pay" not in track.trail():
            await asyncio.sleep(0.001)
        await asyncio.gather(running, driver.stop(conv, track))
        assert track.status == "finished"
        assert _flow_events(published) == ["started", *NODES, "finished"]
        assert calls[-1] == "o-1/resolve#1/pay/1/1"
        assert len(calls) == 3
        await driver.stop(conv, track)  # a re-delivered task.closed: nothing more
        assert _flow_events(published) == ["started", *NODES, "finished"]

    asyncio.run(go())


def test_the_task_closing_while_a_call_is_out_stops_the_run_where_it_is() -> None:
    """``task.closed`` read while the pay call is out: the run stops at once
    (journaled ``stopped``, the node not completed), and the call's result,
    when it comes, is not stepped; the call is made once."""
    driver, published, calls = _racing_driver()

    async def go() -> None:
        conv, track, running = await _answered_yes(driver)
        while len(calls) < 3:
            await asyncio.sleep(0.001)
        await driver.stop(conv, track)  # while the call is out: not held up by it
        assert track.status == "stopped"
        assert not running.done()
        await running
        assert track.status == "stopped"
        assert _flow_events(published) == ["started", "lookup", "decide", "confirm", "stopped"]
        assert calls[-1] == "o-1/resolve#1/pay/1/1"

    asyncio.run(go())


async def _refund_run() -> dict[str, Any]:
    """The refund flow run in process to its end ("yes"): the conversation's JSON."""
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(FLOW, "flows/refund.yaml", "refund", tools=flow_tools(catalog))
    flows = Flows({"refund": flow}, {("orders", "resolve"): "refund"})
    saved: list[dict[str, Any]] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        pass

    async def save(conv: Conversation) -> None:
        saved.append(conv.to_json())

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        if isinstance(action, CallTool):
            return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1"})
        return ModelReply(call_id=action.call_id, text='{"action": "refund"}')

    driver = FlowDriver(flows, execute, publish, save)
    conv = Conversation("o-1")
    conv.open_flow(opened({"order_id": "A-1"}), "refund", {"order_id": "A-1"})
    track = conv.owed_flow()
    assert track is not None
    await driver.drive(conv, track)
    track.queued.append(answer_input("o-1/resolve#1/confirm/1", "yes"))
    await driver.drive(conv, track)
    assert track.status == "finished"
    return saved[-1]


def test_a_service_run_replays_from_its_conversation_with_no_call(tmp_path: Path) -> None:
    """``flow replay --job`` without the broker: the conversation's JSON, as
    the topic holds it, stepped again; a changed flow names the difference."""
    from io import StringIO

    from agents.flows.replay import replay_job

    conversation = asyncio.run(_refund_run())
    (tmp_path / "flows").mkdir()
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    (tmp_path / "flows" / "refund.yaml").write_text(FLOW)

    def replay(
        conv: dict[str, Any] | None, run: str | None = None, path: Path | None = None
    ) -> tuple[int, str, str]:
        out, err = StringIO(), StringIO()
        code = replay_job(
            conv, "o-1", run, path, playbooks=tmp_path, jobs=["o-9"], out=out, err=err, env={}
        )
        return code, out.getvalue(), err.getvalue()

    # start, lookup, decide, the answer, pay: 4 inputs after the start
    assert replay(conversation) == (
        0,
        "same path and outputs (4 steps, no model or tool called)\n",
        "",
    )
    assert replay(conversation, "o-1/resolve#1")[0] == 0
    code, _, err = replay(conversation, "o-1/resolve#7")
    assert code == 2
    assert "no flow run 'o-1/resolve#7' (runs: o-1/resolve#1)" in err
    code, _, err = replay(None)
    assert (code, "no conversation of job 'o-1'" in err, "o-9" in err) == (2, True, True)
    (tmp_path / "changed" / "flows").mkdir(parents=True)
    (tmp_path / "changed" / "catalog.yaml").write_text(CATALOG)
    changed = tmp_path / "changed" / "flows" / "refund.yaml"
    changed.write_text(
        FLOW.replace('routes: {"yes": pay, "no": END}', 'routes: {"yes": END, "no": pay}')
    )
    code, out, _ = replay(conversation, path=changed)
    assert code == 1
    assert out == (
        "differs: step 4: the run was given the tool_result of o-1/resolve#1/pay/1/1, which "
        "the replay never asked for (replayed path: lookup decide confirm)\n"
    )


COUNTER = """\
version: "1"
description: Count this job's runs of the flow.
outputs: [runs]
state:
  runs: {type: number, default: 0, remembers: true, description: Runs so far.}
  note: {type: string, default: "", description: Forgotten between runs.}
start: count
nodes:
  - {id: count, type: llm, prompt: "Runs so far: {{runs}}", output: runs}
edges:
  - {from: count, to: END}
"""


def test_remembers_channels_carry_to_the_next_run_of_the_flow_for_the_job() -> None:
    flow = load_flow(COUNTER, "flows/count.yaml", "count")
    flows = Flows({"count": flow}, {("orders", "a"): "count", ("orders", "b"): "count"})
    saved: list[dict[str, Any]] = []
    prompts: list[str] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        pass

    async def save(conv: Conversation) -> None:
        saved.append(conv.to_json())

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        prompts.append(action.prompt)
        seen = int(action.prompt.rsplit(" ", 1)[1])
        return ModelReply(call_id=action.call_id, text=str(seen + 1))

    driver = FlowDriver(flows, execute, publish, save)

    def task(milestone: str) -> TaskOpenedRecord:
        return opened({}).model_copy(update={"milestone": milestone, "task_id": f"o-1/{milestone}"})

    async def go() -> None:
        conv = Conversation("o-1")
        conv.open_flow(task("a"), "count", flows.inputs("count", {}, conv.turns, None))
        first = conv.owed_flow()
        assert first is not None
        await driver.drive(conv, first)
        assert first.status == "finished"
        assert conv.remembered == {"count": {"runs": 1}}  # not note: it does not remember
        # A restart reads the conversation back from its JSON: the values are kept.
        back = Conversation.from_json(orjson.loads(orjson.dumps(saved[-1])))
        assert back.remembered == {"count": {"runs": 1}}
        inputs = flows.inputs("count", {}, back.turns, back.remembered.get("count"))
        assert inputs["runs"] == 1
        back.open_flow(task("b"), "count", inputs)
        second = back.owed_flow()
        assert second is not None
        await driver.drive(back, second)
        assert second.status == "finished"
        assert prompts == ["Runs so far: 0", "Runs so far: 1"]
        assert second.state is not None
        assert second.state.outputs == {"runs": 2}
        assert back.remembered == {"count": {"runs": 2}}
        # A channel that no longer remembers is not passed (start would refuse it).
        assert "note" not in flows.inputs("count", {}, (), {"runs": 5, "note": "x"})

    asyncio.run(go())


def test_the_service_answers_once_ignores_a_stale_answer_and_expires_by_its_timer(
    tmp_path: Path,
) -> None:
    """The service in process (its sends captured): a task opened runs the flow to
    its question; a stale answer and a second answer change nothing; a question
    with ``expires`` is stepped with a tick once the timer sees it expired."""
    catalog = load_catalog(CATALOG, "catalog.yaml")
    text = FLOW.replace('answers: ["yes", "no"]', 'answers: ["yes", "no"]\n    expires: 1h')
    flow = load_flow(text, "flows/refund.yaml", "refund", tools=flow_tools(catalog))
    flows = Flows({"refund": flow}, {("orders", "resolve"): "refund"})
    sent: list[tuple[str, Any]] = []

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Any, partition: int | None
    ) -> None:
        sent.append((topic.rsplit(".", 1)[-1], orjson.loads(value) if value else None))

    service = AgentService(
        Settings(data_dir=tmp_path), catalog, ModelSettings(api_key="sk-test"), send=send,
        flows=flows,
    )  # fmt: skip

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        if isinstance(action, CallTool):
            return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1"})
        return ModelReply(call_id=action.call_id, text='{"action": "refund"}')

    service.execute = execute

    def journal(kind: str) -> list[dict[str, Any]]:
        return [v for t, v in sent if t == "journal" and v["type"] == kind]

    async def settle() -> None:
        await asyncio.gather(*service.running.values())

    def answer(message_id: str, interrupt_id: str | None, text: str) -> bytes:
        return MessageRecord(
            job_key="o-1", message_id=message_id, direction="in", channel="web", text=text,
            at="2026-01-05T09:01:00Z", interrupt_id=interrupt_id,
        ).model_dump_json(by_alias=True).encode()  # fmt: skip

    messages = Where(service.topics.messages, 0, 0, 0, b"o-1", [])

    async def go() -> None:
        service.partitions[0] = asyncio.Event()
        service.partitions[0].set()
        task = opened({"order_id": "A-1"}).model_dump_json(by_alias=True).encode()
        await service.on_record(task, Where(service.topics.tasks, 0, 0, 0, b"o-1", []))
        await settle()
        [asked] = journal("journal.interrupt")
        interrupt = asked["interrupt_id"]
        assert asked["expires_at"] is not None
        assert "o-1" in service.expiring
        # stale: an interrupt that is not open; nothing queued, no run owed
        await service.on_record(answer("m-1", "o-1/resolve#1/nope/1", "yes"), messages)
        assert not service.load("o-1").flow_due
        # not yet expired: the timer does nothing
        assert await service.tick() == 0
        # two hours later: a tick; the unanswered ask fails its node, so the run
        later = datetime.now(UTC) + timedelta(hours=2)
        service.clock = lambda: later
        assert await service.tick() == 1
        await settle()
        statuses = [r["status"] for r in journal("journal.interrupt")]
        assert statuses == ["open", "expired"]
        [end] = [r for r in journal("journal.flow") if r["event"] == "failed"]
        assert end["node"] == "confirm"
        assert not [t for t, _ in sent if t == "deadletter"]
        # an answer now (the question closed) changes nothing
        await service.on_record(answer("m-2", interrupt, "yes"), messages)
        await settle()
        assert [r["status"] for r in journal("journal.interrupt")] == ["open", "expired"]
        service.db.close()
        service.offsets.close()

    asyncio.run(go())


APPROVAL = """\
version: "1"
description: Refund an order once the person approves.
inputs: [order_id]
outputs: [refund]
state:
  order_id: {type: string, description: The order.}
  order: {type: object, description: The order as the shop returns it.}
  secret: {type: string, default: hidden, description: Not for the person.}
  refund: {type: object, description: The refund.}
tools: [get_order, refund_order]
start: lookup
nodes:
  - {id: lookup, type: tool, tool: get_order, args: {id: "{{order_id}}"}, output: order}
  - {id: approve, type: approval, before: pay, ask: "Refund {{order_id}}?", show: [order],
     onReject: END}
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}", note: "{{secret}}"},
     output: refund}
edges:
  - {from: lookup, to: approve}
  - {from: pay, to: END}
"""


@pytest.mark.parametrize(("answer", "paid"), [({"approved": True}, True), ("later", False)])
def test_an_approval_shows_only_its_channels_and_runs_its_node_only_on_yes(
    answer: Any, paid: bool
) -> None:
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(APPROVAL, "flows/approve.yaml", "approve", tools=flow_tools(catalog))
    flows = Flows({"approve": flow}, {("orders", "resolve"): "approve"})
    published: list[tuple[str, Any]] = []
    tools: list[str] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append((topic, record.model_dump(mode="json", by_alias=True)))

    async def save(conv: Conversation) -> None:
        pass

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        tools.append(action.tool)
        return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1", "total": 12})

    driver = FlowDriver(flows, execute, publish, save)

    async def go() -> None:
        conv = Conversation("o-1")
        conv.open_flow(opened({"order_id": "A-1"}), "approve", {"order_id": "A-1"})
        track = conv.flows["resolve"]
        await driver.drive(conv, track)
        [question] = [r for t, r in published if t == "messages"]
        assert "hidden" not in question["text"]  # only the show channels
        [opened_one] = [
            r for t, r in published if t == "journal" and r["type"] == "journal.interrupt"
        ]
        assert opened_one["kind"] == "approval"
        assert opened_one["show"] == {"order": {"id": "A-1", "total": 12}}
        track.queued.append(answer_input(opened_one["interrupt_id"], answer))
        await driver.drive(conv, track)
        assert track.status == "finished"
        assert tools == (["get_order", "refund_order"] if paid else ["get_order"])

    asyncio.run(go())


def test_the_gateway_read_model_keeps_the_open_questions() -> None:
    """Open on ``journal.interrupt`` open; closed by an answer on ``messages`` or
    by a closing journal record; kept when the job is let go of."""
    topics = Topics("t.")
    model = ReadModel(topics, {})

    def interrupt(status: str, interrupt_id: str = "o-1/resolve#1/confirm/1") -> bytes:
        return orjson.dumps(
            {"type": "journal.interrupt", "schema": 1, "job_key": "o-1", "run_id": "r",
             "flow": "refund", "node": "confirm", "interrupt_id": interrupt_id,
             "at": "2026-01-05T09:00:00Z", "kind": "ask", "status": status,
             "answers": ["yes", "no"]}
        )  # fmt: skip

    model.apply(topics.journal, b"o-1", interrupt("open"))
    model.apply(topics.journal, b"o-1", interrupt("open", "o-1/resolve#1/confirm/2"))
    assert sorted(model.interrupts["o-1"]) == ["o-1/resolve#1/confirm/1", "o-1/resolve#1/confirm/2"]
    answer = MessageRecord(
        job_key="o-1", message_id="answer:x", direction="in", channel="web", text="yes",
        at="2026-01-05T09:01:00Z", interrupt_id="o-1/resolve#1/confirm/1", answer="yes",
    )  # fmt: skip
    model.apply(topics.messages, b"o-1", answer.model_dump_json(by_alias=True).encode())
    assert list(model.interrupts["o-1"]) == ["o-1/resolve#1/confirm/2"]
    model.evict("o-1")
    assert list(model.interrupts["o-1"]) == ["o-1/resolve#1/confirm/2"]
    model.apply(topics.journal, b"o-1", interrupt("expired", "o-1/resolve#1/confirm/2"))
    assert "o-1" not in model.interrupts
    assert model.skipped == 0


# -- against a real broker -------------------------------------------------------------


def shop() -> FastAPI:
    app = FastAPI()
    app.state.calls = []

    @app.post("/{name}")
    async def call(name: str, request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls.append((name, request.headers.get("idempotency-key")))
        return {"id": body["id"], "status": "paid"}

    return app


def folder(lane: Lane) -> None:
    for path in lane.playbooks.glob("*.yaml"):
        path.unlink()  # only this test's playbook
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    (lane.playbooks / "orders.yaml").write_text(PLAYBOOK)
    (lane.playbooks / "flows").mkdir()
    (lane.playbooks / "flows" / "refund.yaml").write_text(FLOW)


def journal_of(lane: Lane, kind: str) -> list[dict[str, Any]]:
    return [r["value"] for r in lane.read("journal") if r["value"]["type"] == kind]


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_a_flow_waits_on_ask_across_a_sigkill_and_completes_on_its_tool_result(
    lane: Lane, serve: Callable[[Any], str], start_gateway: Callable[..., GatewayProcess]
) -> None:
    folder(lane)
    tools = shop()
    model = build_standin(SCRIPT)
    env = {
        "OPENAI_BASE_URL": f"{serve(model)}/v1",
        "OPENAI_API_KEY": "sk-test",
        "SHOP_URL": serve(tools),
    }
    lane.start_worker()
    agents = lane.start(["agents"], "agents: ready", **env)
    assert any("1 milestones run by flows" in line for line in agents.lines), agents.lines
    gateway = start_gateway()
    lane.send(
        {"type": "job.start", "key": "o-1", "playbook_key": "orders",
         "subject": {"order_id": "A-1"}},
    )  # fmt: skip
    lane.wait_until(
        "journal",
        lambda rs: any(r["value"]["type"] == "journal.interrupt" for r in rs),
        timeout=120,
    )
    [asked] = journal_of(lane, "journal.interrupt")
    interrupt = asked["interrupt_id"]
    assert interrupt == "o-1/resolve#1/confirm/1"  # {task id}#{n}/{node}/{visit}
    assert (asked["status"], asked["answers"], asked["node"]) == ("open", ["yes", "no"], "confirm")
    assert model.state.calls == 1
    assert [name for name, _ in tools.state.calls] == ["orders"]

    # Killed while the flow waits on the person; started again.
    agents.stop(signal.SIGKILL)
    restarted = lane.start(["agents"], "agents: ready", **env)

    with gateway.client(gateway.token()) as client:
        listed = wait_for(
            lambda: client.get("/v1/jobs/o-1/interrupts").json().get("interrupts"),
            what="the open question in the gateway",
        )
        assert [i["interrupt_id"] for i in listed] == [interrupt]
        # A stale answer (an interrupt that is not open) is refused and writes nothing.
        stale = client.post("/v1/jobs/o-1/answers", json={"interrupt_id": "nope", "answer": "yes"})
        assert stale.status_code == 409, stale.text
        assert stale.json()["error"]["code"] == "interrupt_not_open"
        wrong = client.post(
            "/v1/jobs/o-1/answers", json={"interrupt_id": interrupt, "answer": "maybe"}
        )
        assert wrong.status_code == 422, wrong.text
        assert wrong.json()["error"]["code"] == "answer_not_allowed"
        answered = client.post(
            "/v1/jobs/o-1/answers", json={"interrupt_id": interrupt, "answer": "yes"}
        )
        assert answered.status_code == 202, answered.text
        assert answered.json()["interrupt_id"] == interrupt
        again = client.post(
            "/v1/jobs/o-1/answers", json={"interrupt_id": interrupt, "answer": "no"}
        )
        assert again.status_code == 409, again.text

    def refunded(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            r["value"] for r in records
            if r["value"]["input"].get("source") == "tool"
            and r["value"]["input"].get("action") == "order_refunded"
            and r["value"]["outcome"] == "applied"
        ]  # fmt: skip

    decisions = lane.wait_until("decisions", lambda rs: bool(refunded(rs)), timeout=120)
    [fact] = refunded(decisions)
    # The milestone completed on the flow's tool result: its verdict names that event.
    [verdict] = [v for v in fact["verdicts"] if v["milestone"] == "resolve"]
    assert verdict["verdict"] == "TRUE"
    assert fact["input"]["idempotency_key"] in verdict["atoms"][0]["evidence"]
    assert fact["input"]["idempotency_key"] == "o-1/resolve#1/pay/1/1"  # the call id
    lane.wait_until(
        "journal",
        lambda rs: any(r["value"]["type"] == "journal.flow" and r["value"]["event"] == "finished"
                       for r in rs),
    )  # fmt: skip
    # A node run twice, were there one, shows by the time the agents service has
    # handled the task's closing (it commits past a record once handled): that
    # stops the flow's run, under the run's own lock.
    closed = lane.wait_until(
        "tasks",
        lambda rs: any(r["value"]["type"] == "task.closed" and r["key"] == "o-1" for r in rs),
    )
    lane.wait_handled(
        restarted.group,
        "tasks",
        [r for r in closed if r["value"]["type"] == "task.closed" and r["key"] == "o-1"],
    )
    flow_records = journal_of(lane, "journal.flow")
    nodes = [r["node"] for r in flow_records if r["event"] == "node"]
    assert nodes == NODES  # each node once, in order, across the kill
    assert [r["event"] for r in flow_records if r["event"] != "node"] == ["started", "finished"]
    assert model.state.calls == 1  # no second model call
    assert [name for name, _ in tools.state.calls] == ["orders", "refund"]
    statuses = [(r["status"], r["interrupt_id"]) for r in journal_of(lane, "journal.interrupt")]
    assert statuses == [("open", interrupt), ("answered", interrupt)]
    messages = [m["value"] for m in lane.read("messages")]
    assert [(m["direction"], m.get("interrupt_id")) for m in messages] == [
        ("out", interrupt),
        ("in", interrupt),
    ]
    assert restarted.proc.poll() is None


@dataclass
class OrdersWorld:
    """The module's shared processes on ``module_lane``: the worker, the agents
    service (the stand-in model, the shop) and the gateway, for the tests that
    test none's own life. Each test starts its own job (its own key and order)
    and reads only what that job made."""

    lane: Lane
    model: Any
    tools: FastAPI
    gateway: GatewayProcess

    def calls_of(self, key: str) -> list[str]:
        """The shop's calls for job ``key`` (their idempotency keys are the call
        ids, which begin with the job's task id)."""
        return [name for name, idem in self.tools.state.calls if (idem or "").startswith(key + "/")]

    def journal_of(self, key: str, kind: str) -> list[dict[str, Any]]:
        return [
            r["value"]
            for r in self.lane.read("journal")
            if r["key"] == key and r["value"]["type"] == kind
        ]

    def finished(self, key: str, timeout: float = 60) -> None:
        """Wait until job ``key``'s flow run has finished."""
        self.lane.wait_until(
            "journal",
            lambda rs: any(r["key"] == key and r["value"]["type"] == "journal.flow"
                           and r["value"]["event"] == "finished" for r in rs),
            timeout=timeout,
        )  # fmt: skip


@pytest.fixture(scope="module")
def orders_world(module_lane: Lane, module_serve: Callable[[Any], str]) -> Iterator[OrdersWorld]:
    lane = module_lane
    folder(lane)
    tools = shop()
    model = build_standin(SCRIPT)
    env = {
        "OPENAI_BASE_URL": f"{module_serve(model)}/v1",
        "OPENAI_API_KEY": "sk-test",
        "SHOP_URL": module_serve(tools),
    }
    lane.start_worker()
    lane.start(["agents"], "agents: ready", **env)
    gateway = launch_gateway(lane)
    try:
        yield OrdersWorld(lane, model, tools, gateway)
    finally:
        gateway.stop()


def waiting_on_its_question(world: OrdersWorld, key: str, order: str) -> dict[str, Any]:
    """Job ``key`` started on ``order``: the flow's open question once the
    gateway lists it."""
    world.lane.send(
        {"type": "job.start", "key": key, "playbook_key": "orders",
         "subject": {"order_id": order}},
    )  # fmt: skip
    gateway = world.gateway
    with gateway.client(gateway.token()) as client:
        [asked] = wait_for(
            lambda: client.get(f"/v1/jobs/{key}/interrupts").json().get("interrupts"),
            timeout=120,
            what="the open question",
        )
    return dict(asked)


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_the_persons_reply_on_the_channel_answers_the_open_question(
    orders_world: OrdersWorld,
) -> None:
    world, gateway = orders_world, orders_world.gateway
    asked = waiting_on_its_question(world, "o-2", "B-2")
    with gateway.client(gateway.token()) as client:
        said = client.post("/v1/jobs/o-2/messages", json={"text": "no", "message_id": "m-1"})
        assert said.status_code == 202, said.text
        world.finished("o-2")
        # Answered on the channel: the gateway saw it closed, the API refuses it now.
        wait_for(
            lambda: not client.get("/v1/jobs/o-2/interrupts").json()["interrupts"],
            what="the question closed in the gateway",
        )
        late = client.post(
            "/v1/jobs/o-2/answers", json={"interrupt_id": asked["interrupt_id"], "answer": "yes"}
        )
        assert late.status_code == 409, late.text
    [end] = [r for r in world.journal_of("o-2", "journal.flow") if r["event"] == "finished"]
    assert end["outputs"] == {"reply": "no"}
    assert world.calls_of("o-2") == ["orders"]  # "no": no refund


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_flow_replay_job_proves_the_services_run_from_the_topics_with_no_call(
    orders_world: OrdersWorld,
) -> None:
    """A flow run in the service to its end; ``lemongraph flow replay --job``
    reads its conversation from the topic and steps it again: the same path,
    and the stand-in and the shop are not called. A changed flow is a difference."""
    world, lane, gateway = orders_world, orders_world.lane, orders_world.gateway
    model, tools = world.model, world.tools
    asked = waiting_on_its_question(world, "o-3", "C-3")
    with gateway.client(gateway.token()) as client:
        answered = client.post(
            "/v1/jobs/o-3/answers", json={"interrupt_id": asked["interrupt_id"], "answer": "yes"}
        )
        assert answered.status_code == 202, answered.text
    world.finished("o-3", timeout=120)
    nodes = [r["node"] for r in world.journal_of("o-3", "journal.flow") if r["event"] == "node"]
    assert nodes == NODES
    assert world.calls_of("o-3") == ["orders", "refund"]
    calls, paid = model.state.calls, list(tools.state.calls)
    time.sleep(1.0)  # the last checkpoint is on the changelog

    done = lane.cli("flow", "replay", "--job", "o-3", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "same path and outputs (4 steps, no model or tool called)\n"
    assert (model.state.calls, tools.state.calls) == (calls, paid)  # nothing called
    again = lane.cli("flow", "replay", "--job", "o-3", "--run", "o-3/resolve#1", "--json")
    assert json_line(again.stdout) == {"kind": "replay", "same": True, "steps": 4}

    flow_file = lane.playbooks / "flows" / "refund.yaml"
    flow_file.write_text(
        FLOW.replace('routes: {"yes": pay, "no": END}', 'routes: {"yes": END, "no": pay}')
    )
    try:
        changed = lane.cli("flow", "replay", "--job", "o-3", check=False)
    finally:
        flow_file.write_text(FLOW)  # the module's processes' folder, as it was
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert changed.stdout.startswith("differs: step 4: "), changed.stdout
    assert "o-3/resolve#1/pay/1/1" in changed.stdout
    unknown = lane.cli("flow", "replay", "--job", "o-404", check=False)
    assert unknown.returncode == 2
    assert "no conversation of job 'o-404'" in unknown.stderr
    assert "o-3" in unknown.stderr  # the jobs the topic has
    norun = lane.cli("flow", "replay", "--job", "o-3", "--run", "x#9", check=False)
    assert norun.returncode == 2
    assert "(runs: o-3/resolve#1)" in norun.stderr
    assert (model.state.calls, tools.state.calls) == (calls, paid)


def json_line(text: str) -> Any:
    return orjson.loads(text.strip())
