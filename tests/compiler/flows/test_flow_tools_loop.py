"""A ``tools`` node in a loop (docs/flows.md, "Ids"; issue 28 point 7): a call
is named by its content, so a loop back issues only the calls not yet answered
in the run, and reuses the results of those that were."""

from __future__ import annotations

import json
from typing import Any

from compiler import CallModel, CallTool, Finish, ModelReply, ToolResult
from compiler.flows._flowvalues import tool_call_id
from tests.compiler.flows.test_flow_step import Driver, flow_of

LOOP = """\
version: "1"
outputs: [results]
state:
  calls: {type: list}
  results: {type: list}
  verdict: {type: string}
tools: [get_order]
start: pick
nodes:
  - {id: pick, type: llm, prompt: "Pick calls", output: calls}
  - {id: run, type: tools, calls: calls, output: results}
  - {id: judge, type: llm, prompt: "Enough? {{results}}", output: verdict}
edges:
  - {from: pick, to: run}
  - {from: run, to: judge}
  - from: judge
    type: conditional
    when: verdict
    routes: {more: run, again: pick, done: END}
"""
A1 = tool_call_id("r", "get_order", {"id": "A-1"})
A2 = tool_call_id("r", "get_order", {"id": "A-2"})


def calls(*ids: str) -> str:
    """The model's call list: a ``get_order`` per order id (call ids c-A-1, ...)."""
    return str([{"name": "get_order", "args": {"id": i}, "id": f"c-{i}"} for i in ids]).replace(
        "'", '"'
    )


def found(*ids: str, error: dict[str, str] | None = None) -> list[dict[str, Any]]:
    error = error or {}
    return [
        {
            "id": f"c-{i}",
            "name": "get_order",
            "result": None if i in error else {"order": i},
            "error": error.get(i),
        }
        for i in ids
    ]


def test_a_loop_back_to_a_tools_node_issues_no_answered_call_again() -> None:
    run = Driver(flow_of(LOOP))
    assert run(ModelReply(call_id="r/pick/1/1", text=calls("A-1"))) == [
        CallTool(call_id=A1, node="run", tool="get_order", args={"id": "A-1"})
    ]
    assert run(ToolResult(call_id=A1, ok=True, result={"order": "A-1"})) == [
        CallModel(call_id="r/judge/1/1", node="judge", prompt=f"Enough? {_json(found('A-1'))}")
    ]
    # Back to the tools node with the same queue: nothing is issued, the
    # earlier result is reused and the run goes straight on.
    actions = run(ModelReply(call_id="r/judge/1/1", text="more"))
    assert [type(a) for a in actions] == [CallModel]
    assert actions[0].call_id == "r/judge/2/1"
    assert run.state.channels["results"] == found("A-1")
    assert run.state.trail == ("pick", "run", "judge", "run")


def test_a_new_queue_issues_only_its_new_calls_and_the_same_call_twice_once() -> None:
    run = Driver(flow_of(LOOP))
    run(ModelReply(call_id="r/pick/1/1", text=calls("A-1")))
    run(ToolResult(call_id=A1, ok=True, result={"order": "A-1"}))
    run(ModelReply(call_id="r/judge/1/1", text="again"))
    assert run(ModelReply(call_id="r/pick/2/1", text=calls("A-1", "A-2", "A-2"))) == [
        CallTool(call_id=A2, node="run", tool="get_order", args={"id": "A-2"})
    ]
    assert run.state.pending == (A2,)
    actions = run(ToolResult(call_id=A2, ok=True, result={"order": "A-2"}))
    assert [a.call_id for a in actions if isinstance(a, CallModel)] == ["r/judge/2/1"]
    assert run.state.channels["results"] == found("A-1", "A-2", "A-2")


def test_a_failed_call_is_issued_again_under_the_same_id() -> None:
    """Only a success is reused: a failed call is made again, and under the same
    id it is the same call to the tool (its idempotency key)."""
    run = Driver(flow_of(LOOP))
    run(ModelReply(call_id="r/pick/1/1", text=calls("A-1")))
    run(ToolResult(call_id=A1, ok=False, error="timeout"))
    assert run.state.channels["results"] == found("A-1", error={"A-1": "timeout"})
    assert run(ModelReply(call_id="r/judge/1/1", text="more")) == [
        CallTool(call_id=A1, node="run", tool="get_order", args={"id": "A-1"})
    ]
    run(ToolResult(call_id=A1, ok=True, result={"order": "A-1"}))
    run(ModelReply(call_id="r/judge/2/1", text="done"))
    assert run.actions == [Finish(outputs={"results": found("A-1")})]


def test_the_id_is_the_content_not_the_order_of_the_arguments() -> None:
    assert tool_call_id("r", "t", {"a": 1, "b": [1, 2]}) == tool_call_id(
        "r", "t", {"b": [1, 2], "a": 1}
    )
    assert tool_call_id("r", "t", {"a": 1}) != tool_call_id("r", "t", {"a": 2})
    assert tool_call_id("r", "t", {"a": 1}) != tool_call_id("r", "u", {"a": 1})
    assert tool_call_id("r", "t", {}) != tool_call_id("s", "t", {})
    assert tool_call_id("job-7/resolve#1", "get_order", {"id": "A-1"}).startswith(
        "job-7/resolve#1/tools/get_order/"
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


SPREAD_TOOLS = """\
version: "1"
inputs: [batches]
outputs: [results]
state:
  batches: {type: list}
  batch: {type: list}
  results: {type: list, reducer: append, default: []}
tools: [get_order]
start: spread
nodes:
  - {id: spread, type: fanout, over: batches, to: run, as: batch}
  - {id: run, type: tools, calls: batch, output: results}
edges:
  - {from: run, to: END}
"""


def test_fanout_copies_making_the_same_call_wait_on_one_call() -> None:
    same = json.loads(calls("A-1"))
    run = Driver(flow_of(SPREAD_TOOLS), inputs={"batches": [same, same]})
    assert run.actions == [CallTool(call_id=A1, node="run", tool="get_order", args={"id": "A-1"})]
    assert run.state.pending == (A1,)
    assert run(ToolResult(call_id=A1, ok=True, result={"order": "A-1"})) == [
        Finish(outputs={"results": [found("A-1"), found("A-1")]})
    ]
