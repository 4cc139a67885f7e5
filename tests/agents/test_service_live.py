"""The agents service holds a bounded number of conversations in memory
(``AgentService.live``, ``LEMONGRAPH_AGENT_LIVE``): the least recently used
beyond it are dropped, never one whose run is in flight or whose record is
being taken, and a dropped one is read back from the store as it was."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agents.catalog import load_catalog
from agents.model import ModelSettings
from agents.run import Conversation
from agents.service import AgentService
from stream.runtime.config import Settings
from topics import Headers, TaskOpenedRecord

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
