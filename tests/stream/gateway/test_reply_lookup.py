"""The webhook's memory of ``messages`` (stream/gateway/readmodels/reply_lookup.py), without
Kafka: the short tokens of outbound email, bounded by expiry and by count, and the
ids of the person's messages."""

from __future__ import annotations

from datetime import UTC, datetime

from stream.gateway.readmodels.reply_lookup import ReceivedIds, ReplyTokens
from topics import MessageRecord
from topics.mail import MailSettings, message_tokens

SETTINGS = MailSettings.from_env({
    "REPLY_TOKEN_SECRET": "reply-secret", "REPLY_DOMAIN": "reply.test",
    "LEMONGRAPH_REPLY_TTL_DAYS": "1",
})  # fmt: skip
DAY = 24 * 3600
T0 = int(datetime(2026, 1, 5, 8, tzinfo=UTC).timestamp())


def email(n: int, at: str = "2026-01-05T08:00:00Z", **fields: str) -> MessageRecord:
    values = {
        "job_key": f"j-{n}", "message_id": f"j-{n}#out", "direction": "out",
        "channel": "email", "contact": "ada@example.com", "text": "Hi", "at": at, **fields,
    }  # fmt: skip
    return MessageRecord.model_validate(values)


def test_an_outbound_emails_tokens_name_its_job_until_they_expire() -> None:
    now = [T0]
    tokens = ReplyTokens(SETTINGS, clock=lambda: now[0])
    tokens.read(email(1))
    tokens.read(email(2, direction="in"))  # a person's message carries no token
    tokens.read(email(3, channel="chat"))
    assert len(tokens) == 2
    routes = message_tokens(SETTINGS, email(1))
    for token, route in routes.items():
        assert tokens.get(token) == route
        assert route.job_key == "j-1"
    now[0] = T0 + DAY + 1
    assert [tokens.get(token) for token in routes] == [None, None]
    assert len(tokens) == 0
    tokens.read(email(4))  # read after it expired: never kept
    assert len(tokens) == 0


def test_past_its_bound_the_oldest_tokens_and_ids_go() -> None:
    tokens = ReplyTokens(SETTINGS, kept=4, clock=lambda: T0)
    for n in range(3):
        tokens.read(email(n))
    assert len(tokens) == 4
    assert all(tokens.get(t) is None for t in message_tokens(SETTINGS, email(0)))
    assert all(tokens.get(t) is not None for t in message_tokens(SETTINGS, email(2)))
    # an older message read after a newer one does not keep an expired one alive
    late = ReplyTokens(SETTINGS, clock=lambda: T0 + DAY - 10)
    late.read(email(5, at="2026-01-05T07:00:00Z"))  # expired an hour ago
    late.read(email(6))
    assert len(late) == 2
    ids = ReceivedIds(kept=2)
    for n in range(3):
        ids.read(email(n, direction="in"))
    ids.read(email(9))  # ours, outbound: not a received id
    assert [("j-0", "j-0#out") in ids, ("j-2", "j-2#out") in ids] == [False, True]
    assert ("j-9", "j-9#out") not in ids
