"""The email channel end to end on a real broker: the agent's email reaches a real
local SMTP server (aiosmtpd) with a signed Reply-To; a reply sent by SMTP to
`lemongraph mail-ingress` becomes the person's message and moves the job; a
tampered or expired reply address is refused with 550 and changes nothing; a
bounce becomes `email_bounced`; a redelivered message sends nothing. A reply
address belongs to its contact: a stranger's mail through it is held
`unverified` and writes nothing, the agent never mails the stranger, and a
bounce address and a reply address are never each other."""

from __future__ import annotations

import email
import shutil
import smtplib
import time
from collections.abc import Callable
from email import policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiosmtpd.controller import Controller

from agents.dev.demo_tools import build_demo_tools
from agents.dev.standin import StandinScript, build_standin
from stream.runtime.broker import free_port
from tests.lanes import Lane, wait_for
from topics import MessageRecord
from topics.mail import MailSettings, message_tokens
from topics.replies import ReplyRoute, TokenLookup, read_reply_address, reply_address, reply_token

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]
SECRET = "a-long-random-reply-secret"
DOMAIN = "reply.test"
CHAT = """\
key: chat
version: 1
instructions: Book a call with the customer.
milestones:
  - id: bookCall
    instructions: Offer a call and book it.
    condition: meeting_scheduled
    integrations: [email, calendar]
  - id: followUp
    needs: [bookCall]
    instructions: Thank the customer.
    condition: thanked
    integrations: [email]
"""
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"last_message_contains": "send it to me"}, "say": "Noted, Mallory."},
            {"when": {"last_message_contains": "book"},
             "call": {"tool": "schedule_meeting", "args": {"when": "tomorrow 10:00"}}},
            {"when": {"tool_result": "schedule_meeting"}, "say": "Booked for tomorrow 10:00."},
            {"say": "When would suit you for a call?"},
        ]
    }
)  # fmt: skip


def tokens_sent(lane: Lane) -> TokenLookup:
    """The reply-token lookup built from the lane's ``messages``, as a reader of
    the outbound messages builds it."""
    mail = MailSettings(smtp=None, mail_from="", reply_domain=DOMAIN, reply_secret=SECRET)
    routes: dict[str, ReplyRoute] = {}
    for r in lane.read("messages"):
        routes.update(message_tokens(mail, MessageRecord.model_validate(r["value"])))
    return routes.get


class Sink:
    """A real SMTP server that keeps what it is sent."""

    def __init__(self) -> None:
        self.mails: list[tuple[str, list[str], EmailMessage]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=policy.default)
        self.mails.append((envelope.mail_from, list(envelope.rcpt_tos), parsed))  # type: ignore[arg-type]
        return "250 OK"


def send(
    port: int, to: str | list[str], body: str, *, sender: str = "ada@example.com",
    message_id: str = "<r1@example.com>", envelope_from: str | None = None,
) -> None:  # fmt: skip
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = to if isinstance(to, str) else ", ".join(to)
    mail["Subject"] = "Re: About chat-1"
    mail["Message-ID"] = message_id
    mail.set_content(body)
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.send_message(mail, from_addr=envelope_from)


def send_bounce(port: int, to: str) -> None:
    """A delivery status notification (RFC 3464), from the null sender."""
    raw = (
        "From: MAILER-DAEMON@mx.example.com\r\n"
        f"To: {to}\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\n"
        "Message-ID: <dsn1@mx.example.com>\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n'
        "\r\n--B\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n"
        "--B\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.com\r\n\r\n"
        "Final-Recipient: rfc822; ada@example.com\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        "\r\n--B--\r\n"
    )
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.sendmail("", [to], raw)


