"""`lemongraph check` and `lemongraph flow check` on a playbook that walks around
a flow's approval (docs/flows.md, "An approval cannot be walked around"): the red
team's sibling milestone, granting the integration whose `refund_order` the
approve-refund flow guards. Through the real console script; every file is
this test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stream.cli.test_cli_simulate_check import run

#: Also the agents' tests' (tests/agents/flows/test_approval_bypass.py, against the demo tools).
CATALOG = """\
integrations:
  email: {}
  shop: {tools: [get_order, refund_order]}
  lookup: {tools: [get_order]}
  billing: {delegate: refunder}
  ledger: {delegate: bookkeeper}
agents:
  conversation:
    instructions: Help the customer.
    bounds: {max_turns: 4, max_tool_calls: 3}
  refunder:
    description: Refunds orders.
    instructions: You refund orders.
    tools: [refund_order]
    bounds: {max_turns: 2, max_tool_calls: 1}
  bookkeeper:
    instructions: You keep the books.
    delegates: [refunder]
tools:
  get_order:
    description: Look an order up.
    parameters:
      type: object
      properties: {id: {type: string}}
      required: [id]
      additionalProperties: false
    http: {url: "${CRM_URL}/orders", method: GET}
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
    http: {url: "${BILLING_URL}/refunds", method: POST}
    idempotent: true
    records: {fact: refunded, properties: {refund: "$.id"}}
"""

#: The bundled approve-refund flow, as the red team ran it.
APPROVE_REFUND = """\
version: "1"
inputs: [order_id]
outputs: [refund, reply]
state:
  order_id: {type: string}
  order:    {type: object}
  refund:   {type: object}
  reply:    {type: string}
tools: [get_order, refund_order]
start: lookup
nodes:
  - {id: lookup, type: tool, tool: get_order, args: {id: "{{order_id}}"}, output: order}
  - {id: approve, type: approval, before: refund, ask: "Refund {{order_id}}?", show: [order],
     onReject: decline}
  - {id: refund, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: refund}
  - {id: confirm, type: llm, prompt: "Say refund {{refund.id}} is made.", output: reply}
  - {id: decline, type: llm, prompt: "Say {{order_id}} is not refunded.", output: reply}
edges:
  - {from: lookup, to: approve}
  - {from: refund, to: confirm}
  - {from: confirm, to: END}
  - {from: decline, to: END}
"""

#: The red team's playbook: the refund milestone run by the flow, and a sibling
#: milestone, open at job start, whose agent the same integration grants refund_order.
SIBLING = """\
key: refunds
version: 1
milestones:
  - id: refund
    condition: refunded
    integrations: [shop]
    flow: approve-refund
  - id: help
    condition: order_found
    integrations: [email, {integration}]
"""

#: A second flow that calls refund_order with no approval of its own.
QUICK_REFUND = """\
version: "1"
inputs: [order_id]
outputs: [refund]
state:
  order_id: {type: string}
  refund: {type: object}
tools: [refund_order]
start: pay
nodes:
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: refund}
edges:
  - {from: pay, to: END}
"""


def folder(tmp_path: Path, integration: str = "shop") -> Path:
    (tmp_path / "catalog.yaml").write_text(CATALOG, encoding="utf-8")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "approve-refund.yaml").write_text(APPROVE_REFUND, encoding="utf-8")
    text = SIBLING.format(integration=integration)
    (tmp_path / "refunds.yaml").write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("integration", "how"),
    [
        ("shop", "integration shop grants its agent"),
        # Through the integration's delegate agent, and through that agent's delegate.
        ("billing", "integration billing's delegate agent refunder has"),
        ("ledger", "integration ledger's delegate agent refunder has"),
    ],
)
def test_check_refuses_a_sibling_milestone_granting_the_guarded_tool(
    tmp_path: Path, integration: str, how: str
) -> None:
    proc = run("check", ".", cwd=folder(tmp_path, integration))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        f"refunds.yaml:10:27: error APPROVAL_BYPASS: milestone help: {how} refund_order, "
        "and flow approve-refund guards refund_order with an approval: only that flow may "
        "call it"
    ]


def test_a_sibling_granted_only_what_the_flow_does_not_guard_is_valid(tmp_path: Path) -> None:
    proc = run("check", ".", cwd=folder(tmp_path, "lookup"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "ok: 3 file(s) valid\n"  # the playbook, the catalog, the flow


def test_check_refuses_another_flow_calling_the_guarded_tool_with_no_approval(
    tmp_path: Path,
) -> None:
    root = folder(tmp_path, "lookup")
    (root / "flows" / "quick-refund.yaml").write_text(QUICK_REFUND, encoding="utf-8")
    quick = "  - id: quick\n    condition: refunded\n    integrations: [shop]\n"
    text = SIBLING.format(integration="lookup") + quick + "    flow: quick-refund\n"
    (root / "refunds.yaml").write_text(text, encoding="utf-8")
    proc = run("check", ".", cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "refunds.yaml:14:11: error APPROVAL_BYPASS: milestone quick: its flow quick-refund "
        "calls refund_order, and flow approve-refund guards refund_order with an approval: "
        "only that flow may call it"
    ]


def test_flow_check_reports_the_bypass_of_the_flows_approval(tmp_path: Path) -> None:
    root = folder(tmp_path)
    proc = run("flow", "check", "flows/approve-refund.yaml", cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "refunds.yaml:10:27: error APPROVAL_BYPASS: milestone help: integration shop grants "
        "its agent refund_order, and flow approve-refund guards refund_order with an "
        "approval: only that flow may call it"
    ]
    # The whole folder: each bypass once.
    proc = run("flow", "check", "flows", cwd=root)
    assert proc.returncode == 1
    assert len(proc.stdout.splitlines()) == 1
