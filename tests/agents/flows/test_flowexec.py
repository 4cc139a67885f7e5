"""The flow action executor (agents/flows/executor.py) against the real stand-in model
and the real demo tools, each over HTTP on a free port, and the handler
registry (agents/flows/handlers.py)."""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from pydantic import BaseModel

from agents.catalog import load_catalog_file
from agents.dev.demo_tools import build_demo_tools
from agents.dev.standin import StandinScript, build_standin
from agents.flows import demo_handlers
from agents.flows.executor import FlowExecutor, json_schema_of
from agents.flows.handlers import HandlerRegistry, RegistryError, handler, load_registry, router
from agents.flows.terminal import drive
from agents.model import Model, ModelSettings
from agents.tools.executor import Executor
from compiler import (
    CallHandler,
    CallModel,
    CallRouter,
    CallTool,
    HandlerResult,
    ModelReply,
    RouterResult,
    ToolResult,
    load_flow,
)
from topics import InboxEvent, JournalHandlerCall, JournalModelCall, JournalToolCall

ROOT = Path(__file__).resolve().parents[3]
CATALOG = ROOT / "examples" / "catalog.yaml"

SCHEMA = {
    "type": "object",
    "properties": {"category": {"type": "string", "enum": ["billing", "other"]}},
    "required": ["category"],
}


class Rig:
    """A stand-in (its app, for the call counter), the demo tools, and what
    was published."""

    def __init__(self, serve: Callable[[Any], str], script: dict[str, Any] | None) -> None:
        rules = StandinScript.model_validate(script) if script is not None else None
        self.standin = build_standin(rules)
        self.model_url = serve(self.standin) + "/v1"
        self.tools = build_demo_tools()
        tools_url = serve(self.tools)
        self.env = {"CRM_URL": f"{tools_url}/crm", "BILLING_URL": f"{tools_url}/billing"}
        self.published: list[tuple[str, str, BaseModel]] = []

    async def publish(self, topic: str, key: str, record: BaseModel) -> None:
        self.published.append((topic, key, record))

    def journal(self) -> list[BaseModel]:
        return [r for t, _, r in self.published if t == "journal"]

    async def run(self, body: Callable[[FlowExecutor], Any], **options: Any) -> Any:
        model = Model(ModelSettings(api_key="standin", base_url=self.model_url, retries=0))
        async with httpx2.AsyncClient() as client:
            tools = Executor(load_catalog_file(CATALOG), client, self.env)
            registry = HandlerRegistry()
            registry.add_module(demo_handlers)
            executor = FlowExecutor(model, tools, registry, self.publish, **options)
            try:
                return await body(executor)
            finally:
                await model.close()


@pytest.fixture
def rig(serve: Callable[[Any], str]) -> Callable[..., Rig]:
    return lambda script=None: Rig(serve, script)


def test_a_model_call_with_a_schema_asks_for_json_and_is_journaled(rig: Any) -> None:
    r = rig(
        {
            "rules": [
                {"when": {"flow_node": "classify", "schema": True}, "json": {"category": "billing"}}
            ]
        }
    )
    action = CallModel(
        call_id="r1/classify/1/1", node="classify", prompt="My invoice", schema=SCHEMA
    )

    async def body(ex: FlowExecutor) -> Any:
        return await ex.execute(action, job_key=None, flow="tickets", run_id="r1")

    reply = asyncio.run(r.run(body))
    assert reply == ModelReply(call_id="r1/classify/1/1", text='{"category": "billing"}')
    assert r.standin.state.calls == 1
    [record] = r.journal()
    assert isinstance(record, JournalModelCall)
    assert (record.flow, record.node, record.outcome, record.run_id) == (
        "tickets",
        "classify",
        "ok",
        "r1",
    )
    assert "Node: classify" in record.request


def test_without_a_rule_the_stand_in_answers_the_smallest_value_of_the_shape(rig: Any) -> None:
    r = rig()
    action = CallModel(call_id="r/c/1/1", node="c", prompt="?", schema=SCHEMA)
    reply = asyncio.run(r.run(lambda ex: ex.execute(action, job_key=None, flow="f")))
    assert reply.text == '{"category": "billing"}'


def test_a_flow_schema_becomes_json_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "list", "items": {"type": "string"}}},
    }
    assert json_schema_of(schema)["properties"]["tags"]["type"] == "array"


