"""Property tests of the flow step function (docs/flows.md, "What a step does"),
with hypothesis.

Each example flow of test_flow_step.py is driven by a random sequence of inputs
chosen from what the run waits on (results that succeed or fail, model answers
that fit or not, routes that exist or not, answers yes and no, ticks), mixed
with stale inputs (old or made-up ids). Properties:

(a) determinism: the same inputs give the same states and actions, and each
    intermediate state restored from JSON steps identically;
(b) a route limit is never exceeded (counted here from the actions, not read
    from the state);
(c) an approval refused (or expired) never runs its ``before`` node;
(d) a fan-out over an empty list never silently ends the run: a guarded flow
    always reaches what follows, an unguarded one fails;
(e) a run resumed from JSON emits no action for anything already done: every
    earlier input fed again changes nothing, and no call or question id is
    ever issued twice.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    FlowState,
    FlowTick,
    HandlerResult,
    ModelReply,
    RouterResult,
    ToolResult,
    load_flow,
)
from compiler.flows._flowmeaning import APPROVAL_YES
from compiler.flows._flowspec import ConditionalEdge
from compiler.flows._flowvalues import Action, FlowInput
from tests.compiler.flows import test_flow_step as ex
from tests.compiler.flows.test_flow_readiness import SPREAD, SPREAD_GUARDED

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

FLOWS: dict[str, tuple[str, dict[str, Any]]] = {
    "pinned": (ex.PINNED, {"order_id": "A1"}),
    "lookup": ((ex.ROOT / "examples/flows/lookup-then-ask.yaml").read_text(), {"order_id": "A1"}),
    "structured": (ex.STRUCTURED, {}),
    "tool": (ex.TOOL, {"n": 2}),
    "tools": (ex.TOOLS, {}),
    "ask": (ex.ASK, {}),
    "approval": (ex.APPROVAL, {"order_id": "A1"}),
    "fanout": (ex.FANOUT, {"docs": ["a", "b", "c"]}),
    "loop": (ex.LOOP, {}),
    "when": (ex.WHEN, {"v": {"k": "x"}}),
}
COMPILED: dict[str, Flow] = {}


def flow(name: str, text: str | None = None) -> Flow:
    key = name if text is None else f"{name}:{text}"
    if key not in COMPILED:
        COMPILED[key] = load_flow(text if text is not None else FLOWS[name][0], f"{name}.yaml")
    return COMPILED[key]


TEXTS = [
    '{"action": "refund"}',
    '{"action": "nothing"}',
    '{"action": "refund", "amount": 101}',
    '{"action": "maybe"}',
    '"A"',
    '{"b": 2}',
    "[]",
    '[{"name": "search", "args": {"q": "a"}, "id": "c1"}, {"name": "nope", "id": "c2"}]',
    "not json",
    "3",
]
RESULTS = [None, 1, 2, "x", {"id": "A1"}, [], ["a"]]
ANSWERS: list[Any] = ["yes", "no", " OK ", "Red", "blue", True, {"approved": True}, "", None]


def waits(state: FlowState) -> list[tuple[str, str]]:
    """(call id, kind) of every call the state waits on."""
    out = []
    for branch in state.branches:
        for call in branch.calls:
            if not call["done"]:
                out.append((call["call_id"], "tool"))
        if branch.call_id is not None and not branch.calls:
            out.append((branch.call_id, branch.waiting or ""))
    return out


@st.composite
def a_input(draw: st.DrawFn, state: FlowState, run: FlowRun, seen: list[str]) -> FlowInput:
    choices: list[str] = ["tick", "stale"]
    calls = waits(state)
    if calls:
        choices += ["call"] * 4
    if state.interrupt is not None:
        choices += ["answer"] * 3
    pick = draw(st.sampled_from(choices))
    if pick == "call":
        cid, kind = draw(st.sampled_from(calls))
        ok = draw(st.booleans()) or draw(st.booleans())
        if kind == "model":
            return ModelReply(call_id=cid, text=draw(st.sampled_from(TEXTS)))
        if kind == "router":
            node = cid.split("/")[-4]
            edge = run.flow.edges[node]
            assert isinstance(edge, ConditionalEdge)
            route = draw(st.sampled_from([*edge.routes, "bogus"]))
            return RouterResult(call_id=cid, route=route)
        result = draw(st.sampled_from(RESULTS))
        cls = ToolResult if kind == "tool" else HandlerResult
        return cls(call_id=cid, ok=ok, result=result if ok else None, error=None if ok else "no")
    if pick == "answer":
        assert state.interrupt is not None
        iid = state.interrupt.interrupt_id
        if draw(st.integers(0, 9)) == 0:
            iid += "x"
        return Answer(interrupt_id=iid, answer=draw(st.sampled_from(ANSWERS)))
    if pick == "stale" and seen:
        old = draw(st.sampled_from(seen))
        return (
            ToolResult(call_id=old, ok=True)
            if draw(st.booleans())
            else Answer(interrupt_id=old, answer="yes")
        )
    return FlowTick()


def ids_of(actions: list[Action]) -> list[str]:
    out = []
    for action in actions:
        if isinstance(action, CallModel | CallTool | CallHandler | CallRouter):
            out.append(action.call_id)
        elif isinstance(action, Ask | AwaitApproval):
            out.append(action.interrupt_id)
    return out


def drive(
    data: st.DataObject, name: str, text: str | None = None, inputs: dict[str, Any] | None = None
) -> tuple[FlowRun, list[tuple[FlowInput, datetime]], list[tuple[FlowState, list[Action]]]]:
    """A random run: the inputs given and each step's (state, actions)."""
    run = FlowRun(flow(name, text))
    given_inputs = FLOWS[name][1] if inputs is None else inputs
    state, actions = run.start("r", given_inputs, NOW)
    steps = [(state, actions)]
    fed: list[tuple[FlowInput, datetime]] = []
    seen = ids_of(actions)
    now = NOW
    for _ in range(40):
        if state.status in ("finished", "failed"):
            break
        given = data.draw(a_input(state, run, seen))
        if isinstance(given, FlowTick):
            now = now + timedelta(hours=data.draw(st.integers(0, 30)))
        state, actions = run.next(state, given, now)
        fed.append((given, now))
        steps.append((state, actions))
        seen += ids_of(actions)
    return run, fed, steps


