"""The step function (docs/flows.md, "What a step does"): every node type and
edge kind driven by hand, each expected action written out here by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compiler import (
    Answer,
    Ask,
    AwaitApproval,
    CallHandler,
    CallModel,
    CallRouter,
    CallTool,
    Fail,
    Finish,
    Flow,
    FlowRun,
    FlowStart,
    FlowState,
    FlowTick,
    HandlerResult,
    ModelReply,
    RouterResult,
    ToolResult,
    load_flow,
)
from compiler.flows._flowvalues import Action, FlowInput, tool_call_id
from tests.compiler.flows.test_flow_readiness import SPREAD
from tests.compiler.flows.test_flow_validation import (
    PINNED,  # the pinned example of issue 17, as written
)

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DECISION = {
    "type": "object",
    "properties": {"action": {"type": "string", "enum": ["refund", "resend", "nothing"]}},
    "required": ["action"],
}


def flow_of(text: str) -> Flow:
    return load_flow(text, "t.yaml")


class Driver:
    """Feeds inputs one by one, keeping the state, and checks each state
    survives JSON."""

    def __init__(self, flow: Flow, run_id: str = "r", inputs: dict[str, Any] | None = None):
        self.run = FlowRun(flow)
        self.state, self.actions = self.run.start(run_id, inputs or {}, NOW)

    def __call__(self, given: FlowInput, now: datetime = NOW) -> list[Action]:
        before = self.state
        self.state, self.actions = self.run.next(self.state, given, now)
        assert before.model_dump() == before.model_dump()  # never edited
        data = self.state.model_dump(mode="json", by_alias=True)
        assert FlowState.model_validate(data) == self.state
        return self.actions


def test_the_shipped_example_runs_end_to_end() -> None:
    path = ROOT / "examples" / "flows" / "lookup-then-ask.yaml"
    run = Driver(load_flow(path.read_text(), str(path)), "job-7/understand", {"order_id": "A1"})
    assert run.actions == [
        CallTool(
            call_id="job-7/understand/lookup/1/1",
            node="lookup",
            tool="get_order",
            args={"id": "A1"},
        )
    ]
    assert run(
        ToolResult(call_id="job-7/understand/lookup/1/1", ok=True, result={"id": "A1", "total": 30})
    ) == [
        CallModel(
            call_id="job-7/understand/decide/1/1",
            node="decide",
            prompt='So far: []\n\nOrder: {"id": "A1", "total": 30}. What should happen next?',
            schema=DECISION,
        )
    ]
    assert run(
        ModelReply(call_id="job-7/understand/decide/1/1", text=' {"action": "refund"} ')
    ) == [
        Ask(
            interrupt_id="job-7/understand/confirm/1",
            node="confirm",
            question="Shall I go ahead: refund?",  # the field the question reads
        )
    ]
    assert run.state.status == "waiting"
    assert run(Answer(interrupt_id="job-7/understand/confirm/1", answer="Yes, go")) == [
        Finish(outputs={"decision": {"action": "refund"}, "reply": "Yes, go"})
    ]
    assert run.state.trail == ("lookup", "decide", "confirm")
    assert run.state.status == "finished"
    assert run.state.branches == ()
    assert run.state.pending == ()


def test_the_shipped_example_finishes_at_nothing_without_asking() -> None:
    path = ROOT / "examples" / "flows" / "lookup-then-ask.yaml"
    run = Driver(load_flow(path.read_text(), str(path)), "r", {"order_id": "A1"})
    run(ToolResult(call_id="r/lookup/1/1", ok=True, result={"id": "A1"}))
    assert run(ModelReply(call_id="r/decide/1/1", text='{"action": "nothing"}')) == [
        Finish(outputs={"decision": {"action": "nothing"}, "reply": None})
    ]


def test_the_pinned_example_runs_end_to_end() -> None:
    run = Driver(flow_of(PINNED), "r", {"order_id": "A1"})
    assert run.actions == [
        CallTool(call_id="r/lookup/1/1", node="lookup", tool="get_order", args={"id": "A1"})
    ]
    order = {"id": "A1", "total": 30}
    assert run(ToolResult(call_id="r/lookup/1/1", ok=True, result=order)) == [
        CallModel(
            call_id="r/decide/1/1",
            node="decide",
            prompt='Order: {"id": "A1", "total": 30}. What should happen next?',
            schema=DECISION,
        )
    ]
    everything = {
        "order_id": "A1",
        "order": order,
        "decision": {"action": "refund"},
        "notes": [],
        "conversation": [],
        "last_error": None,
    }
    assert run(ModelReply(call_id="r/decide/1/1", text='{"action": "refund"}')) == [
        CallRouter(
            call_id="r/decide/1/1/route",
            edge_from="decide",
            router="route_decision",
            view=everything,
        )
    ]
    assert run(RouterResult(call_id="r/decide/1/1/route", route="act")) == [
        Ask(
            interrupt_id="r/confirm/1",
            node="confirm",
            question="Shall I go ahead with action: refund?",  # words, not JSON
        )
    ]
    assert run.state.limit_counts == {"decide/act": 1}
    assert run(Answer(interrupt_id="r/confirm/1", answer="yes")) == [
        CallHandler(
            call_id="r/review/1/1/0",
            node="review",
            handler="review_note",
            view={**everything, "notes": ["yes"], "order": "yes"},
        )
    ]
    assert run(HandlerResult(call_id="r/review/1/1/0", ok=True, result="fine")) == [
        Finish(outputs={"decision": {"action": "refund"}})
    ]
    assert run.state.trail == ("lookup", "decide", "confirm", "spread", "review")


# ---------------------------------------------------------------------------
# llm and structured output

STRUCTURED = """\
version: "1"
outputs: [decision]
state:
  decision: {type: object}
  said: {type: string}
