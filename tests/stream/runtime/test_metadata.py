"""Metadata for the topics asked about (stream/runtime/kafka.py,
``topics_metadata`` and ``cluster_id_of``): the partitions of the topics that
exist, nothing for one that does not, and asking never creates it; the cluster
id is the one ``describe_cluster`` reports, without every topic's metadata."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stream.runtime.kafka import bootstrap_of, cluster_id_of, new_consumer, topics_metadata

pytestmark = [pytest.mark.broker]


async def _asked(bootstrap: str, here: str, missing: str) -> tuple[dict[str, list[int]], str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    consumer = new_consumer(bootstrap)
    await consumer.start()
    try:
        await admin.create_topics([NewTopic(here, 3, 1)])
        found = await topics_metadata(consumer._client, [here, missing])
        probe = await cluster_id_of(admin._client)
        described = str((await admin.describe_cluster())["cluster_id"])
        assert missing not in await admin.list_topics()  # asking created nothing
        await admin.delete_topics([here])
        return found, probe, described
    finally:
        await consumer.stop()
        await admin.close()


def test_only_existing_topics_are_answered_none_created_and_the_cluster_id_matches(
    kafka_url: str,
) -> None:
    name = f"meta-{uuid.uuid4().hex[:8]}"
    found, probe, described = asyncio.run(
        _asked(bootstrap_of(kafka_url), f"{name}.here", f"{name}.missing")
    )
    assert found == {f"{name}.here": [0, 1, 2]}
    assert probe
    assert probe == described
