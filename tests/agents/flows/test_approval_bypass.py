"""No way around an approval (docs/flows.md, "An approval cannot be walked
around"): the red team's playbook, whose sibling milestone grants the
integration whose ``refund_order`` the approve-refund flow guards. The
conversation agent and a delegate are not offered the tool and the executor
refuses it from them; the flow still calls it, after the approval. The real
stand-in model and the real demo tools, each over HTTP; the files are this
test's own (shared with tests/stream/cli/test_cli_approval_bypass.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.compose import OpenTask, compose
from agents.dev.demo_tools import build_demo_tools
from agents.dev.standin import StandinScript, build_standin
from agents.flows.executor import FlowExecutor
from agents.flows.handlers import HandlerRegistry
from agents.flows.service import FlowDriver, Flows, answer_input, load_flows
from agents.model import Model, ModelSettings
from agents.run import Conversation, Outbox, Runner
from agents.tools.executor import Executor
from tests.stream.cli.test_cli_approval_bypass import APPROVE_REFUND, CATALOG, QUICK_REFUND, SIBLING
from topics import InboxEvent, JournalToolCall, TaskOpenedRecord

#: The red team's playbook: its sibling milestone ``help``, open at job start,
#: names ``shop`` (and ``billing``, whose delegate has refund_order too).
PLAYBOOK = SIBLING.format(integration="shop, billing")

REASON = "refund_order is guarded by an approval in flow approve-refund: only that flow calls it"

#: The model as the red team drove it: the conversation agent refunds at once,
#: then asks the delegate to; the delegate refunds. The flow's prompts are answered.
SCRIPT = [
    {"when": {"flow": "approve-refund"}, "say": "Your refund is made."},
    {"when": {"agent": "refunder", "tool_failed": "refund_order"}, "say": "I could not."},
    {"when": {"agent": "refunder"}, "call": {"tool": "refund_order", "args": {"id": "A-1"}}},
    {"when": {"tool_result": "refunder"}, "say": "Nothing is refunded yet."},
    {"when": {"tool_failed": "refund_order"},
     "call": {"tool": "refunder", "args": {"request": "Refund order A-1."}}},
    {"call": {"tool": "refund_order", "args": {"id": "A-1"}}},
]  # fmt: skip


def playbooks(tmp_path: Path, *more: tuple[str, str]) -> Path:
    """The red team's playbooks folder (and ``more`` flow files, by name)."""
    (tmp_path / "catalog.yaml").write_text(CATALOG, encoding="utf-8")
    (tmp_path / "refunds.yaml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "flows").mkdir()
    for name, text in (("approve-refund", APPROVE_REFUND), *more):
        (tmp_path / "flows" / f"{name}.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def opened(milestone: str, integrations: list[str]) -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=f"j-1/{milestone}", job_key="j-1", milestone=milestone,
        at="2026-01-05T09:00:00Z", instructions=f"Do {milestone}.", playbook_instructions="",
        integrations=integrations, deadline="2026-01-08T09:00:00Z",
        frontier=["refund", "help"], playbook_key="refunds", subject={"order_id": "A-1"},
    )  # fmt: skip


def test_no_agent_is_offered_a_tool_a_flow_of_the_playbook_guards(tmp_path: Path) -> None:
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flows = load_flows(playbooks(tmp_path), catalog, print)
    assert flows.of("refunds", "refund") == "approve-refund"
    guarded = flows.guarded("refunds")
    assert guarded == {"refund_order": frozenset({"approve-refund"})}
    assert flows.guarded("another-playbook") == {}
    # The sibling milestone open (the flow's task is the flow's, not the agent's).
    help_task = OpenTask("j-1/help", "help", "Help.", "2026-01-08T09:00:00Z",
                         ("email", "shop", "billing"))  # fmt: skip
    job: dict[str, Any] = {"playbook_instructions": "", "subject": {}, "contacts": [], "turns": []}
    conversation = compose(catalog, tasks=[help_task], withheld=guarded, **job)
    assert [(t.name, t.kind) for t in conversation.tools] == [
        ("get_order", "tool"),
        ("refunder", "delegate"),
    ]
    delegate = compose(
        catalog, tasks=[help_task], agent="refunder", request="Refund.", withheld=guarded, **job
    )
    assert delegate.tools == ()


def test_a_flow_calling_a_guarded_tool_with_no_approval_is_not_run(tmp_path: Path) -> None:
    folder = playbooks(tmp_path, ("quick-refund", QUICK_REFUND))
    text = PLAYBOOK + "  - id: quick\n    condition: refunded\n    integrations: [shop]\n"
    (folder / "refunds.yaml").write_text(text + "    flow: quick-refund\n", encoding="utf-8")
    said: list[str] = []
    flows = load_flows(folder, load_catalog(CATALOG, "catalog.yaml"), said.append)
    assert flows.of("refunds", "quick") is None  # worked by the conversation agent
    assert flows.of("refunds", "refund") == "approve-refund"
    assert said == [
        "agents: flow 'quick-refund' of refunds/quick is not run: milestone quick: its flow "
        "quick-refund calls refund_order, and flow approve-refund guards refund_order with an "
        "approval: only that flow may call it"
    ]
    assert flows.guarded("refunds") == {"refund_order": frozenset({"approve-refund"})}


def test_a_guarding_flow_that_does_not_load_still_guards(tmp_path: Path) -> None:
    # The flow's milestone does not grant get_order: the flow does not load for
    # it, and the milestone is worked by the conversation agent, which is not
    # offered refund_order (neither is the sibling's).
    folder = playbooks(tmp_path)
    text = PLAYBOOK.replace("integrations: [shop]\n    flow:", "integrations: [email]\n    flow:")
    (folder / "refunds.yaml").write_text(text, encoding="utf-8")
    said: list[str] = []
    flows = load_flows(folder, load_catalog(CATALOG, "catalog.yaml"), said.append)
    assert flows.of("refunds", "refund") is None
    [line] = said
    assert "does not load" in line
    assert "TOOL_NOT_IN_INTEGRATIONS" in line
    assert flows.guarded("refunds") == {"refund_order": frozenset({"approve-refund"})}


class Rig:
    """The stand-in, the demo tools, and what was published."""

    def __init__(self, serve: Callable[[Any], str]) -> None:
        self.standin = build_standin(StandinScript.model_validate({"rules": SCRIPT}))
        self.model_url = serve(self.standin) + "/v1"
        self.tools = build_demo_tools()
        url = serve(self.tools)
        self.env = {"CRM_URL": f"{url}/crm", "BILLING_URL": f"{url}/billing"}
        self.published: list[tuple[str, BaseModel]] = []

    async def publish(self, topic: str, key: str, record: BaseModel) -> None:
        self.published.append((topic, record))

    def refunds(self) -> list[dict[str, Any]]:
        return [v for v in self.tools.state.done.values() if "order" in v]

    def of(self, kind: type[BaseModel]) -> list[Any]:
        return [r for _, r in self.published if isinstance(r, kind)]


def test_the_agents_are_refused_and_the_flow_refunds_after_the_approval(
    tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flows: Flows = load_flows(playbooks(tmp_path), catalog, print)
    rig = Rig(serve)

    async def save(conv: Conversation) -> None:
        pass

    async def go() -> Conversation:
        model = Model(ModelSettings(api_key="standin", base_url=rig.model_url, retries=0))
        async with httpx2.AsyncClient() as client:
            executor = Executor(catalog, client, rig.env)
            conv = Conversation("j-1")
            # At job start both are open: the flow's milestone and the sibling.
            assert conv.open_flow(opened("refund", ["shop"]), "approve-refund", {"order_id": "A-1"})
            assert conv.apply(opened("help", ["email", "shop", "billing"]))
            runner = Runner(catalog, model, executor, guarded=flows.guarded)
            await runner.run(conv, Outbox(rig.publish, save))
            # Neither the agent nor its delegate refunded: the flow's question stands.
            assert rig.refunds() == []
            flow_executor = FlowExecutor(model, executor, HandlerRegistry(), rig.publish)

            async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> Any:
                return await flow_executor.execute(
                    action, job_key=job_key, flow=flow, run_id=run_id
                )

            driver = FlowDriver(flows, execute, rig.publish, save)
            track = conv.flows["refund"]
            await driver.drive(conv, track)
            assert track.status == "waiting"
            interrupt = track.open_interrupt()
            assert interrupt is not None
            track.queued.append(answer_input(interrupt, "yes"))
            await driver.drive(conv, track)
            await model.close()
            return conv

    conv = asyncio.run(go())
    assert conv.flows["refund"].status == "finished"
    calls = [(t.agent, t.tool, t.outcome) for t in rig.of(JournalToolCall)]
    assert calls == [
        ("conversation", "refund_order", "refused"),
        ("refunder", "refund_order", "refused"),
        ("conversation", "refunder", "delegated"),
        ("flow", "get_order", "done"),
        ("flow", "refund_order", "done"),
    ]
    for refused in rig.of(JournalToolCall)[:2]:
        assert REASON in refused.result  # what the journal shows
    [refund] = rig.refunds()  # once, by the flow, after the yes
    facts = [(e.action, e.idempotency_key) for e in rig.of(InboxEvent) if e.source == "tool"]
    assert facts == [
        ("order_found", "j-1/refund#1/lookup/1/1"),
        ("refunded", "j-1/refund#1/refund/1/1"),
    ]
    assert refund["order"] == "A-1"
