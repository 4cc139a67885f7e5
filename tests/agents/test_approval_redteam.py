"""The red team's approval, against the real stack (issue 27; docs/api.md,
"Approvals"; docs/flows.md, "Who approves"): the real worker, `lemongraph
agents`, `lemongraph gateway` and `lemongraph mail-ingress` processes on the
embedded broker, the stand-in model, a local shop and a local SMTP server.

A flow's approval stands before ``refund_order``; the job's contact is Ada.
While it is open, an agent token, a tool token and a world token without the
approver role are refused on the API (403, journaled with who tried); Ada's
"yes" in the chat and by email goes to the conversation agent (which answers
it), not to the flow, because operators approve; Mallory's "yes" through Ada's
reply address is refused at SMTP. Each is seen refused on a positive signal
before the shop is asked whether it refunded. Then an operator approves: the
flow resumes and the shop refunds once; a second answer is 409. On a second
job, whose flow node says ``approvers: [contacts]``, an operator's API answer
is the one refused and Ada's emailed "yes" approves. One stack serves both
jobs (starting it is most of the test's time)."""

from __future__ import annotations

import smtplib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from fastapi import FastAPI

from agents.dev.standin import StandinScript, build_standin
from stream.runtime.broker import free_port
from tests.agents.channels.test_mail import DOMAIN, SECRET, Sink, send, tokens_sent
from tests.agents.flows.test_flow_service import CATALOG, shop
from tests.agents.test_approvers import FLOW
from tests.lanes import Lane, wait_for
from tests.stream.gateway.conftest import GatewayProcess, start_gateway
from topics.replies import read_reply_address

__all__ = ["start_gateway"]  # the fixture

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

ADA = "ada@example.com"
#: The refund milestone is the flow's; ``help``, open beside it, is the
#: conversation agent's, so that a message the flow does not take is answered.
PLAYBOOK = """\
key: KEY
version: 1
instructions: Help the customer with their order.
milestones:
  - id: refund
    instructions: Refund the order once it is approved.
    condition: order_refunded
    integrations: [shop, email]
    flow: FLOW
  - id: help
    instructions: Answer the customer while the refund waits.
    condition: thanked
    integrations: [email]
"""
#: By playbook (and its flow): who approves the refund, as the flow node says.
APPROVERS = {"orders": "", "orders-by-contacts": "contacts"}
#: The jobs: one on each playbook, Ada the contact of both.
JOBS = {"o-1": ("orders", "A-1"), "o-2": ("orders-by-contacts", "B-2")}
NOT_YOURS = "An operator approves refunds: your yes does not."
SCRIPT = StandinScript.model_validate(
    {"rules": [{"when": {"last_message_contains": "yes"}, "say": NOT_YOURS},
               {"say": "Your refund request is with us."}]}
)  # fmt: skip
OPERATOR = {"source": "world", "name": "operator", "approver": True}


def interrupt(job: str) -> str:
    return f"{job}/refund#1/approve/1"


