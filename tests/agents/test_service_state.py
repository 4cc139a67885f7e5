"""The agents service's state across processes, on a real broker: a partition
assigned reads back what another process wrote to the ``conversations``
changelog, from where this store last read it; a revoked one stops its runs."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from agents.catalog import load_catalog
from agents.model import ModelSettings
from agents.service import AgentService
from stream.engine.worker import ensure_all_topics
from stream.runtime.config import Settings
from stream.runtime.kafka import bootstrap_of, producer, read_topic
from topics import Headers, TaskOpenedRecord, Topics

CATALOG = load_catalog(
    "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n", "c.yaml"
)


def opened(key: str, milestone: str) -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=f"{key}/{milestone}", job_key=key, milestone=milestone,
        at="2026-01-05T09:00:00Z", instructions="Do it.", playbook_instructions="",
        integrations=["email"], deadline="2026-01-08T09:00:00Z", frontier=[milestone],
        playbook_key="p",
    )  # fmt: skip


class Process:
    """An AgentService as one process would hold it: its own data folder, the
    real broker for its changelog."""

    def __init__(self, settings: Settings, folder: Path, client: Any) -> None:
        here = Settings(**{**settings.__dict__, "data_dir": folder})
        self.service = AgentService(here, CATALOG, ModelSettings(api_key="sk-test"))

        async def send(
            topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
            partition: int | None,
        ) -> None:  # fmt: skip
            await (await client.send(topic, value, key=key, partition=partition, headers=headers))

        self.service.send = send


def test_an_assigned_partition_reads_back_what_another_process_wrote(
    kafka_url: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_url=kafka_url, topic_prefix=f"t{uuid.uuid4().hex[:8]}.")
    asyncio.run(ensure_all_topics(settings))

    async def go() -> None:
        async with producer(bootstrap_of(kafka_url)) as client:
            one = Process(settings, tmp_path / "one", client).service
            two = Process(settings, tmp_path / "two", client).service
            # The first process owns partition 2 and holds job k's conversation.
            assert await one.assign([2]) == (0, 0)
            conv = one.load("k")
            conv.partition = 2
            conv.apply(opened("k", "first"))
            conv.ran = conv.inputs  # its run is done: nothing owed
            await one.save(conv)
            # The partition moves to the second process: it reads the job back.
            await one.revoke([2])
            assert "k" not in one.live
            read, resumed = await two.assign([2])
            assert (read, resumed) == (1, 0)
            assert [t.milestone for t in two.load("k").open_tasks()] == ["first"]
            # The second advances it; a task opened owes a run (none can start
            # here without a model, so take the run task off before it runs).
            moved = two.load("k")
            moved.apply(opened("k", "second"))
            await two.save(moved)
            await two.revoke([2])
            # Back to the first: it reads only what it has not read (one record),
            # and resumes the run that is owed.
            read, resumed = await one.assign([2])
            assert (read, resumed) == (1, 1)
            await one.revoke([2])  # stops that run (there is no model here)
            back = one.load("k")
            assert sorted(t.milestone for t in back.open_tasks()) == ["first", "second"]
            assert back.due
            # everything on the changelog is on partition 2
            name = Topics(settings.topic_prefix).conversations
            records = [r async for r in read_topic(bootstrap_of(kafka_url), name)]
            assert {r.partition for r in records} == {2}
            for s in (one, two):
                s.db.close()
                s.offsets.close()

    asyncio.run(go())
