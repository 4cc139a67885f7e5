"""Mail loops stop (docs/agents.md, "Mail loops"), end to end on a real broker: the
worker, the agents service over the stand-in model, `lemongraph mail-ingress`
and a real SMTP server whose contacts answer every mail at once, as an
out-of-office responder does. Ada's responder marks its reply
(`Auto-Submitted: auto-replied`): the loop stops at one reply, no model run.
Bob's marks nothing (its answers alternate, so the agent never repeats itself):
the per-contact bound stops it, the next mail withheld and journaled."""

from __future__ import annotations

import email
import queue
import shutil
import smtplib
import threading
from email import policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from agents.dev.standin import StandinScript, build_standin
from stream.runtime.broker import free_port
from tests.lanes import Lane, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]
SECRET = "a-long-random-reply-secret"
DOMAIN = "reply.test"
BOUND = 3
PLAYBOOK = """\
key: away
version: 1
instructions: Book a call with the customer.
milestones:
  - id: bookCall
    instructions: Offer a call and book it.
    condition: meeting_scheduled
    integrations: [email]
"""
#: The agent answers each out-of-office note, in words that alternate with them.
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"last_message_contains": "(odd)"}, "say": "Are you back on Monday?"},
            {"when": {"last_message_contains": "(even)"}, "say": "Shall we talk then?"},
            {"say": "When would suit you for a call?"},
        ]
    }
)


class Responder:
    """A real SMTP server for the agent's mail; every mail to ``@away.test`` is
    answered at once from its recipient (by a thread of its own, over SMTP, to
    its Reply-To), as an out-of-office responder answers."""

    def __init__(self, ingress_port: int) -> None:
        self.ingress_port = ingress_port
        self.mails: list[tuple[str, EmailMessage]] = []
        self.lock = threading.Lock()
        self.todo: queue.Queue[tuple[str, EmailMessage, int] | None] = queue.Queue()
        self.thread = threading.Thread(target=self.answer_all, daemon=True)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        for rcpt in envelope.rcpt_tos:
            with self.lock:
                self.mails.append((rcpt, parsed))
                count = len(self.to(rcpt))
            self.todo.put((rcpt, parsed, count))
        return "250 OK"

    def to(self, address: str) -> list[EmailMessage]:
        return [mail for rcpt, mail in list(self.mails) if rcpt == address]

    def answer_all(self) -> None:
        while (item := self.todo.get()) is not None:
            self.answer(*item)

    def answer(self, rcpt: str, mail: EmailMessage, count: int) -> None:
        reply = EmailMessage()
        reply["From"] = rcpt
        reply["To"] = str(mail["Reply-To"])
        reply["Subject"] = f"Automatic reply: {mail['Subject']}"
        reply["Message-ID"] = f"<away-{count}-{rcpt}>"
        reply["In-Reply-To"] = str(mail["Message-ID"])
        if rcpt.startswith("ada@"):  # a responder that says what it is (RFC 3834)
            reply["Auto-Submitted"] = "auto-replied"
        reply.set_content(f"I am away until Monday ({'odd' if count % 2 else 'even'}).")
        with smtplib.SMTP("127.0.0.1", self.ingress_port, timeout=30) as client:
            client.send_message(reply, from_addr=rcpt)


def test_an_out_of_office_loop_stops(lane: Lane, serve: Any) -> None:
    shutil.copy(ROOT / "examples" / "catalog.yaml", lane.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "examples" / "skills", lane.playbooks / "skills")
    (lane.playbooks / "away.yaml").write_text(PLAYBOOK)
    ingress_port = free_port()
    responder = Responder(ingress_port)
    responder.thread.start()
    controller = Controller(responder, hostname="127.0.0.1", port=free_port())
    controller.start()
    standin = build_standin(SCRIPT)
    try:
        common = {"REPLY_TOKEN_SECRET": SECRET, "REPLY_DOMAIN": DOMAIN}
        lane.start_worker()
        lane.start(
            ["agents"], "agents: ready",
            OPENAI_BASE_URL=f"{serve(standin)}/v1", OPENAI_API_KEY="sk-test", **common,
        )  # fmt: skip
        lane.start(
            ["mail-ingress", "--port", str(ingress_port)], "mail: ready",
            LEMONGRAPH_SMTP_URL=f"smtp://127.0.0.1:{controller.port}",
            MAIL_FROM="agent@lemongraph.test", LEMONGRAPH_MAIL_PER_CONTACT=str(BOUND), **common,
        )  # fmt: skip
        lane.send(
            {"type": "job.start", "key": "away-ada", "playbook_key": "away",
             "contacts": [{"name": "Ada", "email": "ada@away.test"}]},
            {"type": "job.start", "key": "away-bob", "playbook_key": "away",
             "contacts": [{"name": "Bob", "email": "bob@away.test"}]},
        )  # fmt: skip

        def mail_journal(key: str) -> list[dict[str, Any]]:
            return [
                r["value"] for r in lane.read("journal")
                if r["value"].get("type") == "journal.mail" and r["value"]["job_key"] == key
            ]  # fmt: skip

        def seen(key: str, outcome: str, detail: str = "") -> list[dict[str, Any]]:
            return [
                j for j in mail_journal(key) if j["outcome"] == outcome and detail in j["detail"]
            ]

        # Ada's auto-reply is journaled, not taken: the end of her loop.
        [automatic] = wait_for(
            lambda: seen("away-ada", "automatic"), timeout=90,
            what=f"Ada's auto-reply journaled ({len(responder.to('ada@away.test'))} mails so far)",
        )  # fmt: skip
        assert "Auto-Submitted: auto-replied" in automatic["detail"]
        assert automatic["direction"] == "in"
        # Bob's unmarked replies are taken, until the bound withholds the agent's mail.
        [withheld] = wait_for(
            lambda: seen("away-bob", "refused", "withheld: loop"), timeout=90,
            what=f"Bob's loop withheld ({len(responder.to('bob@away.test'))} mails so far)",
        )  # fmt: skip
        # Each loop has ended: nothing of Ada's was written, and no mail went out
        # after the one withheld, so there is nothing left to answer.
        responder.todo.put(None)
        responder.thread.join(timeout=30)
        assert len(responder.to("ada@away.test")) == 1
        assert responder.to("ada@away.test")[0]["Auto-Submitted"] == "auto-generated"
        assert len(responder.to("bob@away.test")) == BOUND
        messages = [r["value"] for r in lane.read("messages")]
        ins = [(m["job_key"], m["text"]) for m in messages if m["direction"] == "in"]
        assert [k for k, _ in ins].count("away-ada") == 0
        assert [k for k, _ in ins].count("away-bob") == BOUND
        outs = [m for m in messages if m["direction"] == "out" and m["job_key"] == "away-bob"]
        assert withheld["message_id"] == outs[-1]["message_id"]
        assert len(outs) == BOUND + 1
        # one model call for Ada's job, one per agent message for Bob's
        assert standin.state.calls == 1 + BOUND + 1
        inbox = [r["value"] for r in lane.read("inbox") if r["key"] == "away-ada"]
        assert all(e.get("action") != "message_received" for e in inbox)
    finally:
        controller.stop()
        responder.todo.put(None)