start: decide
nodes:
  - id: decide
    type: llm
    prompt: "Decide."
    output: decision
    schema:
      type: object
      properties:
        action: {type: string, enum: [refund, resend, nothing]}
        amount: {type: number, maximum: 100}
      required: [action]
    retry: {max_attempts: 2}
    onError: explain
  - {id: explain, type: llm, prompt: "It went wrong: {{last_error}}", output: said}
edges:
  - {from: decide, to: END}
  - {from: explain, to: END}
"""
SCHEMA2 = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["refund", "resend", "nothing"]},
        "amount": {"type": "number", "maximum": 100},
    },
    "required": ["action"],
}


def test_a_wrong_shaped_answer_is_retried_then_goes_to_on_error_never_written() -> None:
    run = Driver(flow_of(STRUCTURED))
    assert run.actions == [
        CallModel(call_id="r/decide/1/1", node="decide", prompt="Decide.", schema=SCHEMA2)
    ]
    # action fits, amount does not: nothing of it is written.
    assert run(ModelReply(call_id="r/decide/1/1", text='{"action": "refund", "amount": 101}')) == [
        CallModel(call_id="r/decide/1/2", node="decide", prompt="Decide.", schema=SCHEMA2)
    ]
    assert "decision" not in run.state.channels
    assert run.state.attempts == {"decide": 2}
    assert run(ModelReply(call_id="r/decide/1/2", text='{"action": "refund!", "amount": 5}')) == [
        CallModel(
            call_id="r/explain/1/1",
            node="explain",
            prompt='It went wrong: {"message": "decision.action must be one of: refund, resend, '
            'nothing", "node": "decide"}',
            schema=None,
        )
    ]
    assert "decision" not in run.state.channels
    assert run.state.channels["last_error"] == {
        "node": "decide",
        "message": "decision.action must be one of: refund, resend, nothing",
    }
    assert run(ModelReply(call_id="r/explain/1/1", text="sorry")) == [
        Finish(outputs={"decision": None})
    ]


def test_the_first_mismatch_message_names_its_path() -> None:
    run = Driver(flow_of(STRUCTURED))
    run(ModelReply(call_id="r/decide/1/1", text='{"action": "refund", "amount": 101}'))
    run(ModelReply(call_id="r/decide/1/2", text="not json at all"))
    assert run.state.channels["last_error"] == {
        "node": "decide",
        "message": "decision: the answer is not JSON",
    }


def test_a_wrong_shaped_answer_without_on_error_fails_the_run() -> None:
    text = STRUCTURED.replace("    onError: explain\n", "").replace(
        "  - {from: explain, to: END}\n", ""
    )
    text = text.replace(
        '  - {id: explain, type: llm, prompt: "It went wrong: {{last_error}}", output: said}\n', ""
    )
    text = text.replace("  said: {type: string}\n", "")
    run = Driver(flow_of(text))
    run(ModelReply(call_id="r/decide/1/1", text='{"amount": 3}'))
    assert run(ModelReply(call_id="r/decide/1/2", text='{"action": "refund", "amount": 101}')) == [
        Fail(node="decide", error="decision.amount must be at most 100, and it is 101")
    ]
    assert run.state.status == "failed"
    assert run.state.failure is not None
    assert run.state.failure.node == "decide"
    assert "decision" not in run.state.channels
    # After a failure nothing moves.
    assert run(ModelReply(call_id="r/decide/1/2", text='{"action": "refund"}')) == []


def test_a_fitting_answer_clears_last_error_of_its_node_and_json_fences_are_read() -> None:
    run = Driver(flow_of(STRUCTURED))
    assert run(ModelReply(call_id="r/decide/1/1", text='```json\n{"action": "resend"}\n```')) == [
        Finish(outputs={"decision": {"action": "resend"}})
    ]


# ---------------------------------------------------------------------------
# tool: retry then onError

TOOL = """\
version: "1"
inputs: [n]
outputs: [found]
state:
  n: {type: number}
  found: {type: object}
