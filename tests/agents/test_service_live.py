"""The agents service in one process, its producer recorded: it holds a
bounded number of conversations in memory (``AgentService.live``,
``LEMONGRAPH_AGENT_LIVE``), and a closing turn waits for the records of the
decision it follows (the stand-in model over HTTP answers its runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.model import ModelSettings
from agents.run import Conversation
from agents.service import AgentService, Where
from stream.runtime.config import Settings
from topics import Headers, MessageRecord, TaskClosedRecord, TaskOpenedRecord

CATALOG = load_catalog(
    "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n", "c.yaml"
)


def opened(key: str) -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=f"{key}/first", job_key=key, milestone="first", at="2026-01-05T09:00:00Z",
        instructions="Do it.", playbook_instructions="", integrations=["email"],
        deadline="2026-01-08T09:00:00Z", frontier=["first"], playbook_key="p",
    )  # fmt: skip


def test_live_conversations_stay_bounded_and_come_back_intact(tmp_path: Path) -> None:
    service = AgentService(
        Settings(data_dir=tmp_path), CATALOG, ModelSettings(api_key="sk-test"), live=3
    )
    changelog: list[tuple[str, bytes | None]] = []

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        changelog.append((topic, key))

    service.send = send

    async def go() -> None:
        # job-0's run is in flight (a task that has not ended): never dropped
        busy = asyncio.get_running_loop().create_future()
        service.running["job-0"] = asyncio.ensure_future(busy)
        kept = {}
        for n in range(10):
            conv = service.load(f"job-{n}")
            conv.apply(opened(f"job-{n}"))
            conv.ran = conv.inputs
            await service.save(conv)
            kept[conv.job_key] = conv.to_json()
            assert len(service.live) <= 3
        assert "job-0" in service.live
        assert list(service.live) == ["job-0", "job-8", "job-9"]
        # a dropped conversation is read back from the store, as it was saved
        again = service.load("job-3")
        assert again.to_json() == kept["job-3"]
        assert again == Conversation.from_json(kept["job-3"])
        assert list(service.live) == ["job-0", "job-9", "job-3"]
        busy.set_result(None)
        await service.running.pop("job-0")
        service.load("job-4")
        assert "job-0" not in service.live  # its run over: dropped like any other

    try:
        asyncio.run(go())
    finally:
        service.db.close()
        service.offsets.close()
    assert len(changelog) == 10  # every change went to the changelog first


def closed(key: str, milestone: str) -> TaskClosedRecord:
    return TaskClosedRecord(
        task_id=f"{key}/{milestone}", job_key=key, milestone=milestone,
        at="2026-01-05T10:00:00Z", outcome="done",
    )  # fmt: skip


def inbound(key: str, message_id: str, text: str) -> MessageRecord:
    return MessageRecord(
        job_key=key, message_id=message_id, direction="in", channel="web",
        contact="ada@example.com", text=text, at="2026-01-05T09:05:00Z",
    )  # fmt: skip


def test_a_closing_turn_waits_for_the_decisions_records_and_yields_to_a_task_it_opens(
    tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    script = StandinScript.model_validate(
        {"rules": [{"when": {"closing": True}, "say": "All done."},
                   {"when": {"last_message_contains": "thanks"}, "say": "You are welcome."},
                   {"say": "Hello."}]}
    )  # fmt: skip
    model = ModelSettings(api_key="sk-test", base_url=f"{serve(build_standin(script))}/v1")
    service = AgentService(Settings(data_dir=tmp_path), CATALOG, model)
    said: list[str] = []

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        record = orjson.loads(value or b"{}")
        if record.get("type") == "message":
            said.append(record["text"])

    service.send = send
    tasks, messages = service.topics.tasks, service.topics.messages

    async def take(record: BaseModel, topic: str, behind: bool = False) -> None:
        """A record of partition 0 as the stream takes it (``behind``: more of
        the partition were fetched)."""
        service.reading(0, True)
        where = Where(topic, 0, 0, 0, b"job-1", [])
        await service.on_record(record.model_dump_json(by_alias=True).encode(), where)
        service.reading(0, behind)

    async def runs_over() -> None:
        await asyncio.gather(*service.running.values())

    async def go() -> None:
        service.partitions[0] = asyncio.Event()
        service.partitions[0].set()
        await take(opened("job-1"), tasks)
        await runs_over()
        assert said == ["Hello."]
        # One decision closes "first" and opens "second"; Ada writes in between.
        await take(closed("job-1", "first"), tasks, behind=True)
        await take(inbound("job-1", "m-1", "thanks"), messages, behind=True)
        assert service.load("job-1").closing  # owed, waiting for the decision's records
        for _ in range(50):  # let the run that owes it go as far as it can (no time passes)
            await asyncio.sleep(0)
        second = opened("job-1").model_copy(
            update={"task_id": "job-1/second", "milestone": "second", "frontier": ["second"]}
        )
        await take(second, tasks)
        await runs_over()
        # the new frontier's turn answered her; no closing while a task is open
        assert said == ["Hello.", "You are welcome."]
        # the job's last task closes; Ada writes again: the closing turn answers
        await take(closed("job-1", "second"), tasks)
        await take(inbound("job-1", "m-2", "thanks again"), messages)
        await runs_over()
        assert said == ["Hello.", "You are welcome.", "All done."]
        assert not service.load("job-1").closing

    async def walk() -> None:
        try:
            await go()
        finally:
            await service.close()

    asyncio.run(walk())
