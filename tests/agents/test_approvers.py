"""Who answers a flow's questions and approvals (docs/flows.md, "Who approves";
docs/api.md, "Approvals"), in process: the pure rule over contacts and
approvers; where the agents service sends an approval (to the contact only when
the contact approves, else a note that it waits, which answers nothing); and
which answers the service takes, forged or not, on the API and on a channel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.contacts import approves, same_contact
from agents.flows.files import flow_tools
from agents.flows.service import FlowDriver, Flows
from agents.model import ModelSettings
from agents.run import Conversation
from agents.service import AgentService
from compiler import FlowInput, ToolResult, load_flow
from stream.runtime.config import Settings
from tests.agents.flows.test_flow_service import CATALOG
from topics import Answerer, MessageRecord, TaskOpenedRecord

ADA = {"name": "Ada", "email": "ada@example.com"}
BOSS = "boss@shop.example"
CONTACTS = [ADA, {"id": "crm-7", "email": "bob@example.com"}]

FLOW = """\
version: "1"
description: Refund an order once it is approved.
inputs: [order_id]
outputs: [refund]
state:
  order_id: {type: string, description: The order.}
  refund: {type: object, description: The refund.}
tools: [refund_order]
start: approve
nodes:
  - {id: approve, type: approval, before: pay, ask: "Refund {{order_id}}?", onReject: END
     APPROVERS}
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: refund}
edges:
  - {from: pay, to: END}