tools: [search]
start: look
nodes:
  - id: look
    type: tool
    tool: search
    args: {count: "{{n}}", q: "n={{n}}", fixed: [1, "{{n}}"]}
    output: found
    retry: {max_attempts: 2}
    onError: END
edges:
  - {from: look, to: END}
"""


def test_a_tool_call_passes_a_lone_placeholder_as_the_value_and_retries_a_failure() -> None:
    run = Driver(flow_of(TOOL), "r", {"n": 5})
    args = {"count": 5, "q": "n=5", "fixed": [1, 5]}
    assert run.actions == [CallTool(call_id="r/look/1/1", node="look", tool="search", args=args)]
    assert run(ToolResult(call_id="r/look/1/1", ok=False, error="timed out")) == [
        CallTool(call_id="r/look/1/2", node="look", tool="search", args=args)
    ]
    # The first call's id is no longer pending: its late result is stale.
    assert run(ToolResult(call_id="r/look/1/1", ok=True, result={"x": 1})) == []
    assert run(ToolResult(call_id="r/look/1/2", ok=False, error="timed out again")) == [
        Finish(outputs={"found": None})
    ]
    assert run.state.channels["last_error"] == {"node": "look", "message": "timed out again"}


def test_a_failed_model_call_fails_its_node() -> None:
    run = Driver(flow_of(STRUCTURED))
    assert run(ModelReply(call_id="r/decide/1/1", text="", error="model timed out")) == [
        CallModel(call_id="r/decide/1/2", node="decide", prompt="Decide.", schema=SCHEMA2)
    ]


def test_a_tool_result_is_written_to_its_output() -> None:
    run = Driver(flow_of(TOOL), "r", {"n": 1})
    assert run(ToolResult(call_id="r/look/1/1", ok=True, result={"x": 1})) == [
        Finish(outputs={"found": {"x": 1}})
    ]


# ---------------------------------------------------------------------------
# tools: the model's calls

TOOLS = """\
version: "1"
outputs: [results]
state:
  calls: {type: list}
  results: {type: list}