def test_a_tool_call_uses_the_call_id_as_its_key_and_its_fact_goes_to_the_inbox(rig: Any) -> None:
    r = rig()
    action = CallTool(
        call_id="job-1/f/1/refund/1/1", node="refund", tool="refund_order", args={"id": "A-1"}
    )

    async def body(ex: FlowExecutor) -> Any:
        first = await ex.execute(action, job_key="job-1", flow="refunds", run_id="job-1/f/1")
        again = await ex.execute(action, job_key="job-1", flow="refunds", run_id="job-1/f/1")
        return first, again

    first, again = asyncio.run(r.run(body))
    assert isinstance(first, ToolResult)
    assert first.ok
    assert first.result == again.result  # the endpoint saw the same key: one refund
    assert list(r.tools.state.done) == ["job-1/f/1/refund/1/1"]
    facts = [rec for t, _, rec in r.published if t == "inbox"]
    assert isinstance(facts[0], InboxEvent)
    assert (facts[0].action, facts[0].source, facts[0].idempotency_key) == (
        "refunded",
        "tool",
        "job-1/f/1/refund/1/1",
    )
    journal = r.journal()
    assert isinstance(journal[0], JournalToolCall)
    assert (journal[0].flow, journal[0].node, journal[0].key, journal[0].fact) == (
        "refunds",
        "refund",
        "job-1/f/1/refund/1/1",
        "refunded",
    )


def test_without_a_job_no_fact_is_published(rig: Any) -> None:
    r = rig()
    action = CallTool(call_id="r/lookup/1/1", node="lookup", tool="get_order", args={"id": "A-7"})
    result = asyncio.run(r.run(lambda ex: ex.execute(action, job_key=None, flow="f")))
    assert result.ok
    assert result.result["id"] == "A-7"
    assert [t for t, _, _ in r.published] == ["journal"]


def test_a_failed_tool_call_is_not_ok_with_the_reason(rig: Any) -> None:
    r = rig()
    action = CallTool(call_id="r/l/1/1", node="l", tool="get_order", args={"id": "missing-1"})
    result = asyncio.run(r.run(lambda ex: ex.execute(action, job_key=None, flow="f")))
    assert not result.ok
    assert "HTTP 404" in (result.error or "")


def test_a_declined_200_fails_the_node_and_records_nothing(rig: Any) -> None:
    # The same success rule as the agents' calls (docs/agents.md, "What success
    # is"): the demo billing answers 200 {"ok": false, ...} for a final sale.
    r = rig()
    action = CallTool(call_id="j/f/1/r/1/1", node="r", tool="refund_order", args={"id": "final-1"})
    result = asyncio.run(r.run(lambda ex: ex.execute(action, job_key="j", flow="refunds")))
    assert not result.ok
    assert 'the answer says "ok": false: {"ok":false' in (result.error or "")
    assert [t for t, _, _ in r.published] == ["journal"]  # no fact in the inbox
    [record] = r.journal()
    assert isinstance(record, JournalToolCall)
    assert (record.outcome, record.http_status, record.fact) == ("failed", 200, None)
    assert "a final sale is not refunded" in record.result


def test_an_unanswered_idempotent_tool_is_tried_again_with_the_same_key(rig: Any) -> None:
    r = rig()
    r.env["CRM_URL"] = "http://127.0.0.1:9/crm"  # nothing listens there
    action = CallTool(call_id="r/l/1/1", node="l", tool="get_order", args={"id": "A-1"})
    result = asyncio.run(
        r.run(lambda ex: ex.execute(action, job_key=None, flow="f"), retry_delay=0.0)
    )
    assert not result.ok
    [record] = r.journal()
    assert isinstance(record, JournalToolCall)
    assert record.outcome == "failed"
    assert record.key == "r/l/1/1"


def test_handlers_and_routers_and_their_failures(rig: Any) -> None:
    r = rig()
    split = CallHandler(
        call_id="r/s/1/1", node="s", handler="split_ids", view={"order_ids": "A-1, B-2"}
    )
    missing = CallHandler(call_id="r/m/1/1", node="m", handler="nope", view={})
    route = CallRouter(
        call_id="r/c/1/1/route", edge_from="c", router="route_ticket",
        view={"classification": {"category": "billing", "urgent": False}},
    )  # fmt: skip

    async def body(ex: FlowExecutor) -> Any:
        return [await ex.execute(a, job_key=None, flow="f") for a in (split, missing, route)]

    done, failed, routed = asyncio.run(r.run(body))
    assert done == HandlerResult(call_id="r/s/1/1", ok=True, result=["A-1", "B-2"])
    assert not failed.ok
    assert failed.error == "handler 'nope' is not registered"
    assert routed == RouterResult(call_id="r/c/1/1/route", route="billing")
    kinds = [(j.kind, j.name, j.outcome) for j in r.journal() if isinstance(j, JournalHandlerCall)]
    assert kinds == [
        ("handler", "split_ids", "ok"),
        ("handler", "nope", "error"),
        ("router", "route_ticket", "ok"),
    ]


