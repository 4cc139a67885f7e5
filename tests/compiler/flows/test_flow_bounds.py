"""The bounds of a flow run, in the pure step function (docs/flows.md, "Bounds")."""

from __future__ import annotations

from datetime import UTC, datetime

from compiler import (
    OUTPUT_MAX_BYTES,
    TOOL_RESULTS_KEPT,
    CallTool,
    FlowRun,
    HandlerResult,
    ModelReply,
    ToolResult,
    bound_input,
    load_flow,
)

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
LOOP = """\
version: "1"
inputs: [calls]
outputs: [results]
state:
  calls: {type: list}
  results: {type: list}
tools: [look]
start: run
nodes:
  - {id: run, type: tools, calls: calls, output: results}
edges:
  - {from: run, to: END}
"""


def test_a_result_over_the_bound_is_stepped_as_output_too_large() -> None:
    big = "x" * (OUTPUT_MAX_BYTES + 1)
    reply = bound_input(ModelReply(call_id="c", text=big))
    assert isinstance(reply, ModelReply)
    assert reply.text == ""
    assert reply.error is not None
    assert reply.error.startswith("output_too_large: the answer is 256 KB")
    result = bound_input(HandlerResult(call_id="c", ok=True, result={"text": big}))
    assert isinstance(result, HandlerResult)
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("output_too_large: the result")
    small = ToolResult(call_id="c", ok=True, result={"id": 1})
    assert bound_input(small) is small


def test_a_run_keeps_only_its_latest_tools_results() -> None:
    flow = load_flow(LOOP, "flows/loop.yaml", "loop")
    calls = [{"name": "look", "args": {"n": n}, "id": str(n)} for n in range(TOOL_RESULTS_KEPT + 6)]
    runner = FlowRun(flow)
    state, actions = runner.start("r", {"calls": calls}, NOW)
    issued = [a for a in actions if isinstance(a, CallTool)]
    assert len(issued) == len(calls)
    for action in issued:
        state, _ = runner.next(state, ToolResult(call_id=action.call_id, ok=True, result=1), NOW)
    assert state.status == "finished"
    assert list(state.tool_results) == [a.call_id for a in issued][-TOOL_RESULTS_KEPT:]
