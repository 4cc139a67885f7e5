"""The step function's interface (docs/flows.md, "Running a flow"): ids from our
own data, and every state, input and action round-trips through JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from compiler import (
    Answer,
    AwaitApproval,
    Branch,
    CallModel,
    FlowStart,
    FlowState,
    Interrupt,
    Join,
    ToolResult,
    action_from_json,
    call_id,
    flow_input_from_json,
    interrupt_id,
)

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_ids_are_made_of_run_node_visit_attempt_and_item() -> None:
    assert call_id("job-1/m/1", "lookup", 1, 1) == "job-1/m/1/lookup/1/1"
    assert call_id("r", "review", 2, 3, item=0) == "r/review/2/3/0"
    assert interrupt_id("r", "confirm", 1) == "r/confirm/1"
    assert interrupt_id("r", "confirm", 2, item=4) == "r/confirm/2/4"


def test_a_state_round_trips_through_json() -> None:
    state = FlowState(
        flow="lookup-then-ask",
        version="1",
        digest="0123456789abcdef",
        run_id="r",
        channels={"order": {"id": "A1"}, "notes": []},
        branches=(Branch(node="review", visit=1, fanout="spread", item=1, item_value="x"),),
        joins=(Join(fanout="spread", visit=1, target="review", items=2, done=(0,)),),
        visits={"lookup": 1, "decide": 2},
        limit_counts={"decide/act": 1},
        attempts={"decide": 2},
        pending=("r/review/1/1/1",),
        interrupt=Interrupt(
            interrupt_id="r/confirm/1",
            node="confirm",
            kind="ask",
            question="Go?",
            expires_at=NOW,
        ),
        trail=("lookup", "decide"),
        status="waiting",
    )
    data = json.loads(json.dumps(state.model_dump(mode="json", by_alias=True)))
    assert data["interrupt"]["expires_at"] == "2026-12-01T09:00:00Z"
    assert FlowState.model_validate(data) == state


def test_inputs_and_actions_are_read_back_by_kind() -> None:
    for given in (
        FlowStart(run_id="r", inputs={"order_id": "A1"}),
        ToolResult(call_id="r/lookup/1/1", ok=False, error="timed out"),
        Answer(interrupt_id="r/confirm/1", answer={"approved": True}),
    ):
        assert flow_input_from_json(json.loads(given.model_dump_json(by_alias=True))) == given
    model = CallModel(call_id="r/decide/1/1", node="decide", prompt="p", schema={"type": "string"})
    data = model.model_dump(mode="json", by_alias=True)
    assert data["schema"] == {"type": "string"}
    assert data["kind"] == "call_model"
    assert action_from_json(data) == model
    approval = AwaitApproval(interrupt_id="r/ok/1", node="ok", before="place", expires_at=NOW)
    assert action_from_json(approval.model_dump(mode="json")) == approval