tools: [search, fetch]
start: pick
nodes:
  - {id: pick, type: llm, prompt: "Pick calls", output: calls}
  - {id: run, type: tools, calls: calls, output: results}
edges:
  - {from: pick, to: run}
  - {from: run, to: END}
"""


def test_tools_runs_each_call_and_one_failing_does_not_stop_the_others() -> None:
    run = Driver(flow_of(TOOLS))
    chosen = (
        '[{"name": "search", "args": {"q": "a"}, "id": "c1"},'
        ' {"name": "fetch", "args": {"u": "x"}, "id": "c2"},'
        ' {"name": "delete_all", "args": {}, "id": "c3"}]'
    )
    search = tool_call_id("r", "search", {"q": "a"})
    fetch = tool_call_id("r", "fetch", {"u": "x"})
    assert run(ModelReply(call_id="r/pick/1/1", text=chosen)) == [
        CallTool(call_id=search, node="run", tool="search", args={"q": "a"}),
        CallTool(call_id=fetch, node="run", tool="fetch", args={"u": "x"}),
    ]
    assert run(ToolResult(call_id=fetch, ok=False, error="404")) == []
    assert run.state.pending == (search,)
    assert run(ToolResult(call_id=search, ok=True, result=["hit"])) == [
        Finish(
            outputs={
                "results": [
                    {"id": "c1", "name": "search", "result": ["hit"], "error": None},
                    {"id": "c2", "name": "fetch", "result": None, "error": "404"},
                    {
                        "id": "c3",
                        "name": "delete_all",
                        "result": None,
                        "error": "tool 'delete_all' is not in the flow's tools",
                    },
                ]
            }
        )
    ]


def test_tools_with_no_calls_writes_an_empty_list() -> None:
    run = Driver(flow_of(TOOLS))
    assert run(ModelReply(call_id="r/pick/1/1", text="[]")) == [Finish(outputs={"results": []})]


# ---------------------------------------------------------------------------
# ask

ASK = """\
version: "1"
outputs: [choice]
state:
  choice: {type: string}
start: pick
nodes:
  - id: pick
    type: ask
    ask: "Which one?"
    output: choice
    answers: [Red, Blue]
    expires: 2h
    retry: {max_attempts: 2}
edges:
  - {from: pick, to: END}
"""


def test_an_ask_takes_only_its_answers_and_writes_the_one_chosen() -> None:
    run = Driver(flow_of(ASK))
    expires = NOW + timedelta(hours=2)
    assert run.actions == [
        Ask(
            interrupt_id="r/pick/1",
            node="pick",
            question="Which one?",
            answers=("Red", "Blue"),
            expires_at=expires,
        )
    ]
    waiting = run.state
    assert run(Answer(interrupt_id="r/pick/1", answer="green")) == []
    assert run.state == waiting
    assert run(Answer(interrupt_id="r/other/1", answer="Red")) == []
    assert run(FlowTick(), NOW + timedelta(hours=1)) == []
    assert run(Answer(interrupt_id="r/pick/1", answer="  blue ")) == [
        Finish(outputs={"choice": "Blue"})
    ]
    assert run(Answer(interrupt_id="r/pick/1", answer="Red")) == []


def test_an_unanswered_ask_fails_its_node_at_expiry() -> None:
    run = Driver(flow_of(ASK))
    later = NOW + timedelta(hours=2)
    # retry asks again, under the same visit
    assert run(FlowTick(), later) == [
        Ask(
            interrupt_id="r/pick/1",
            node="pick",
            question="Which one?",
            answers=("Red", "Blue"),
            expires_at=later + timedelta(hours=2),
        )
    ]
    assert run(FlowTick(), later + timedelta(hours=3)) == [
        Fail(node="pick", error="no answer by 2026-12-01T13:00:00+00:00")
    ]


# ---------------------------------------------------------------------------
# approval

APPROVAL = """\
version: "1"
inputs: [order_id]
outputs: [refund, note]
state:
  order_id: {type: string}
  refund: {type: object}
  note: {type: string}