def test_a_raising_or_async_handler() -> None:
    module = types.ModuleType("flowexec_test_handlers")

    @handler("boom")
    def boom(view: dict[str, Any]) -> Any:
        raise ValueError("no such thing")

    @router("later")
    async def later(view: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        return "yes"

    @handler("odd")
    def odd(view: dict[str, Any]) -> Any:
        return object()

    module.boom, module.later, module.odd = boom, later, odd  # type: ignore[attr-defined]
    registry = HandlerRegistry()
    registry.add_module(module)
    boomed = asyncio.run(registry.call_handler(CallHandler(call_id="x", node="n", handler="boom")))
    assert boomed == HandlerResult(call_id="x", ok=False, error="ValueError: no such thing")
    routed = asyncio.run(
        registry.call_router(CallRouter(call_id="y", edge_from="n", router="later"))
    )
    assert routed.route == "yes"
    oddly = asyncio.run(registry.call_handler(CallHandler(call_id="z", node="n", handler="odd")))
    assert not oddly.ok
    assert "no JSON value" in (oddly.error or "")
    other = types.ModuleType("other_handlers")
    other.boom = handler("boom")(lambda view: 1)  # type: ignore[attr-defined]
    with pytest.raises(RegistryError, match="registered twice"):
        registry.add_module(other)


def test_the_registry_reads_entry_points_and_the_setting(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "mine_flowexec.py").write_text(
        "from agents.flows.handlers import handler\n\n"
        "@handler('mine')\ndef mine(view):\n    return 1\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry({"LEMONGRAPH_HANDLERS": "mine_flowexec"})
    assert "route_ticket" in registry.routers  # our own entry point (pyproject.toml)
    assert "mine" in registry.handlers
    assert registry.origins["handler:mine"] == "mine_flowexec"
    sys.modules.pop("mine_flowexec", None)
    with pytest.raises(RegistryError, match="cannot import 'no_such_module_x'"):
        load_registry({"LEMONGRAPH_HANDLERS": "no_such_module_x"}, use_entry_points=False)


RETRYING = """\
version: "1"
inputs: [ticket]
outputs: [classification, last]
state:
  ticket: {type: string}
  classification: {type: object}
  last: {type: object}
start: classify
nodes:
  - id: classify
    type: llm
    prompt: "Classify {{ticket}}"
    output: classification
    schema:
      type: object
      properties: {category: {type: string, enum: [billing, other]}}
      required: [category]
    retry: {max_attempts: 2}
    onError: fallback
  - {id: fallback, type: handler, handler: keep_error, reads: [last_error], output: last}
edges:
  - {from: classify, to: END}
  - {from: fallback, to: END}
"""


def test_an_answer_that_does_not_fit_is_retried_then_goes_to_on_error(rig: Any) -> None:
    r = rig({"rules": [{"when": {"flow_node": "classify"}, "json": {"category": "shipping"}}]})
    flow = load_flow(RETRYING, "retrying.yaml")
    clock = lambda: datetime(2026, 1, 1, tzinfo=UTC)  # noqa: E731

    async def body(ex: FlowExecutor) -> Any:
        registry = ex.registry
        module = types.ModuleType("keep_error_handlers")
        module.keep = handler("keep_error")(lambda view: view["last_error"])  # type: ignore[attr-defined]
        registry.add_module(module)

        async def perform(action: Any) -> Any:
            return await ex.execute(action, job_key=None, flow=flow.name)

        async def respond(action: Any, attempt: int) -> Any:
            raise AssertionError("no question here")

        return await drive(
            flow, "run-1", {"ticket": "where is it"}, perform, respond, lambda s: None, clock
        )

    state, steps = asyncio.run(r.run(body))
    assert [s.action["kind"] for s in steps] == ["call_model", "call_model", "call_handler"]
    assert [s.action["call_id"] for s in steps[:2]] == ["run-1/classify/1/1", "run-1/classify/1/2"]
    assert r.standin.state.calls == 2
    assert state.status == "finished"
    assert "classification" not in (state.outputs or {}) or state.outputs["classification"] is None
    last = state.outputs["last"] if state.outputs else None
    assert last["node"] == "classify"
    assert "classification.category must be one of: billing, other" in last["message"]