"""


def test_a_contact_is_the_same_by_any_of_its_names_and_never_when_missing() -> None:
    assert same_contact(CONTACTS, " <ADA@example.com>", "ada@example.com")
    assert same_contact(CONTACTS, "Ada", "ada@example.com")  # two names of one contact
    assert same_contact(CONTACTS, "crm-7", "BOB@example.com")
    assert not same_contact(CONTACTS, "Ada", "bob@example.com")
    assert not same_contact(CONTACTS, "mallory@evil.example", "ada@example.com")
    assert not same_contact(CONTACTS, None, None)
    assert not same_contact(CONTACTS, " ", "ada@example.com")


@pytest.mark.parametrize(
    ("approvers", "who", "approved"),
    [
        (("operators",), "ada@example.com", False),  # operators answer in the API only
        (("contacts",), "ada@example.com", True),
        (("contacts",), "Ada", True),
        (("contacts",), "mallory@evil.example", False),
        (("contacts",), None, False),
        ((BOSS,), "Boss@Shop.example", True),
        ((BOSS,), "ada@example.com", False),  # a contact, but not the one named
        (("operators", BOSS), BOSS, True),
    ],
)
def test_who_approves_on_a_channel(
    approvers: tuple[str, ...], who: str | None, approved: bool
) -> None:
    assert approves(approvers, who, CONTACTS) is approved


def _flows(approvers: str = "", catalog_approvers: tuple[str, ...] | None = None) -> Flows:
    text = CATALOG if catalog_approvers is None else (
        CATALOG + f"approvers: [{', '.join(catalog_approvers)}]\n"
    )  # fmt: skip
    catalog = load_catalog(text, "catalog.yaml")
    flow = load_flow(
        FLOW.replace("APPROVERS", f", approvers: [{approvers}]" if approvers else ""),
        "flows/approve.yaml", "approve", tools=flow_tools(catalog),
    )  # fmt: skip
    return Flows({"approve": flow}, {("orders", "resolve"): "approve"}, approvers=catalog.approvers)


def _opened() -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id="o-1/resolve", job_key="o-1", milestone="resolve", at="2026-01-05T09:00:00Z",
        instructions="Resolve.", playbook_instructions="", integrations=["shop"],
        deadline="2026-01-08T09:00:00Z", frontier=["resolve"], playbook_key="orders",
        subject={"order_id": "A-1"}, contacts=CONTACTS,
    )  # fmt: skip


def _waiting(flows: Flows) -> tuple[Conversation, list[tuple[str, Any]]]:
    """A conversation whose flow waits on its approval, and what was published."""
    published: list[tuple[str, Any]] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append((topic, record.model_dump(mode="json", by_alias=True)))

    async def save(conv: Conversation) -> None:
        pass

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1"})

    conv = Conversation("o-1")
    conv.apply(_opened())
    conv.open_flow(_opened(), "approve", {"order_id": "A-1"})
    asyncio.run(FlowDriver(flows, execute, publish, save).drive(conv, conv.flows["resolve"]))
    return conv, published


def test_an_approval_for_the_operators_tells_the_contact_it_waits_and_asks_nothing() -> None:
    _, published = _waiting(_flows())
    [note] = [r for t, r in published if t == "messages"]
    assert note["contact"] == "ada@example.com"
    assert note["interrupt_id"] is None  # answers nothing
    assert note["text"].startswith("That needs an approval first (Refund A-1?).")
    [opened] = [r for t, r in published if t == "journal" and r["type"] == "journal.interrupt"]
    assert (opened["approvers"], opened["asked_of"]) == (["operators"], None)


@pytest.mark.parametrize(
    ("node", "catalog"), [("contacts", None), ("", ("contacts",)), ("ada@example.com", None)]
)
def test_an_approval_the_contact_may_answer_is_asked_of_them(
    node: str, catalog: tuple[str, ...] | None
) -> None:
    _, published = _waiting(_flows(node, catalog))
    [asked] = [r for t, r in published if t == "messages"]
    assert asked["contact"] == "ada@example.com"
    assert asked["interrupt_id"] is not None
    assert asked["text"] == "Refund A-1? (answer yes or no)"
    [opened] = [r for t, r in published if t == "journal" and r["type"] == "journal.interrupt"]
    assert opened["asked_of"] == "ada@example.com"


def _service(tmp_path: Path, flows: Flows) -> AgentService:
    async def send(*_: Any) -> None:
        pass

    return AgentService(
        Settings(data_dir=tmp_path), load_catalog(CATALOG, "catalog.yaml"),
        ModelSettings(api_key="sk-test"), send=send, flows=flows,
    )  # fmt: skip


def _message(n: int, *, interrupt_id: str | None = None, by: Answerer | None = None,
             contact: str | None = None, channel: str = "web") -> MessageRecord:  # fmt: skip
    return MessageRecord(
        job_key="o-1", message_id=f"m-{n}", direction="in", channel=channel, text="yes",
        at="2026-01-05T09:01:00Z", interrupt_id=interrupt_id, contact=contact, by=by,
        answer="yes" if interrupt_id else None,
    )  # fmt: skip


OPERATOR = Answerer(source="world", name="operator", approver=True)
CLERK = Answerer(source="world", name="clerk")
AGENT = Answerer(source="agent", name="an-agent", approver=True)  # a role it cannot hold


@pytest.mark.parametrize(
    ("approvers", "message", "taken"),
    [
        # through the API (the interrupt named; ``by`` as the gateway stamped it)
        ("", {"by": None}, False),  # no one said who: a forged or old record
        ("", {"by": AGENT}, False),
        ("", {"by": CLERK}, False),
        ("", {"by": OPERATOR}, True),
        ("contacts", {"by": OPERATOR}, False),  # the contacts', not the operators'
        # on a channel (no interrupt named): for the conversation agent unless it approves
        ("", {"contact": "ada@example.com", "channel": "email"}, None),
        ("contacts", {"contact": "ada@example.com", "channel": "email"}, True),
        ("contacts", {"contact": "mallory@evil.example", "channel": "email"}, None),
        ("contacts", {"channel": "web"}, None),  # a web message naming no one
        (BOSS, {"contact": "ada@example.com", "channel": "email"}, None),
    ],
)
def test_the_service_takes_an_approval_only_from_its_approvers(
    tmp_path: Path, approvers: str, message: dict[str, Any], taken: bool | None
) -> None:
    flows = _flows(approvers)
    conv, published = _waiting(flows)
    [opened] = [r for t, r in published if t == "journal" and r["type"] == "journal.interrupt"]
    service = _service(tmp_path, flows)
    try:
        named = opened["interrupt_id"] if "by" in message else None
        record = _message(1, interrupt_id=named, **message)
        assert service._answer(conv, record) is taken
        track = conv.flows["resolve"]
        assert bool(track.queued) is bool(taken)
        if taken:
            by = track.answered_by
            assert by is not None
            assert by == (record.by or Answerer(contact=record.contact, channel=record.channel)
                          ).model_dump(mode="json")  # fmt: skip
    finally:
        service.db.close()
        service.offsets.close()