tools: [refund_order]
start: confirm
nodes:
  - id: confirm
    type: approval
    before: pay
    ask: "Refund {{order_id}}?"
    show: [order_id]
    onReject: sorry
    expires: 1d
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: refund}
  - {id: sorry, type: llm, prompt: "Say it was not refunded", output: note}
edges:
  - {from: pay, to: END}
  - {from: sorry, to: END}
"""
PAY = CallTool(call_id="r/pay/1/1", node="pay", tool="refund_order", args={"id": "A1"})
SORRY = CallModel(call_id="r/sorry/1/1", node="sorry", prompt="Say it was not refunded")


def test_an_approval_shows_only_its_channels() -> None:
    run = Driver(flow_of(APPROVAL), "r", {"order_id": "A1"})
    assert run.actions == [
        AwaitApproval(
            interrupt_id="r/confirm/1",
            node="confirm",
            before="pay",
            question="Refund A1?",
            show={"order_id": "A1"},
            expires_at=NOW + timedelta(days=1),
        )
    ]


@pytest.mark.parametrize(
    "answer", ["yes", " YES ", "y", "Approve", "ok", "true", True, {"approved": True}]
)
def test_an_approval_yes_runs_its_node(answer: Any) -> None:
    run = Driver(flow_of(APPROVAL), "r", {"order_id": "A1"})
    assert run(Answer(interrupt_id="r/confirm/1", answer=answer)) == [PAY]


@pytest.mark.parametrize(
    "answer",
    ["no", "yes please", "", "sure", False, {"approved": "true"}, {"approved": False}, None, 1],
)
def test_anything_else_is_no_and_takes_on_reject(answer: Any) -> None:
    run = Driver(flow_of(APPROVAL), "r", {"order_id": "A1"})
    assert run(Answer(interrupt_id="r/confirm/1", answer=answer)) == [SORRY]
    assert run(Answer(interrupt_id="r/confirm/1", answer="yes")) == []
    assert run(ModelReply(call_id="r/sorry/1/1", text="Not refunded.")) == [
        Finish(outputs={"refund": None, "note": "Not refunded."})
    ]
    assert "pay" not in run.state.visits


def test_an_unanswered_approval_is_no_at_expiry() -> None:
    run = Driver(flow_of(APPROVAL), "r", {"order_id": "A1"})
    assert run(FlowTick(), NOW + timedelta(hours=23)) == []
    assert run(FlowTick(), NOW + timedelta(days=1)) == [SORRY]


# ---------------------------------------------------------------------------
# fan-out

FANOUT = """\
version: "1"
inputs: [docs]
outputs: [grades, summary]
state:
  docs: {type: list}
  doc: {type: string}
  grades: {type: list, reducer: append, default: []}
  summary: {type: string}
start: gate
nodes:
  - {id: gate, type: handler, handler: noop, reads: [docs]}
  - {id: spread, type: fanout, over: docs, to: grade, as: doc}
  - {id: grade, type: llm, prompt: "Grade {{doc}}", output: grades}
  - {id: sum_up, type: llm, prompt: "Sum up {{grades}}", output: summary}
edges:
  - from: gate
    type: conditional
    when: docs
    routes: {nonempty: spread, empty: sum_up}
  - {from: grade, to: sum_up}
  - {from: sum_up, to: END}