NAMES = st.sampled_from(sorted(FLOWS))


@SETTINGS
@given(NAMES, st.data())
def test_a_run_is_deterministic_and_replays_from_json(name: str, data: st.DataObject) -> None:
    _, fed, steps = drive(data, name)
    again = FlowRun(flow(name))
    state, actions = again.start("r", FLOWS[name][1], NOW)
    assert (state, actions) == steps[0]
    for (fed_input, now), (want_state, want_actions), (before, _) in zip(
        fed, steps[1:], steps[:-1], strict=True
    ):
        state, actions = again.next(state, fed_input, now)
        assert (state, actions) == (want_state, want_actions)
        data_json = json.loads(json.dumps(before.model_dump(mode="json", by_alias=True)))
        restored = FlowState.model_validate(data_json)
        assert restored == before
        assert again.next(restored, fed_input, now) == (want_state, want_actions)


@SETTINGS
@given(st.lists(st.sampled_from(["again", "next", "done", "bogus"]), max_size=25), st.data())
def test_a_route_limit_is_never_exceeded(routes: list[str], data: st.DataObject) -> None:
    # LOOP: again {max: 2, per: word, then: next}, next {max: 2, then: done}.
    # The router asks for each route of ``routes`` in turn; every handler succeeds.
    run = FlowRun(flow("loop"))
    state, actions = run.start("r", {}, NOW)
    again_since_word, nexts = 0, 0
    wanted = iter(routes)
    while state.status == "running":
        (action,) = actions
        if isinstance(action, CallRouter):
            route = next(wanted, "done")
            state, actions = run.next(state, RouterResult(call_id=action.call_id, route=route), NOW)
            # Under its limit a route is taken as asked (and the count is per word).
            if route == "again" and again_since_word < 2:
                assert [a.node for a in actions if isinstance(a, CallHandler)] == ["check"]
            if route == "next" and nexts < 2:
                assert [a.node for a in actions if isinstance(a, CallHandler)] == ["word"]
            if actions and isinstance(actions[0], CallHandler):
                if actions[0].node == "check":
                    again_since_word += 1
                else:
                    nexts += 1
        else:
            assert isinstance(action, CallHandler)
            if action.node == "word":
                again_since_word = 0
            result = HandlerResult(call_id=action.call_id, ok=True, result=1)
            state, actions = run.next(state, result, NOW)
        assert again_since_word <= 2
        assert nexts <= 2
        assert all(v <= 2 for v in state.limit_counts.values())
    # And under random inputs (failures, stale ids, ticks) the counts hold too.
    _, _, steps = drive(data, "loop")
    for state, _ in steps:
        assert all(v <= 2 for v in state.limit_counts.values())


