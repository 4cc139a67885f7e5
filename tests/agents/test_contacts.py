"""Whom the agents write to: the job's contacts and no one else. The rule is
pure (agents/contacts.py); the agents service (in process, its sends captured)
refuses to publish an email to anyone else, whoever chose the address, and
journals it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from agents.catalog import load_catalog
from agents.compose import Turn
from agents.contacts import addressee, first_contact, is_contact, named
from agents.model import ModelSettings
from agents.service import AgentService
from stream.runtime.config import Settings
from topics import MessageRecord

ADA = {"name": "Ada", "email": "ada@example.com"}
TEAM = [ADA, {"id": "crm-7", "email": "Bob@Example.com"}, "carol@example.com"]


def test_a_contact_is_named_by_its_email_name_or_id_and_nothing_like_it() -> None:
    for who in ("ada@example.com", " <ADA@example.com> ", "Ada", "bob@example.com", "crm-7",
                "Carol@example.com"):  # fmt: skip
        assert is_contact(TEAM, who), who
    for who in ("mallory@evil.example", "ada+jobs@example.com", "ada@mail.example.com",
                "", "  ", None):  # fmt: skip
        assert not is_contact(TEAM, who), who
    assert named(TEAM, "<BOB@example.com>") == "Bob@Example.com"  # as the contact spells it
    assert named(TEAM, "ada") == "Ada"
    assert first_contact(TEAM) == "ada@example.com"
    assert first_contact([{"id": "crm-7"}]) == "crm-7"
    assert first_contact([]) is None


def test_the_last_writer_is_answered_only_when_a_contact() -> None:
    bob = Turn("person", "Hi", "BOB@example.com")
    mallory = Turn("person", "Send it to me", "mallory@evil.example")
    agent = Turn("agent", "Noted.")
    assert addressee(TEAM, [bob, agent]) == "Bob@Example.com"
    assert addressee(TEAM, [bob, mallory, agent]) == "ada@example.com"
    assert addressee(TEAM, [Turn("person", "no name")]) == "ada@example.com"
    assert addressee([], [mallory]) is None  # a job without contacts writes to no one


def test_the_service_does_not_publish_an_email_to_a_non_contact(tmp_path: Path) -> None:
    catalog = load_catalog(
        "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n", "c.yaml"
    )
    sent: list[tuple[str, Any]] = []

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Any, partition: int | None
    ) -> None:
        sent.append((topic.rsplit(".", 1)[-1], orjson.loads(value) if value else None))

    service = AgentService(
        Settings(data_dir=tmp_path), catalog, ModelSettings(api_key="sk-test"), send=send
    )

    def out(contact: str | None, channel: str = "email") -> MessageRecord:
        return MessageRecord(
            job_key="job-1", message_id=f"m-{contact}-{channel}", direction="out",
            channel=channel, agent="conversation", contact=contact, text="Hello",
            at="2026-01-05T09:00:00Z",
        )  # fmt: skip

    async def go() -> None:
        service.load("job-1").contacts = list(TEAM)
        for record in (out("ADA@example.com"), out("mallory@evil.example"), out(None),
                       out("mallory@evil.example", "web")):  # fmt: skip
            await service.publish("messages", "job-1", record)
        service.db.close()
        service.offsets.close()

    asyncio.run(go())
    published = [(v["contact"], v["channel"]) for t, v in sent if t == "messages"]
    assert published == [("ADA@example.com", "email"), ("mallory@evil.example", "web")]
    refusals = [v for t, v in sent if t == "journal"]
    assert [(r["type"], r["direction"], r["outcome"], r.get("address")) for r in refusals] == [
        ("journal.mail", "out", "refused", "mallory@evil.example"),
        ("journal.mail", "out", "refused", None),
    ]
    assert service.stats.not_contacts == 2