"""


def test_a_fanout_runs_one_copy_per_item_and_what_follows_once() -> None:
    run = Driver(flow_of(FANOUT), "r", {"docs": ["a", "b"]})
    assert run.actions == [
        CallHandler(call_id="r/gate/1/1", node="gate", handler="noop", view={"docs": ["a", "b"]})
    ]
    assert run(HandlerResult(call_id="r/gate/1/1", ok=True, result=None)) == [
        CallModel(call_id="r/grade/1/1/0", node="grade", prompt="Grade a"),
        CallModel(call_id="r/grade/1/1/1", node="grade", prompt="Grade b"),
    ]
    assert run(ModelReply(call_id="r/grade/1/1/1", text="B")) == []
    assert run.state.joins[0].done == (1,)
    assert run(ModelReply(call_id="r/grade/1/1/0", text="A")) == [
        CallModel(call_id="r/sum_up/1/1", node="sum_up", prompt='Sum up ["B", "A"]')
    ]
    assert run.state.joins == ()
    assert run(ModelReply(call_id="r/sum_up/1/1", text="ok")) == [
        Finish(outputs={"grades": ["B", "A"], "summary": "ok"})
    ]
    assert run.state.trail == ("gate", "spread", "grade", "grade", "sum_up")


def test_the_empty_case_routes_around_the_fanout() -> None:
    run = Driver(flow_of(FANOUT), "r", {"docs": []})
    assert run(HandlerResult(call_id="r/gate/1/1", ok=True)) == [
        CallModel(call_id="r/sum_up/1/1", node="sum_up", prompt="Sum up []")
    ]


def test_a_fanout_over_an_empty_list_fails_never_ends_silently() -> None:
    run = Driver(flow_of(SPREAD), "r", {"items": []})
    empty = "items is empty: the fan-out has nothing to spread over"
    assert run.actions == [Fail(node="spread", error=empty)]
    guarded = SPREAD.replace("to: note, as: item}", "to: note, as: item, onError: END}")
    run = Driver(flow_of(guarded), "r", {"items": []})
    assert run.actions == [Finish(outputs={"notes": []})]
    assert run.state.channels["last_error"] == {"node": "spread", "message": empty}


def test_a_failing_copy_goes_to_on_error_once_every_copy_is_done() -> None:
    # A merge channel takes objects only: the copy answering a string fails.
    merge = FANOUT.replace(
        "grades: {type: list, reducer: append, default: []}",
        "grades: {type: object, reducer: merge, default: {}}",
    ).replace("output: grades}", "output: grades, onError: sum_up}")
    run = Driver(flow_of(merge), "r", {"docs": ["a", "b"]})
    run(HandlerResult(call_id="r/gate/1/1", ok=True))
    assert run(ModelReply(call_id="r/grade/1/1/0", text='"A"')) == []
    assert run.state.channels["last_error"] == {
        "node": "grade",
        "message": "grades merges objects, and the value is a string",
    }
    assert run.state.joins[0].failed == (0,)
    assert run(ModelReply(call_id="r/grade/1/1/1", text='{"b": 2}')) == [
        CallModel(call_id="r/sum_up/1/1", node="sum_up", prompt='Sum up {"b": 2}')
    ]


def test_a_failing_copy_without_on_error_fails_the_run() -> None:
    merge = FANOUT.replace(
        "grades: {type: list, reducer: append, default: []}",
        "grades: {type: object, reducer: merge, default: {}}",
    )
    run = Driver(flow_of(merge), "r", {"docs": ["a", "b"]})
    run(HandlerResult(call_id="r/gate/1/1", ok=True))
    assert run(ModelReply(call_id="r/grade/1/1/1", text="[1]")) == [
        Fail(node="grade", error="grades merges objects, and the value is a list")
    ]
    assert run(ModelReply(call_id="r/grade/1/1/0", text="{}")) == []


# ---------------------------------------------------------------------------
# when edges

WHEN = """\
version: "1"
inputs: [v]
outputs: [v]
state:
  v: {type: object}
start: look
nodes:
  - {id: look, type: handler, handler: h, reads: [v]}
  - {id: a, type: handler, handler: h, reads: [v]}
edges:
  - from: look
    type: conditional
    when: v.k
    routes: {x: a, "true": a, "3": a, empty: a, nonempty: END, none: END}
  - {from: a, to: END}
