"""A group member leaves its group when it stops, in the group's first generation
too: the embedded broker numbers generations from 0, where aiokafka would not leave
(docs/operations.md, "How a worker stops")."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.consumer.group_coordinator import GroupCoordinator

from stream.runtime.faust_tuning import common_settings
from stream.runtime.kafka import bootstrap_of, new_consumer

pytestmark = [pytest.mark.broker]


async def _members(admin: AIOKafkaAdminClient, group: str) -> tuple[str, int]:
    (described,) = await admin.describe_consumer_groups([group])
    (found,) = described.groups
    return found[2], len(found[5])  # state, members


async def _first_member_stops(bootstrap: str, topic: str, group: str) -> list[Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
        member = new_consumer(bootstrap, topics=(topic,), group=group)
        await member.start()
        try:
            while not member.assignment():
                await asyncio.sleep(0.02)
            generation = member._coordinator.generation  # type: ignore[attr-defined]
            during = await _members(admin, group)
        finally:
            await member.stop()
        after = await _members(admin, group)
        await admin.delete_topics([topic])
        return [generation, during, after]
    finally:
        await admin.close()


def test_the_first_member_of_a_group_leaves_it_when_it_stops(kafka_url: str) -> None:
    name = f"leave-{uuid.uuid4().hex[:8]}"
    generation, during, after = asyncio.run(
        _first_member_stops(bootstrap_of(kafka_url), name, name)
    )
    if generation != 0:
        pytest.skip(f"this broker numbers generations from 1 (got {generation}): aiokafka leaves")
    assert during == ("Stable", 1)
    # Gone at once, not when its session runs out (2 s in the suite).
    assert after == ("Empty", 0), (generation, after)


def test_faust_apps_leave_their_groups_the_same_way(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    patched = GroupCoordinator._maybe_leave_group
    if getattr(patched, "of_generation_zero", False):  # applied earlier in this process
        monkeypatch.setattr(GroupCoordinator, "_maybe_leave_group", patched.aiokafkas)
    assert not getattr(GroupCoordinator._maybe_leave_group, "of_generation_zero", False)
    common_settings("kafka://127.0.0.1:9", tmp_path, 4, tansu=True)
    assert getattr(GroupCoordinator._maybe_leave_group, "of_generation_zero", False)
