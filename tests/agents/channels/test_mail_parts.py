"""The email channel's pure parts: settings read with clear errors, the email an
outbound message becomes, the person's words of a reply."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from topics import MessageRecord
from topics.mail import (
    MailSettings,
    SenderNotContact,
    SmtpTarget,
    bounce_address,
    header_message_id,
    inbound_message_id,
    outbound_email,
    received,
    reply_text,
    sender_of,
)
from topics.replies import ReplyRoute, ReplyTokenError, read_reply_address

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SETTINGS = MailSettings(
    smtp=SmtpTarget("127.0.0.1", 2526, tls=False),
    mail_from="agent@example.org",
    reply_domain="reply.example.org",
    reply_secret="secret",
)
OUT = MessageRecord(
    job_key="job-1", message_id="job-1#1.1", direction="out", channel="email",
    agent="conversation", contact="ada@example.com", text="When suits you?", at="x",
)  # fmt: skip


def test_the_smtp_url_is_read_or_refused_naming_what_is_wrong() -> None:
    assert SmtpTarget.parse("smtp://127.0.0.1:2525") == SmtpTarget("127.0.0.1", 2525, tls=False)
    tls = SmtpTarget.parse("smtps://me%40x:p%3Ass@mail.example.org")
    assert (tls.port, tls.tls, tls.username, tls.password) == (465, True, "me@x", "p:ss")
    assert tls.shown() == "smtps://me@x@mail.example.org:465"  # never the password
    for bad, says in (("http://x", "smtp:// or smtps://"), ("smtp://", "no host"),
                      ("smtp://h:port", "not a number")):  # fmt: skip
        with pytest.raises(ValueError, match=says):
            SmtpTarget.parse(bad)
    with pytest.raises(ValueError, match="LEMONGRAPH_MAIL_INGRESS_PORT"):
        MailSettings.from_env({"LEMONGRAPH_MAIL_INGRESS_PORT": "smtp"})
    with pytest.raises(ValueError, match="LEMONGRAPH_REPLY_TTL_DAYS"):
        MailSettings.from_env({"LEMONGRAPH_REPLY_TTL_DAYS": "0"})
    defaults = MailSettings.from_env({})
    assert (defaults.smtp, defaults.mail_from, defaults.ingress_port) == (
        None, "lemongraph@reply.localhost", 2525,
    )  # fmt: skip


def test_an_outbound_message_becomes_a_signed_email() -> None:
    record = OUT
    mail = outbound_email(record, SETTINGS, NOW)
    assert (mail["From"], mail["To"]) == ("agent@example.org", "ada@example.com")
    assert mail["Message-ID"] == header_message_id("job-1#1.1", "reply.example.org")
    assert mail["Message-ID"] == outbound_email(record, SETTINGS, NOW)["Message-ID"]  # stable
    route = read_reply_address("secret", mail["Reply-To"], "reply.example.org", 1_796_000_000)
    assert (route.job_key, route.contact) == ("job-1", "ada@example.com")
    assert route.expires_at == int(NOW.timestamp()) + SETTINGS.reply_ttl
    assert mail.get_content().strip() == "When suits you?"
    with pytest.raises(ValueError, match="not an address"):
        outbound_email(record.model_copy(update={"contact": "Ada"}), SETTINGS, NOW)


def test_a_reply_is_the_persons_words_without_the_quoted_original() -> None:
    cases = {
        "Tomorrow at 10.\n\nOn Tue, 1 Dec 2026, Agent <a@x> wrote:\n> When suits you?\n":
            "Tomorrow at 10.",
        "Yes please\r\n-----Original Message-----\r\nFrom: agent\r\n": "Yes please",
        "Fine by me.\n> quoted\nMore of mine.\n-- \nAda\nCEO": "Fine by me.\nMore of mine.",
        "Book it\n\nFrom: Agent <a@x>\nSent: Tuesday": "Book it",
        "> only a quote": "",
    }  # fmt: skip
    for text, words in cases.items():
        assert reply_text(text) == words, text


def test_a_received_mail_keeps_one_id_however_often_it_comes() -> None:
    assert inbound_message_id("<m1@x>", b"a") == inbound_message_id(" <m1@x> ", b"b")
    assert inbound_message_id(None, b"a") == inbound_message_id("", b"a")
    assert inbound_message_id(None, b"a") != inbound_message_id(None, b"b")


def test_a_reply_is_the_contacts_only_from_the_contacts_address() -> None:
    route = ReplyRoute("job-1", "Ada@Example.com", 1_796_000_000)
    record, event = received(route, "mail-1", sender_of("ADA <ada@example.COM>"), "Yes", "at")
    assert record is not None
    assert (record.contact, record.text) == ("Ada@Example.com", "Yes")
    assert event.action == "message_received"
    for header in ("mallory@evil.example", "Ada <ada+jobs@example.com>", "ada@example.com.evil",
                   "ada@example.com <mallory@evil.example>",  # two addresses: whose?
                   "mallory@evil.example, ada@example.com", "Ada", "", None):  # fmt: skip
        with pytest.raises(SenderNotContact) as caught:
            received(route, "mail-2", sender_of(header), "Yes", "at")
        assert caught.value.contact == "Ada@Example.com", header
    # a bounce comes from a mail server, whatever its From: the bounce token is the proof
    _, bounced = received(
        ReplyRoute("job-1", "ada@example.com", 1, "bounce"), "d-1", "mailer-daemon@mx", "", "at"
    )
    assert bounced.action == "email_bounced"


def test_the_envelope_sender_is_a_bounce_address_and_never_a_reply_address() -> None:
    record = OUT
    bounce = bounce_address(record, SETTINGS, NOW)
    assert bounce.startswith("bounce+b1.")
    route = read_reply_address("secret", bounce, "reply.example.org", 1_796_000_000)
    assert (route.kind, route.contact) == ("bounce", "ada@example.com")
    with pytest.raises(ReplyTokenError, match="wrong_kind"):
        read_reply_address(
            "secret", bounce.replace("bounce+", "reply+"), "reply.example.org", 1_796_000_000
        )