"""
A = CallHandler(call_id="r/a/1/1", node="a", handler="h", view={})


@pytest.mark.parametrize(
    ("value", "goes"),
    [
        ("x", "a"),
        (True, "a"),
        (False, "fail"),
        (3, "a"),
        (3.5, "fail"),
        ([], "a"),
        ({}, "a"),
        ([1], "end"),
        (None, "end"),
        ("y", "fail"),
    ],
)
def test_when_chooses_the_route_by_the_value(value: Any, goes: str) -> None:
    run = Driver(flow_of(WHEN), "r", {"v": {"k": value}})
    actions = run(HandlerResult(call_id="r/look/1/1", ok=True))
    if goes == "a":
        assert actions == [A.model_copy(update={"view": {"v": {"k": value}}})]
    elif goes == "end":
        assert actions == [Finish(outputs={"v": {"k": value}})]
    else:
        assert len(actions) == 1
        assert isinstance(actions[0], Fail)
        assert actions[0].node == "look"
        assert "and the edge has no else route" in actions[0].error


def test_when_takes_else_when_no_route_has_the_name() -> None:
    text = WHEN.replace("none: END}", "none: END, else: a}")
    run = Driver(flow_of(text), "r", {"v": {"k": "y"}})
    assert run(HandlerResult(call_id="r/look/1/1", ok=True)) == [
        A.model_copy(update={"view": {"v": {"k": "y"}}})
    ]


# ---------------------------------------------------------------------------
# routers and limits

LOOP = """\
version: "1"
outputs: [n]
state:
  n: {type: number, default: 0}
start: word
nodes:
  - {id: word, type: handler, handler: next_word, reads: [n], output: n}
  - {id: check, type: handler, handler: check, reads: [n]}
edges:
  - {from: word, to: check}
  - from: check
    type: conditional
    router: grade
    reads: [n]
    routes: {again: check, next: word, done: END}
    limits: {again: {max: 2, per: word, then: next}, next: {max: 2, then: done}}
"""


def check(visit: int, attempt: int = 1) -> str:
    return f"r/check/{visit}/{attempt}"


def test_a_limited_route_is_replaced_by_then_and_per_resets_the_count() -> None:
    run = Driver(flow_of(LOOP))
    assert run.actions == [
        CallHandler(call_id="r/word/1/1", node="word", handler="next_word", view={"n": 0})
    ]
    assert run(HandlerResult(call_id="r/word/1/1", ok=True, result=1)) == [
        CallHandler(call_id="r/check/1/1", node="check", handler="check", view={"n": 1})
    ]
    router = CallRouter(
        call_id="r/check/1/1/route", edge_from="check", router="grade", view={"n": 1}
    )
    assert run(HandlerResult(call_id="r/check/1/1", ok=True)) == [router]
    visit = 1
    for _ in range(2):  # again, twice: allowed
        assert run(RouterResult(call_id=f"{check(visit)}/route", route="again")) == [
            CallHandler(call_id=check(visit + 1), node="check", handler="check", view={"n": 1})
        ]
        visit += 1
        run(HandlerResult(call_id=check(visit), ok=True))
    assert run.state.limit_counts == {"check/again": 2}
    # the third again is over its limit: next is taken (word runs again)
    assert run(RouterResult(call_id=f"{check(visit)}/route", route="again")) == [
        CallHandler(call_id="r/word/2/1", node="word", handler="next_word", view={"n": 1})
    ]
    # word ran: again's count starts over; next's does not
    assert run.state.limit_counts == {"check/next": 1}
    run(HandlerResult(call_id="r/word/2/1", ok=True, result=2))
    visit += 1
    run(HandlerResult(call_id=check(visit), ok=True))
    assert run(RouterResult(call_id=f"{check(visit)}/route", route="again")) == [
        CallHandler(call_id=check(visit + 1), node="check", handler="check", view={"n": 2})
    ]
    visit += 1
    run(HandlerResult(call_id=check(visit), ok=True))
    assert run(RouterResult(call_id=f"{check(visit)}/route", route="next")) == [
        CallHandler(call_id="r/word/3/1", node="word", handler="next_word", view={"n": 2})
    ]
    run(HandlerResult(call_id="r/word/3/1", ok=True, result=3))
    visit += 1
    run(HandlerResult(call_id=check(visit), ok=True))
    # next taken twice already: done instead
    assert run(RouterResult(call_id=f"{check(visit)}/route", route="next")) == [
        Finish(outputs={"n": 3})
    ]


def test_a_route_the_edge_lacks_fails_the_node() -> None:
    run = Driver(flow_of(LOOP))
    run(HandlerResult(call_id="r/word/1/1", ok=True, result=1))
    run(HandlerResult(call_id="r/check/1/1", ok=True))
    assert run(RouterResult(call_id="r/check/1/1/route", route="maybe")) == [
        Fail(
            node="check",
            error="router grade chose route 'maybe', which the edge does not have "
            "(routes: again, next, done)",
        )
    ]


# ---------------------------------------------------------------------------
# stale inputs, reducers, start


def test_stale_inputs_change_nothing() -> None:
    run = Driver(flow_of(TOOL), "r", {"n": 1})
    state = run.state
    for stale in (
        ToolResult(call_id="r/look/9/1", ok=True),
        ModelReply(call_id="r/look/1/1", text="x"),  # the wrong kind for that call
        RouterResult(call_id="r/look/1/1", route="x"),
        Answer(interrupt_id="r/look/1", answer="yes"),
        FlowTick(),
        FlowStart(run_id="r", inputs={}),
    ):
        assert run.run.next(state, stale, NOW) == (state, [])
    run(ToolResult(call_id="r/look/1/1", ok=True, result={}))
    done = run.state
    assert run.run.next(done, ToolResult(call_id="r/look/1/1", ok=True), NOW) == (done, [])


def test_merge_merges_key_by_key_and_defaults_are_copied_per_run() -> None:
    text = """\
