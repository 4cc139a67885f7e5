"""The key rule (topics/_keys.py) on contacts and idempotency keys: what the UI
shows and compares as text has no control, bidi or zero-width character, on
the inbox and in the records that bring a contact in, and the refusal names
the character and its position as the job key's does."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from topics import (
    MAX_CONTACT_LENGTH,
    Answerer,
    InboxEvent,
    JobKeyError,
    JobStart,
    MessageRecord,
    RecordError,
    ScheduleWake,
    check_label,
    decode_inbox,
    inbound_message,
)

#: Each breaks the rule; the refusal's text, after "<what> ".
HOSTILE = [
    ("ada\u202e@example.com", "has U+202E (RIGHT-TO-LEFT OVERRIDE) at position 3"),
    ("ada\u200b@example.com", "has U+200B (ZERO WIDTH SPACE) at position 3"),
    ("\u2066ada@example.com\u2069", "has U+2066 (LEFT-TO-RIGHT ISOLATE) at position 0"),
    ("ada\n@example.com", "has U+000A at position 3: a control character"),
    ("ada\ufe0f@example.com", "has U+FE0F (VARIATION SELECTOR-16) at position 3"),
    ("cafe\u0301@example.com", "is not in Unicode normal form NFC"),
]

#: What the job key rule refuses for URL paths, and these allow.
READABLE = ["job-1/bookCall", "msg:<id@host>", ".", "..", "Ada Lovelace", "José", "日本"]


def reason_of(raw: bytes) -> str:
    with pytest.raises(RecordError) as caught:
        decode_inbox(raw, b"job-1")
    return caught.value.reason


def test_an_idempotency_key_has_no_edge_space_but_a_contact_as_typed_may() -> None:
    for key in (" pay-1", "pay-1 "):
        raw = orjson.dumps({"type": "event", "key": "job-1", "action": "a", "idempotency_key": key})
        assert "idempotency key starts or ends with a space" in reason_of(raw)
    record, _ = inbound_message("j", "m-1", "web", " <Ada@Example.com> ", "hi", "2026-01-01T00:00Z")
    assert record.contact == " <Ada@Example.com> "


@pytest.mark.parametrize(("value", "reason"), HOSTILE)
def test_an_idempotency_key_that_breaks_the_rule_is_refused_on_the_inbox(
    value: str, reason: str
) -> None:
    with pytest.raises(JobKeyError) as caught:
        check_label(value, "idempotency key")
    assert str(caught.value).startswith(f"idempotency key {reason}")
    raw = orjson.dumps(
        {"type": "event", "key": "job-1", "action": "paid", "idempotency_key": value}
    )
    assert f"idempotency_key: idempotency key {reason}" in reason_of(raw)
    with pytest.raises(ValidationError, match="request_id"):
        ScheduleWake(schedule_id="nightly", request_id=value)


@pytest.mark.parametrize(("value", "reason"), HOSTILE)
def test_a_contact_that_breaks_the_rule_is_refused_in_a_start_and_a_message(
    value: str, reason: str
) -> None:
    contacts: list[list[Any]] = [
        [value],
        [{"name": "Ada", "email": value}],
        [{"email": "ok@example.com"}, {"name": value}],
    ]
    for given, where in zip(contacts, ("0", "0.email", "1.name"), strict=True):
        start = {"type": "job.start", "key": "job-1", "playbook_key": "p", "contacts": given}
        assert f"contacts: contact {where} {reason}" in reason_of(orjson.dumps(start))
    with pytest.raises(ValidationError) as caught:
        inbound_message("job-1", "m-1", "web", value, "hello", "2026-01-01T00:00:00Z")
    assert f"contact {reason}" in str(caught.value)
    with pytest.raises(ValidationError, match="contact"):
        Answerer(contact=value, channel="email")


@pytest.mark.parametrize("value", READABLE)
def test_readable_contacts_and_idempotency_keys_are_accepted(value: str) -> None:
    event = {"type": "event", "key": "job-1", "action": "paid", "idempotency_key": value}
    decoded = decode_inbox(orjson.dumps(event), b"job-1")
    assert isinstance(decoded, InboxEvent)
    assert decoded.idempotency_key == value
    start = {"type": "job.start", "key": "job-1", "playbook_key": "p"}
    for contacts in ([value], [{"name": value, "email": "ada@example.com", "phone": 1}]):
        started = decode_inbox(orjson.dumps({**start, "contacts": contacts}))
        assert isinstance(started, JobStart)
        assert started.contacts == contacts
    record, _ = inbound_message("job-1", "m-1", "web", value, "hi", "2026-01-01T00:00:00Z")
    assert record.contact == value


def test_a_contact_may_be_as_long_as_an_email_address() -> None:
    longest = "a" * 64 + "@" + "b" * (MAX_CONTACT_LENGTH - 65)
    assert (
        MessageRecord.model_validate(
            {
                "job_key": "j",
                "message_id": "m",
                "direction": "in",
                "channel": "email",
                "contact": longest,
                "text": "t",
                "at": "2026-01-01T00:00:00Z",
            }
        ).contact
        == longest
    )
    with pytest.raises(JobKeyError, match=f"at most {MAX_CONTACT_LENGTH}"):
        check_label(longest + "c", "contact", MAX_CONTACT_LENGTH)
