"""The email channel's pure parts: settings read with clear errors, the email an
outbound message becomes, the person's words of a reply."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from agents.channels.mail_read import MAX_PARTS, MailTooComplex, decode_text, read_mail
from topics import MessageRecord
from topics.mail import (
    MailSettings,
    SenderNotContact,
    SmtpTarget,
    automatic_reason,
    bounce_address,
    header_message_id,
    inbound_message_id,
    message_tokens,
    outbound_email,
    received,
    reply_routes,
    reply_text,
    sender_of,
)
from topics.replies import (
    ReplyRoute,
    ReplyTokenError,
    read_reply_address,
    reply_address,
    reply_token,
    short_token,
)

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SETTINGS = MailSettings(
    smtp=SmtpTarget("127.0.0.1", 2526, tls=False),
    mail_from="agent@example.org",
    reply_domain="reply.example.org",
    reply_secret="secret",
)
OUT = MessageRecord(
    job_key="job-1", message_id="job-1#1.1", direction="out", channel="email",
    agent="conversation", contact="ada@example.com", text="When suits you?",
    at="2026-12-01T10:00:00Z",
)  # fmt: skip
#: The token lookup a reader of the outbound messages builds, of OUT alone.
LOOKUP = reply_routes(SETTINGS, OUT.message_id, OUT.job_key, "ada@example.com", OUT.at).get


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


def test_an_outbound_message_becomes_an_email_with_a_short_reply_address() -> None:
    record = OUT
    mail = outbound_email(record, SETTINGS, NOW)
    assert (mail["From"], mail["To"]) == ("agent@example.org", "ada@example.com")
    assert mail["Message-ID"] == header_message_id("job-1#1.1", "reply.example.org")
    again = outbound_email(record, SETTINGS, NOW)
    assert (mail["Message-ID"], mail["Reply-To"]) == (again["Message-ID"], again["Reply-To"])
    local, _, _ = str(mail["Reply-To"]).rpartition("@")
    assert local.startswith("reply+r2.")
    assert len(local) <= 64  # RFC 5321's limit
    long_job = record.model_copy(update={"job_key": "j" * 200, "message_id": "j" * 200 + "#9.1"})
    assert len(str(outbound_email(long_job, SETTINGS, NOW)["Reply-To"]).rpartition("@")[0]) == 29
    at = 1_796_000_000
    route = read_reply_address("secret", mail["Reply-To"], "reply.example.org", at, LOOKUP)
    assert (route.job_key, route.contact, route.kind) == ("job-1", "ada@example.com", "reply")
    assert route.expires_at == int(NOW.timestamp()) + SETTINGS.reply_ttl
    # It names nothing by itself: not in the lookup (or no lookup), or past its expiry, refused.
    forged = reply_address("r2." + "a" * 20, "reply.example.org")
    for address, lookup in ((mail["Reply-To"], None), (forged, LOOKUP)):
        with pytest.raises(ReplyTokenError, match="unknown"):
            read_reply_address("secret", address, "reply.example.org", at, lookup)
    with pytest.raises(ReplyTokenError, match="expired"):
        read_reply_address("secret", mail["Reply-To"], "reply.example.org",
                           route.expires_at + 1, LOOKUP)  # fmt: skip
    # Another secret makes other tokens: the lookup of one deployment is no other's.
    other = replace(SETTINGS, reply_secret="another")
    assert outbound_email(record, other, NOW)["Reply-To"] != mail["Reply-To"]
    # The long tokens of mail sent before are still read, with no lookup.
    old = reply_address(reply_token("secret", "job-1", "ada@example.com", at + 60), "x.org")
    assert read_reply_address("secret", old, "x.org", at).job_key == "job-1"
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
    bounce = bounce_address(record, SETTINGS)
    assert bounce.startswith("bounce+b2.")
    at = 1_796_000_000
    route = read_reply_address("secret", bounce, "reply.example.org", at, LOOKUP)
    assert (route.kind, route.contact) == ("bounce", "ada@example.com")
    reply = str(outbound_email(record, SETTINGS, NOW)["Reply-To"])
    for crossed in (bounce.replace("bounce+", "reply+"), reply.replace("reply+", "bounce+")):
        with pytest.raises(ReplyTokenError, match="wrong_kind"):
            read_reply_address("secret", crossed, "reply.example.org", at, LOOKUP)
    # relabelled (the tag changed, the rest kept): in no lookup
    relabelled = reply.replace("reply+r2.", "bounce+b2.")
    with pytest.raises(ReplyTokenError, match="unknown"):
        read_reply_address("secret", relabelled, "reply.example.org", at, LOOKUP)


def test_only_an_outbound_emails_tokens_are_in_the_lookup_built_from_messages() -> None:
    assert set(message_tokens(SETTINGS, OUT)) == {
        short_token("secret", OUT.message_id, "reply"),
        short_token("secret", OUT.message_id, "bounce"),
    }
    for other in ({"direction": "in"}, {"channel": "web"}, {"contact": None}):
        assert message_tokens(SETTINGS, OUT.model_copy(update=other)) == {}


def test_automatic_mail_is_told_from_a_persons() -> None:
    person = [("From", "Ada <ada@example.com>"), ("Subject", "Re: hi")]
    assert automatic_reason(person, "ada@example.com") is None
    assert automatic_reason([*person, ("Auto-Submitted", "no")], "ada@example.com") is None
    assert automatic_reason([*person, ("Precedence", "first-class")]) is None
    cases = {
        "Auto-Submitted: auto-replied": [("auto-submitted", "Auto-Replied; owner=x")],
        "Auto-Submitted: auto-generated": [("Auto-Submitted", "auto-generated")],
        "Precedence: junk": [("Precedence", " JUNK ")],
        "Precedence: auto_reply": [("Precedence", "auto_reply")],
        "X-Autorespond": [("X-Autorespond", "Out of office")],
        "List-Unsubscribe": [("List-Unsubscribe", "<mailto:x@lists.example>")],
        "multipart/report": [("Content-Type", "multipart/report; report-type=x")],
    }
    for why, extra in cases.items():
        found = automatic_reason([*person, *extra], "ada@example.com")
        assert found is not None
        assert why.lower() in found.lower(), (why, found)
    assert "null" in str(automatic_reason(person, ""))
    assert "null" in str(automatic_reason(person, "<>"))
    assert "MAILER-DAEMON" in str(automatic_reason(person, "MAILER-DAEMON@mx.example.com"))
    assert automatic_reason([("From", "Mailer-Daemon@mx.example.com")]) is not None
    assert automatic_reason(person) is None  # no envelope known (the webhook)


def test_agent_mail_says_it_is_automatic() -> None:
    mail = outbound_email(OUT, SETTINGS, NOW)
    assert mail["Auto-Submitted"] == "auto-generated"
    assert mail["X-Auto-Response-Suppress"] == "OOF, AutoReply"


def test_the_per_contact_bound_is_read_with_clear_errors() -> None:
    defaults = MailSettings.from_env({})
    assert (defaults.per_contact, defaults.per_contact_window) == (10, 3600)
    off = MailSettings.from_env({"LEMONGRAPH_MAIL_PER_CONTACT": "0"})
    assert off.per_contact == 0
    for name, bad in (("LEMONGRAPH_MAIL_PER_CONTACT", "-1"),
                      ("LEMONGRAPH_MAIL_PER_CONTACT_WINDOW", "0"),
                      ("LEMONGRAPH_MAIL_PER_CONTACT_WINDOW", "1h")):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            MailSettings.from_env({name: bad})


def test_a_mail_is_read_within_its_limits_in_any_charset() -> None:
    def parts(count: int) -> bytes:
        head = b'From: a@x\r\nContent-Type: multipart/mixed; boundary="B"\r\n\r\n'
        return head + b"--B\r\n\r\nx\r\n" * count + b"--B--\r\n"

    assert read_mail(parts(MAX_PARTS - 1)).text.strip() == "x"  # the message and 999 parts
    with pytest.raises(MailTooComplex, match="too many MIME parts"):
        read_mail(parts(MAX_PARTS))
    words = "Tomorrow \u05e9\u05dc\u05d5\u05dd".encode("iso-8859-8")
    assert decode_text(words, "ISO-8859-8-I") == "Tomorrow \u05e9\u05dc\u05d5\u05dd"
    assert decode_text(words, "unknown-8bit") == "Tomorrow " + "\ufffd" * 4
    assert decode_text(words, "x-user-defined") == words.decode("latin-1")
    assert decode_text(words, "no-such-charset") == "Tomorrow " + "\ufffd" * 4
    assert decode_text("café".encode(), None) == "café"
    auto = read_mail(b"From: ada@example.com\r\nAuto-Submitted: auto-replied\r\n\r\nAway.\r\n")
    assert (auto.text.strip(), auto.automatic) == ("Away.", "Auto-Submitted: auto-replied")