@dataclass
class Stack:
    lane: Lane
    gateway: GatewayProcess
    shop: FastAPI
    sink: Sink
    ingress: int  # the mail ingress's SMTP port

    def refunds(self, job: str) -> list[str]:
        """The ids of the shop's refund calls for ``job``."""
        return [k for name, k in self.shop.state.calls if name == "refund" and k.startswith(job)]

    def answer(self, job: str, token: str, answer: str = "yes") -> httpx.Response:
        with self.gateway.client(token) as client:
            return client.post(
                f"/v1/jobs/{job}/answers", json={"interrupt_id": interrupt(job), "answer": answer}
            )

    def open_ones(self, job: str) -> list[str]:
        """The job's open questions, as the gateway lists them."""
        with self.gateway.client(self.gateway.token()) as client:
            listed = client.get(f"/v1/jobs/{job}/interrupts").json().get("interrupts") or []
        return [i["interrupt_id"] for i in listed]

    def of(self, topic: str, job: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The job's records on ``topic`` (of type ``kind``), their values."""
        records = [r["value"] for r in self.lane.read(topic) if r["key"] == job]
        return [v for v in records if kind is None or v["type"] == kind]

    def interrupts(self, job: str, status: str | None = None) -> list[dict[str, Any]]:
        records = self.of("journal", job, "journal.interrupt")
        return [r for r in records if status is None or r["status"] == status]

    def reply_to(self, job: str, text: str) -> str:
        """The Reply-To of the agents' email to Ada that says ``text``: an
        address of ``job``'s, issued to Ada."""
        [(_, rcpts, mail)] = wait_for(
            lambda: [m for m in self.sink.mails if text in m[2].get_content()],
            what=f"the email saying {text!r}",
        )
        assert rcpts == [ADA]
        address = str(mail["Reply-To"])
        now = int(time.time())
        route = read_reply_address(SECRET, address, DOMAIN, now, tokens_sent(self.lane))
        assert (route.job_key, route.contact, route.kind) == (job, ADA, "reply")
        return address

    def conversation_said(self, job: str, count: int) -> None:
        """The conversation agent has answered ``count`` of ``job``'s "yes"es:
        the messages before were read, and were its to answer, not the flow's."""
        self.lane.wait_until(
            "messages",
            lambda rs: sum(r["key"] == job and r["value"].get("agent") == "conversation"
                           and r["value"]["text"] == NOT_YOURS for r in rs) >= count,
        )  # fmt: skip

    def finished(self, job: str) -> None:
        """``job``'s flow ran to its end and the refund settled its milestone."""
        self.lane.wait_until(
            "journal",
            lambda rs: any(r["key"] == job and r["value"]["type"] == "journal.flow"
                           and r["value"]["event"] == "finished" for r in rs),
            timeout=120,
        )  # fmt: skip
        self.lane.wait_until(
            "decisions",
            lambda rs: any(r["key"] == job and r["value"]["outcome"] == "applied"
                           and r["value"]["input"].get("action") == "order_refunded"
                           for r in rs),
        )  # fmt: skip


@pytest.fixture
def sink() -> Iterator[tuple[Sink, int]]:
    """A real SMTP server for the agents' outbound mail: what it got, its port."""
    got = Sink()
    controller = Controller(got, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield got, controller.port
    finally:
        controller.stop()


@pytest.fixture
def stack(
    lane: Lane,
    serve: Callable[[Any], str],
    start_gateway: Callable[..., GatewayProcess],
    sink: tuple[Sink, int],
) -> Stack:
    """Every process up, both jobs started and their approvals open in the gateway."""
    for path in lane.playbooks.glob("*.yaml"):
        path.unlink()  # only this test's playbooks
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    (lane.playbooks / "flows").mkdir()
    for key, approvers in APPROVERS.items():
        (lane.playbooks / f"{key}.yaml").write_text(
            PLAYBOOK.replace("KEY", key).replace("FLOW", key)
        )
        declared = f", approvers: [{approvers}]" if approvers else ""
        (lane.playbooks / "flows" / f"{key}.yaml").write_text(FLOW.replace("APPROVERS", declared))
    tools = shop()
    replies = {"REPLY_TOKEN_SECRET": SECRET, "REPLY_DOMAIN": DOMAIN}
    ingress = free_port()
    lane.start_worker()
    agents = lane.start(
        ["agents"], "agents: ready",
        OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1", OPENAI_API_KEY="sk-test",
        SHOP_URL=serve(tools), **replies,
    )  # fmt: skip
    assert any("2 milestones run by flows" in line for line in agents.lines), agents.lines
    lane.start(
        ["mail-ingress", "--port", str(ingress)], "mail: ready",
        LEMONGRAPH_SMTP_URL=f"smtp://127.0.0.1:{sink[1]}", MAIL_FROM="agent@lemongraph.test",
        **replies,
    )  # fmt: skip
    run = Stack(lane, start_gateway(), tools, sink[0], ingress)
    lane.send(
        *[{"type": "job.start", "key": job, "playbook_key": playbook,
           "subject": {"order_id": order}, "contacts": [{"name": "Ada", "email": ADA}]}
          for job, (playbook, order) in JOBS.items()],
    )  # fmt: skip
    for job in JOBS:
        wait_for(lambda: run.open_ones(job), timeout=120, what=f"{job}'s open approval")  # noqa: B023
        assert run.open_ones(job) == [interrupt(job)]
    return run


def test_only_the_approvers_approve_the_refund_and_it_is_paid_once(stack: Stack) -> None:
    run, gateway = stack, stack.gateway
    operator = gateway.token(name="operator", approver=True)

    # The flow's approvers are the operators (the default): Ada is told it waits.
    [opened] = run.interrupts("o-1", "open")
    assert (opened["kind"], opened["approvers"], opened["asked_of"]) == (
        "approval", ["operators"], None,
    )  # fmt: skip
    reply_to = run.reply_to("o-1", "That needs an approval first (Refund A-1?).")
    # 1-3. An agent token, a tool token, a world token without the approver role.
    for source, name, code in [
        ("agent", "an-agent", "source_not_allowed"),
        ("tool", "a-tool", "source_not_allowed"),
        ("world", "clerk", "not_an_approver"),
    ]:
        refused = run.answer("o-1", gateway.token(source=source, name=name))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == code
    journaled = run.interrupts("o-1", "refused")  # written before the 403 was sent
    assert [(r["interrupt_id"], r["by"]["source"], r["by"]["name"], r["by"]["approver"])
            for r in journaled] == [
        (interrupt("o-1"), "agent", "an-agent", False),
        (interrupt("o-1"), "tool", "a-tool", False),
        (interrupt("o-1"), "world", "clerk", False),
    ]  # fmt: skip
    assert all(r["approvers"] == ["operators"] for r in journaled)
    # 4. Ada's "yes" in the chat: the conversation agent's to answer.
    with gateway.client(gateway.token()) as client:
        said = client.post(
            "/v1/jobs/o-1/messages", json={"text": "yes", "contact": ADA, "message_id": "chat-1"}
        )
        assert said.status_code == 202, said.text
    run.conversation_said("o-1", 1)
    assert run.refunds("o-1") == []
    # 5. Mallory's "yes" through Ada's reply address: refused at SMTP.
    with pytest.raises(smtplib.SMTPDataError) as stranger:
        send(run.ingress, reply_to, "yes", sender="mallory@evil.example",
             message_id="<yes@evil.example>")  # fmt: skip
    assert stranger.value.smtp_code == 550
    # 6. Ada's "yes" by email: taken as her message, and the conversation agent's.
    send(run.ingress, reply_to, "yes", message_id="<yes@example.com>")
    run.conversation_said("o-1", 2)
    assert run.refunds("o-1") == []
    assert run.open_ones("o-1") == [interrupt("o-1")]
    inbound = [m for m in run.of("messages", "o-1") if m["direction"] == "in"]
    assert [(m["channel"], m["contact"], m["text"], m["interrupt_id"]) for m in inbound] == [
        ("web", ADA, "yes", None),
        ("email", ADA, "yes", None),
    ]  # Mallory's wrote nothing
    mails = [r for r in run.of("journal", "o-1", "journal.mail") if r["direction"] == "in"]
    assert [(r["outcome"], r["address"]) for r in mails] == [
        ("unverified", "mallory@evil.example"),
        ("received", ADA),
    ]
    # 7. An operator approves: the flow resumes and the shop refunds once.
    approved = run.answer("o-1", operator)
    assert approved.status_code == 202, approved.text
    again = run.answer("o-1", operator, "no")
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "interrupt_not_open"
    run.finished("o-1")
    assert run.refunds("o-1") == ["o-1/refund#1/pay/1/1"]
    [answered] = run.interrupts("o-1", "answered")
    assert answered["answer"] == "yes"
    assert answered["by"] == {**OPERATOR, "contact": None, "channel": None}
    [message] = [m for m in run.of("messages", "o-1") if m["interrupt_id"] == interrupt("o-1")]
    assert (message["direction"], message["answer"], message["by"]) == (
        "in", "yes", answered["by"],
    )  # fmt: skip
    statuses = [r["status"] for r in run.interrupts("o-1")]
    assert statuses == ["open", "refused", "refused", "refused", "answered"]

    # The flow's approvers are its contacts: Ada is asked; the operators are not.
    [opened] = run.interrupts("o-2", "open")
    assert (opened["approvers"], opened["asked_of"]) == (["contacts"], ADA)
    reply_to = run.reply_to("o-2", "Refund B-2? (answer yes or no)")
    refused = run.answer("o-2", operator)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "not_an_approver"
    [journaled_one] = run.interrupts("o-2", "refused")
    assert journaled_one["by"] == {**OPERATOR, "contact": None, "channel": None}
    send(run.ingress, reply_to, "yes", message_id="<yes-o-2@example.com>")
    run.finished("o-2")
    assert run.refunds("o-2") == ["o-2/refund#1/pay/1/1"]
    [answered] = run.interrupts("o-2", "answered")
    assert answered["answer"] == "yes"
    assert answered["by"] == {
        "source": "world", "name": "", "approver": False, "contact": ADA, "channel": "email",
    }  # fmt: skip
    texts = [m["text"] for m in run.of("messages", "o-2") if m.get("agent") == "conversation"]
    assert NOT_YOURS not in texts  # the flow's answer, not the conversation agent's
    assert [r["status"] for r in run.interrupts("o-2")] == ["open", "refused", "answered"]
    assert run.refunds("o-1") == ["o-1/refund#1/pay/1/1"]  # still once