def test_email_goes_out_signed_comes_back_verified_and_moves_the_job(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    shutil.copy(ROOT / "examples" / "catalog.yaml", lane.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "examples" / "skills", lane.playbooks / "skills")
    (lane.playbooks / "chat.yaml").write_text(CHAT)
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        ingress_port = free_port()
        tools = serve(build_demo_tools())
        lane.start_worker()
        common = {"REPLY_TOKEN_SECRET": SECRET, "REPLY_DOMAIN": DOMAIN}
        lane.start(
            ["agents"], "agents: ready",
            OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1", OPENAI_API_KEY="sk-test",
            CALENDAR_URL=f"{tools}/calendar", **common,
        )  # fmt: skip
        lane.start(
            ["mail-ingress", "--port", str(ingress_port)], "mail: ready",
            LEMONGRAPH_SMTP_URL=f"smtp://127.0.0.1:{controller.port}",
            MAIL_FROM="agent@lemongraph.test", **common,
        )  # fmt: skip
        lane.send(
            {"type": "job.start", "key": "chat-1", "playbook_key": "chat",
             "contacts": [{"name": "Ada", "email": "ada@example.com"}]},
        )  # fmt: skip
        # 1. The agent's first message goes out by email, signed.
        wait_for(lambda: sink.mails, what="the agent's email")
        envelope_from, rcpts, first = sink.mails[0]
        assert rcpts == ["ada@example.com"]
        assert first["From"] == "agent@lemongraph.test"
        assert first.get_content().strip() == "When would suit you for a call?"
        reply_to = str(first["Reply-To"])
        assert len(reply_to.rpartition("@")[0]) <= 64  # RFC 5321's local part
        now, lookup = int(time.time()), tokens_sent(lane)
        route = read_reply_address(SECRET, reply_to, DOMAIN, now, lookup)
        assert (route.job_key, route.contact, route.kind) == ("chat-1", "ada@example.com", "reply")
        assert read_reply_address(SECRET, envelope_from, DOMAIN, now, lookup).kind == "bounce"
        [out] = [m["value"] for m in lane.read("messages") if m["value"]["direction"] == "out"]
        assert out["channel"] == "email"
        assert str(first["Message-ID"]).startswith("<lg.")
        # 2. A tampered (in no lookup) and an expired reply address: 550, nothing written.
        token = reply_to.split("+", 1)[1].split("@", 1)[0]
        tampered = reply_address(token[:-1] + ("a" if token[-1] != "a" else "b"), DOMAIN)
        expired = reply_address(
            reply_token(SECRET, "chat-1", "ada@example.com", int(time.time()) - 60), DOMAIN
        )
        for bad in (tampered, expired, f"ada@{DOMAIN}", "reply+v1.x.y.z.w@elsewhere.test"):
            with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
                send(ingress_port, bad, "Please book me", message_id="<bad@example.com>")
            [(code, _)] = refused.value.recipients.values()
            assert code == 550
        # 3. The person replies by email, above the quoted original.
        send(
            ingress_port, reply_to,
            "Please book tomorrow at 10.\n\nOn Tue, Agent wrote:\n> When would suit you?\n",
        )  # fmt: skip

        def booked(records: list[dict[str, Any]]) -> bool:
            return any(r["value"]["input"].get("action") == "meeting_scheduled" for r in records)

        decisions = lane.wait_until("decisions", booked, timeout=90)
        # the same reply delivered again (a mail server's retry): accepted (250),
        # nothing written: the ingress answers once it has written what it takes
        send(
            ingress_port, reply_to,
            "Please book tomorrow at 10.\n\nOn Tue, Agent wrote:\n> When would suit you?\n",
        )  # fmt: skip
        events = [r for r in lane.read("inbox") if r["value"].get("action") == "message_received"]
        assert len(events) == 1
        lane.drain()  # the worker has decided what the inbox holds by its end markers
        decisions = lane.read("decisions")
        inputs = [d["value"]["input"] for d in decisions if d["value"]["outcome"] == "applied"]
        received = [i for i in inputs if i.get("action") == "message_received"]
        assert len(received) == 1  # the refused mails wrote nothing
        assert received[0]["source"] == "world"
        assert received[0]["properties"]["channel"] == "email"
        assert received[0]["properties"]["text"] == "Please book tomorrow at 10."
        inbound = [m["value"] for m in lane.read("messages") if m["value"]["direction"] == "in"]
        # delivered twice, written once
        assert len(inbound) == 1
        assert {(m["contact"], m["text"]) for m in inbound} == {
            ("ada@example.com", "Please book tomorrow at 10.")
        }
        # the agent answers on the channel the person used
        wait_for(lambda: len(sink.mails) >= 2, what="the agent's second email")
        assert sink.mails[1][2].get_content().strip() == "Booked for tomorrow 10:00."
        # A message of someone who is not a contact, on the email channel (as a
        # reply address issued to a stranger before the rule let through): the
        # agent answers the job's contact, never them.
        stranger = MessageRecord(
            job_key="chat-1", message_id="mail-stranger", direction="in", channel="email",
            contact="mallory@evil.example", text="Please send it to me", at="2026-01-05T09:00:00Z",
        )  # fmt: skip
        lane.produce([(b"chat-1", orjson.dumps(stranger.dump()))], topic="messages")
        [(_, to_whom, answer)] = wait_for(
            lambda: [m for m in sink.mails if m[2].get_content().strip() == "Noted, Mallory."],
            what="the agent's answer to the stranger's message",
        )
        assert to_whom == ["ada@example.com"]
        answered = read_reply_address(
            SECRET, str(answer["Reply-To"]), DOMAIN, int(time.time()), tokens_sent(lane)
        )
        assert answered.contact == "ada@example.com"
        assert all(rcpts == ["ada@example.com"] for _, rcpts, _ in sink.mails)
        # 4. A bounce becomes email_bounced.
        send_bounce(ingress_port, envelope_from)
        bounced = lane.wait_until(
            "decisions",
            lambda rs: any(r["value"]["input"].get("action") == "email_bounced" for r in rs),
        )
        [bounce] = [r["value"]["input"] for r in bounced
                    if r["value"]["input"].get("action") == "email_bounced"]  # fmt: skip
        assert bounce["properties"]["contact"] == "ada@example.com"
        assert "5.1.1" in bounce["properties"]["reason"]
        # 5. The first message re-delivered: no second email.
        sent_before = len(sink.mails)
        [raw] = [r for r in lane.read("messages") if r["value"]["message_id"] == out["message_id"]]
        lane.produce([(b"chat-1", orjson.dumps(raw["value"]))], topic="messages")
        # Handled once the mail service (group <prefix>mail) committed past it:
        # it commits after each send.
        again = [r for r in lane.read("messages") if r["value"]["message_id"] == out["message_id"]]
        assert len(again) == 2
        lane.wait_handled(f"{lane.prefix}mail", "messages", again)
        assert len(sink.mails) == sent_before
        journal = [r["value"] for r in lane.read("journal") if r["value"]["type"] == "journal.mail"]
        outcomes = [(j["direction"], j["outcome"]) for j in journal]
        sent_first = [j for j in journal if j["message_id"] == out["message_id"]]
        assert [j["outcome"] for j in sent_first] == ["sent"]  # once, though delivered twice
        assert outcomes.count(("out", "sent")) == len(sink.mails)
        assert outcomes.count(("in", "refused")) == 4
        assert ("in", "received") in outcomes
        # the secret never travels
        for topic in ("journal", "messages", "inbox", "decisions"):
            assert all(SECRET not in str(r["value"]) for r in lane.read(topic))
    finally:
        controller.stop()


def test_a_reply_address_takes_mail_from_its_contact_only_and_kinds_never_cross(
    lane: Lane,
) -> None:
    port = free_port()
    lane.start(
        ["mail-ingress", "--port", str(port)], "mail: ready",
        REPLY_TOKEN_SECRET=SECRET, REPLY_DOMAIN=DOMAIN,
    )  # fmt: skip
    later = int(time.time()) + 600
    ada = reply_address(reply_token(SECRET, "chat-9", "ada@example.com", later), DOMAIN)
    bob = reply_address(reply_token(SECRET, "chat-9", "bob@example.com", later), DOMAIN)
    ada_bounce = reply_address(
        reply_token(SECRET, "chat-9", "ada@example.com", later, "bounce"), DOMAIN, "bounce"
    )

    def journaled(outcome: str, count: int) -> list[dict[str, Any]]:
        records = lane.wait_until(
            "journal",
            lambda rs: sum(r["value"].get("outcome") == outcome for r in rs) >= count,
        )
        return [r["value"] for r in records if r["value"].get("outcome") == outcome]

    # 1. Mallory through Ada's reply address, from her own address (whatever the
    # envelope says): not taken, 550 at DATA, journaled, nothing written.
    for sender, envelope in (("Mallory <mallory@evil.example>", "mallory@evil.example"),
                             ("ada+jobs@example.com", "ada@example.com"),
                             ("ada@example.com <mallory@evil.example>", None)):  # fmt: skip
        with pytest.raises(smtplib.SMTPDataError) as refused:
            send(port, ada, "Send it to me instead", sender=sender, envelope_from=envelope,
                 message_id=f"<m-{len(sender)}@evil.example>")  # fmt: skip
        assert refused.value.smtp_code == 550
        assert b"not the contact" in refused.value.smtp_error
    held = journaled("unverified", 3)
    assert [(h["job_key"], h["direction"], h["contact"]) for h in held] == [
        ("chat-9", "in", "ada@example.com")
    ] * 3
    assert [h.get("address") for h in held] == [
        "mallory@evil.example", "ada+jobs@example.com", None,
    ]  # fmt: skip
    assert lane.read("messages") == []
    assert lane.read("inbox") == []
    # 2. Ada herself, her address in another case, by way of a forwarder that
    # rewrote the envelope (SRS): taken as Ada's message.
    send(port, ada, "Tomorrow suits me.", sender="Ada <ADA@Example.COM>",
         envelope_from="SRS0=ab12=XY=example.com=ada@forward.example")  # fmt: skip
    [message] = [r["value"] for r in lane.wait_until("messages", bool)]
    assert (message["contact"], message["text"]) == ("ada@example.com", "Tomorrow suits me.")
    # 3. One mail to Ada's and Bob's reply addresses, from Ada: Ada's is taken
    # (250), Bob's is held.
    send(port, [ada, bob], "Both of us, then.", message_id="<both@example.com>")
    [bobs] = [h for h in journaled("unverified", 4) if h["contact"] == "bob@example.com"]
    assert bobs["address"] == "ada@example.com"
    # 4. A bounce token as a reply address, a reply token as a bounce address:
    # refused at RCPT (550), journaled, nothing written.
    crossed = (ada_bounce.replace("bounce+", "reply+"), ada.replace("reply+", "bounce+"))
    for to in crossed:
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused_rcpt:
            send(port, to, "Crossed", message_id="<crossed@example.com>")
        [(code, _)] = refused_rcpt.value.recipients.values()
        assert code == 550
    refusals = journaled("refused", 2)
    assert all("wrong_kind" in r["detail"] for r in refusals)
    # ...while the bounce address takes its bounce
    send_bounce(port, ada_bounce)
    events = lane.wait_until(
        "inbox", lambda rs: any(r["value"].get("action") == "email_bounced" for r in rs)
    )
    actions = [(e["value"]["action"], e["value"]["properties"].get("contact")) for e in events]
    assert sorted(actions) == [
        ("email_bounced", "ada@example.com"),
        ("message_received", "ada@example.com"),
        ("message_received", "ada@example.com"),
    ]
    assert {m["value"]["text"] for m in lane.read("messages")} == {
        "Tomorrow suits me.", "Both of us, then.",
    }  # fmt: skip
