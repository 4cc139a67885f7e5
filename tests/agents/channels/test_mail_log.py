"""The sent-log as a process holds it: the latest entry of each key, a tombstone
forgets one, and the short tokens of every outbound entry resolve."""

from __future__ import annotations

import asyncio

from agents.channels.mail_log import MailLog
from stream.runtime.config import Settings
from topics.mail import MailLogEntry, MailSettings
from topics.replies import ReplyRoute, short_token

MAIL = MailSettings(smtp=None, mail_from="a@x", reply_domain="x", reply_secret="secret")


def test_the_log_keeps_the_latest_entry_and_resolves_its_tokens() -> None:
    written: list[tuple[str, str, bytes]] = []

    async def produce(topic: str, key: str, value: bytes) -> None:
        written.append((topic, key, value))

    log = MailLog(Settings(topic_prefix="p."), MAIL, produce)

    async def go() -> None:
        for state in ("attempt", "sent"):
            entry = MailLogEntry(
                state=state, job_key="job-1", message_id="job-1#1.1", at="2026-12-01T10:00:00Z",
                contact="ada@example.com", written_at="2026-12-01T10:00:00Z",
            )  # fmt: skip
            await log.write("out:job-1#1.1", entry)
        await log.catch_up()  # never started: nothing to read, what it wrote is known

    asyncio.run(go())
    assert [(t, k) for t, k, _ in written] == [("p.mail-log", "out:job-1#1.1")] * 2
    entry = log.get("out:job-1#1.1")
    assert entry is not None
    assert entry.state == "sent"
    route = log.tokens[short_token("secret", "job-1#1.1")]
    assert route == ReplyRoute("job-1", "ada@example.com", 1_796_119_200 + MAIL.reply_ttl)
    assert log.tokens[short_token("secret", "job-1#1.1", "bounce")].kind == "bounce"
    log._apply("out:job-1#1.1", None)  # a tombstone
    assert log.get("out:job-1#1.1") is None
    log._apply("in:x", b"not json")  # not an entry of ours: passed over
    assert log.get("in:x") is None
