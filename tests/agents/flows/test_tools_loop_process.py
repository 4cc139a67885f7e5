"""A ``tools`` node in a loop, through the real console script (``lemongraph
flow run``) against a real HTTP tool server the test starts (issue 28 point 7;
docs/flows.md, "What a step does"): the model lists the same calls on every
round, and the server sees one request per distinct call."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from tests.compiler.flows.test_flow_tools_loop import LOOP
from tests.stream.cli.test_cli_flow_run import flow_run

CATALOG = """\
agents:
  conversation: {instructions: You help the customer.}
integrations:
  shop: {tools: [get_order]}
tools:
  get_order:
    description: Look an order up by its id (reads only).
    parameters:
      type: object
      properties:
        id: {type: string, description: The order's id.}
      required: [id]
      additionalProperties: false
    http: {url: "${SHOP_URL}/orders", method: GET}
    idempotent: true
    writes: false
"""

#: The unit tests' loop with limits: pick lists the calls, run makes them, judge
#: asks for another round: twice back to run (its queue unchanged), once back to
#: pick (which lists the same calls again), then the limit ends the run.
FLOW = (
    LOOP
    + """\
    limits:
      more: {max: 2, then: again}
      again: {max: 1, then: done}
"""
)


def _calls(*ids: str) -> list[dict[str, Any]]:
    return [{"name": "get_order", "args": {"id": i}, "id": f"c-{i}"} for i in ids]


def _script() -> dict[str, Any]:
    return {
        "rules": [
            {
                "when": {"flow_node": "pick"},
                "json": _calls("A-1", "A-2"),
            },
            {"when": {"flow_node": "judge"}, "say": "more"},
        ]
    }


def counting_shop() -> FastAPI:
    """Answers ``GET /orders?id=``; counts the requests per order id and keeps
    each request's idempotency key."""
    app = FastAPI()
    app.state.seen = Counter()
    app.state.keys = []

    @app.get("/orders")
    async def order(request: Request, id: str = "") -> dict[str, Any]:
        app.state.seen[id] += 1
        app.state.keys.append(request.headers.get("idempotency-key"))
        return {"id": id, "status": "shipped"}

    return app


def test_a_loop_back_to_a_tools_node_calls_each_distinct_call_once(
    serve: Callable[[Any], str], tmp_path: Path
) -> None:
    shop = counting_shop()
    url = serve(shop)
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "loop.yaml").write_text(FLOW)
    script = tmp_path / "loop.standin.yaml"
    script.write_text(json.dumps(_script()))

    proc = flow_run(
        "run", str(flows / "loop.yaml"), "--script", str(script), "--json",
        env={"SHOP_URL": url}, cwd=tmp_path,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    end = lines[-1]
    assert end["status"] == "finished"
    # The tools node ran four times (twice back from judge, once after pick again)...
    assert end["trail"].count("run") == 4
    tool_calls = [s for s in lines if s["kind"] == "step" and s["action"]["kind"] == "call_tool"]
    # ... and made each distinct call once: the server saw one request per order.
    assert shop.state.seen == Counter({"A-1": 1, "A-2": 1})
    assert len(tool_calls) == 2
    assert len(set(shop.state.keys)) == 2
    assert all(k.startswith("run-loop/tools/get_order/") for k in shop.state.keys)
    results = end["outputs"]["results"]
    assert [(r["id"], r["result"]["id"], r["error"]) for r in results] == [
        ("c-A-1", "A-1", None),
        ("c-A-2", "A-2", None),
    ]
