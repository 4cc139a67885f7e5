"""One trace follows an input across the processes (issue 34; docs/operations.md,
"Tracing"): an OTLP receiver started here gets spans from ``lemongraph
gateway``, the engine worker and ``lemongraph agents`` (on the stand-in model,
with a tool endpoint), all under the trace id of the ``traceparent`` header the
test sent with its request, each the child of the one before; and none carries
the message text, the tool's arguments or the token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request

from agents.dev.serving import AppThread
from agents.dev.standin import StandinScript, build_standin
from stream.runtime.broker import free_port
from stream.runtime.kafka import ConsumedRecord, read_topic
from tests.lanes import Lane
from tests.otlp import ReceivedSpan, Receiver
from tests.stream.gateway.conftest import GatewayProcess, launch_gateway

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

CATALOG = """\
tools:
  book:
    description: Book a call.
    parameters: {type: object, properties: {when: {type: string}}, required: [when]}
    http: {url: "${DESK_URL}/book", method: POST}
    success: {path: "$.status", equals: confirmed}
integrations: {desk: {tools: [book]}}
agents: {conversation: {instructions: Book the call.}}
"""
PLAYBOOK = """\
key: traced
version: 1
instructions: Book a call.
milestones:
  - id: work
    instructions: Book a call with the person.
    condition: booked
    integrations: [desk]
"""
#: Words that must never be in a span: the agent's message, the tool's arguments.
SAID = "Booked you in, secret-words-of-the-reply."
WHEN = "tomorrow at secret-hour"
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"tool_result": "book"}, "say": SAID},
            {"call": {"tool": "book", "args": {"when": WHEN}}},
        ]
    }
)
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def desk() -> FastAPI:
    app = FastAPI()

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        return {"status": "confirmed", "when": (await request.json())["when"]}

    return app


@pytest.fixture(scope="module")
def traced(module_lane: Lane) -> Iterator[tuple[Lane, Receiver, GatewayProcess]]:
    """The worker, the agents service and the gateway of the module's lane, each
    exporting to the receiver (its batches every 100 ms)."""
    receiver = Receiver().start()
    servers = [
        AppThread(app, "127.0.0.1", free_port(), "test server").start()
        for app in (build_standin(SCRIPT), desk())
    ]
    model, tools = (s.url for s in servers)
    lane = module_lane
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    (lane.playbooks / "traced.yaml").write_text(PLAYBOOK)
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    worker = lane.start_worker(**otel)
    agents = lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{model}/v1", OPENAI_API_KEY="sk-test",
        OPENAI_MODEL="standin-1", DESK_URL=tools, **otel,
    )  # fmt: skip
    gateway = launch_gateway(lane, **otel)
    # Each says where it exports, under its own service name.
    for process, lines in (("worker", worker.lines), ("agents", agents.lines),
                           ("gateway", gateway.lines)):  # fmt: skip
        line = f"tracing: {process} as lemongraph-{process} to {receiver.url}/v1/traces"
        assert any(line in said for said in lines), (line, lines)
    yield lane, receiver, gateway
    gateway.stop()
    for server in servers:
        server.stop()
    receiver.stop()


def _one(spans: list[ReceivedSpan], service: str, name: str, parent: str) -> ReceivedSpan:
    """The span of ``service`` named ``name`` whose parent is ``parent``."""
    [found] = [s for s in spans if (s.service, s.name, s.parent_id) == (service, name, parent)]
    return found


def test_one_trace_follows_a_request_from_the_gateway_to_the_agents(
    traced: tuple[Lane, Receiver, GatewayProcess],
) -> None:
    lane, receiver, gateway = traced
    token = gateway.token()
    with gateway.client(token) as client:
        started = client.post(
            "/v1/jobs",
            json={"key": "traced-1", "playbook_key": "traced"},
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        )
        assert started.status_code == 202, started.text

    def whole(spans: list[ReceivedSpan]) -> bool:
        ours = {(s.service, s.name) for s in spans if s.trace_id == TRACE_ID}
        return {
            ("lemongraph-gateway", "POST /v1/jobs"),
            ("lemongraph-worker", "decide traced"),
            ("lemongraph-agents", "invoke_agent conversation"),
            ("lemongraph-agents", "execute_tool book"),
            ("lemongraph-agents", "send_message web"),
        } <= ours and sum(n == "chat standin-1" for _, n in ours) >= 1

    spans = [s for s in receiver.wait_for(whole, timeout=120) if s.trace_id == TRACE_ID]
    # The caller's span, from its traceparent, is the request's parent.
    request = _one(spans, "lemongraph-gateway", "POST /v1/jobs", PARENT_ID)
    assert request.attributes["http.route"] == "/v1/jobs"
    assert request.attributes["http.response.status_code"] == 202
    # Through the inbox record's headers (the later decisions, on the events the
    # agents published, are children of the run).
    decide = _one(spans, "lemongraph-worker", "decide traced", request.span_id)
    assert decide.attributes["lemongraph.decision.outcome"] == "applied"
    assert decide.attributes["lemongraph.decision.tasks"] == 1
    # Through the task record's headers.
    run = _one(spans, "lemongraph-agents", "invoke_agent conversation", decide.span_id)
    assert run.attributes["gen_ai.agent.name"] == "conversation"
    chats = [s for s in spans if s.name == "chat standin-1" and s.parent_id == run.span_id]
    assert len(chats) == 2  # the call of the tool, then the reply to its result
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "standin-1"
        assert chat.attributes["gen_ai.response.model"] == "standin-1"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    tool = _one(spans, "lemongraph-agents", "execute_tool book", run.span_id)
    assert tool.attributes["gen_ai.tool.name"] == "book"
    assert tool.attributes["lemongraph.tool.status"] == "done"
    assert _one(spans, "lemongraph-agents", "send_message web", run.span_id)
    # Never the message text, the tool's arguments, or the token.
    shown = orjson.dumps([s.attributes for s in spans]).decode()
    for secret in (SAID, "secret-words", WHEN, "secret-hour", token):
        assert secret not in shown
    # The context is in the records' headers (the gateway's start, the agents'
    # events, the worker's tasks), never in their values.
    for topic in ("inbox", "tasks"):
        records = _records(lane, topic, b"traced-1")
        assert records
        for record in records:
            assert TRACE_ID in dict(record.headers)["traceparent"].decode()
            assert b"traceparent" not in (record.value or b"")


def _records(lane: Lane, topic: str, key: bytes) -> list[ConsumedRecord]:
    async def go() -> list[ConsumedRecord]:
        name = lane.topics.name(topic)
        return [r async for r in read_topic(lane.bootstrap, name, idle=0.3) if r.key == key]

    return asyncio.run(go())