version: "1"
outputs: [facts]
state:
  facts: {type: object, reducer: merge, default: {a: 1}}
start: learn
nodes:
  - {id: learn, type: llm, prompt: "Learn", output: facts}
edges:
  - {from: learn, to: END}
"""
    flow = flow_of(text)
    run = Driver(flow)
    assert run(ModelReply(call_id="r/learn/1/1", text='{"b": 2, "a": 3}')) == [
        Finish(outputs={"facts": {"a": 3, "b": 2}})
    ]
    assert flow.channels["facts"].default == {"a": 1}


def test_start_refuses_an_input_the_flow_does_not_take() -> None:
    with pytest.raises(ValueError, match="is not an input"):
        FlowRun(flow_of(TOOL)).start("r", {"m": 1}, NOW)


def test_a_state_of_another_flow_is_refused() -> None:
    state, _ = FlowRun(flow_of(TOOL)).start("r", {"n": 1}, NOW)
    with pytest.raises(ValueError, match="not of this one"):
        FlowRun(flow_of(ASK)).next(state, FlowTick(), NOW)


def test_a_fanout_of_questions_asks_them_one_at_a_time() -> None:
    text = """\
version: "1"
inputs: [qs]
outputs: [said]
state:
  qs: {type: list}
  q: {type: string}
  said: {type: list, reducer: append, default: []}
start: spread
nodes:
  - {id: spread, type: fanout, over: qs, to: put, as: q}
  - {id: put, type: ask, ask: "{{q}}?", output: said}
edges:
  - {from: put, to: END}
"""
    run = Driver(flow_of(text), "r", {"qs": ["Name", "Age"]})
    assert run.actions == [Ask(interrupt_id="r/put/1/0", node="put", question="Name?")]
    assert run(Answer(interrupt_id="r/put/1/1", answer="40")) == []
    assert run(Answer(interrupt_id="r/put/1/0", answer="Ann")) == [
        Ask(interrupt_id="r/put/1/1", node="put", question="Age?")
    ]
    assert run(Answer(interrupt_id="r/put/1/1", answer="40")) == [
        Finish(outputs={"said": ["Ann", "40"]})
    ]
