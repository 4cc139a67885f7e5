"""The gateway's producer compresses with LEMONGRAPH_KAFKA_COMPRESSION, as the
worker's does: a job start written through the API is stored on the real
broker in a batch of that codec (read back with raw fetches, stream/bench/bytes.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from stream.bench.bytes import topic_bytes
from stream.runtime.kafka import KafkaSecurity
from tests.stream.gateway.conftest import GatewayProcess, Lane


@pytest.mark.parametrize("codec", ["lz4", "none"])
def test_a_job_start_written_by_the_gateway_is_stored_with_the_configured_codec(
    lane: Lane, start_gateway: Callable[..., GatewayProcess], codec: str
) -> None:
    gateway = start_gateway(LEMONGRAPH_KAFKA_COMPRESSION=codec)
    with gateway.client(gateway.token()) as client:
        for i in range(3):
            body = {"key": f"job-{i}", "playbook_key": "onboarding"}
            assert client.post("/v1/jobs", json=body).status_code == 202
    inbox = lane.topics.inbox
    counted = asyncio.run(topic_bytes(lane.bootstrap, [inbox], KafkaSecurity()))[inbox]
    assert counted.records == 3
    assert set(counted.codecs) == {codec}, counted


def test_the_default_codec_is_zstd(
    lane: Lane, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway()
    with gateway.client(gateway.token()) as client:
        body = {"key": "job-1", "playbook_key": "onboarding"}
        assert client.post("/v1/jobs", json=body).status_code == 202
    inbox = lane.topics.inbox
    counted = asyncio.run(topic_bytes(lane.bootstrap, [inbox], KafkaSecurity()))[inbox]
    assert counted.records == 1
    assert set(counted.codecs) == {"zstd"}, counted