@SETTINGS
@given(st.data())
def test_a_refused_approval_never_runs_its_node(data: st.DataObject) -> None:
    _, fed, steps = drive(data, "approval")
    refused = approved = False
    for (fed_input, now), (before, _), (_, actions) in zip(fed, steps[:-1], steps[1:], strict=True):
        asked = before.interrupt
        if (
            asked is not None
            and isinstance(fed_input, Answer)
            and fed_input.interrupt_id == asked.interrupt_id
        ):
            said = fed_input.answer
            yes = (
                said is True
                or (isinstance(said, str) and said.strip().lower() in APPROVAL_YES)
                or (isinstance(said, dict) and said.get("approved") is True)
            )
            refused, approved = refused or not yes, approved or yes
        expires = asked.expires_at if asked is not None else None
        if isinstance(fed_input, FlowTick) and expires is not None and now >= expires:
            refused = True
        pays = [a for a in actions if getattr(a, "node", None) == "pay"]
        if refused:
            assert pays == []
        if pays:
            assert approved


@SETTINGS
@given(st.lists(st.sampled_from(["a", "b"]), max_size=3), st.data())
def test_an_empty_fanout_never_silently_ends_the_flow(docs: list[str], data: st.DataObject) -> None:
    _, _, steps = drive(data, "fanout", inputs={"docs": docs})
    for state, actions in steps:
        if any(isinstance(a, Finish) for a in actions):
            assert "sum_up" in state.trail
    # Unguarded: an empty list fails the run at once; guarded by onError, it
    # finishes only through it, with last_error saying why.
    _, _, steps = drive(data, "spread", SPREAD, {"items": docs})
    if not docs:
        assert steps[0][1] == [
            Fail(node="spread", error="items is empty: the fan-out has nothing to spread over")
        ]
    _, _, steps = drive(data, "guarded", SPREAD_GUARDED, {"items": docs})
    for state, actions in steps:
        assert not any(isinstance(a, Fail) and a.node == "spread" for a in actions)
        if any(isinstance(a, Finish) for a in actions):
            assert state.trail.count("note") == len(docs)
            assert state.trail[0] == "gate"


@SETTINGS
@given(NAMES, st.data())
def test_a_resumed_run_redoes_nothing(name: str, data: st.DataObject) -> None:
    run, fed, steps = drive(data, name)
    issued = [i for _, actions in steps for i in ids_of(actions)]
    # Each id is issued once, except a retried ask (same visit, same question).
    calls = [
        i for _, actions in steps for a in actions if not isinstance(a, Ask) for i in ids_of([a])
    ]
    assert len(calls) == len(set(calls))
    assert issued  # every flow does something first
    cut = data.draw(st.integers(0, len(fed)))
    state = steps[cut][0]
    resumed = FlowState.model_validate(
        json.loads(json.dumps(state.model_dump(mode="json", by_alias=True)))
    )
    assert resumed == state
    for old, now in fed[:cut]:
        if isinstance(old, FlowTick):
            continue  # time moves on: an expiry may come due now
        assert run.next(resumed, old, now) == (resumed, []) or _still_open(resumed, old)


def _still_open(state: FlowState, given: FlowInput) -> bool:
    """An earlier input that is still the live one (an unanswered question the
    earlier answer did not take, a call still pending after a stale result)."""
    if isinstance(given, Answer):
        return state.interrupt is not None and given.interrupt_id == state.interrupt.interrupt_id
    call = getattr(given, "call_id", None)
    return call is not None and call in state.pending
