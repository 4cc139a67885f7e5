"""LEMONGRAPH_KAFKA_COMPRESSION: the setting, and each codec against the real
broker through the engine's produce path (stream/runtime/produce.py) and the
``producer`` helper: the records come back as they were given, and the broker
holds the batches compressed (read with raw fetches, stream/bench/bytes.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from stream.bench.bytes import topic_bytes
from stream.runtime.broker import ensure_topics
from stream.runtime.config import ConfigError, Settings
from stream.runtime.faust_tuning import common_settings
from stream.runtime.kafka import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    KafkaSecurity,
    bootstrap_of,
    client_kwargs,
    compression_type,
    producer,
    read_topic,
)
from stream.runtime.produce import Produced, produce_batches

NO_DOTENV = Path("/nonexistent/.env")


def test_the_default_is_zstd_and_every_codec_is_accepted() -> None:
    assert Settings.from_env({}, NO_DOTENV).kafka_compression == DEFAULT_COMPRESSION == "zstd"
    assert Settings().kafka_compression == DEFAULT_COMPRESSION
    for name in COMPRESSIONS:
        env = {"LEMONGRAPH_KAFKA_COMPRESSION": f" {name.upper()} "}
        assert Settings.from_env(env, NO_DOTENV).kafka_compression == name
    assert compression_type("none") is None
    assert compression_type("lz4") == "lz4"


@pytest.mark.parametrize("value", ["zstandard", "brotli", "1", "lz4,zstd"])
def test_another_value_is_a_config_error_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match="LEMONGRAPH_KAFKA_COMPRESSION"):
        Settings.from_env({"LEMONGRAPH_KAFKA_COMPRESSION": value}, NO_DOTENV)


def test_the_faust_apps_and_the_producer_helper_take_the_environment_s_codec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEMONGRAPH_KAFKA_COMPRESSION", "lz4")
    settings = common_settings(None, Path("x"), 1, True, KafkaSecurity())
    assert settings["producer_compression_type"] == "lz4"
    given = common_settings(None, Path("x"), 1, True, KafkaSecurity(), "none")
    assert given["producer_compression_type"] is None
    monkeypatch.setenv("LEMONGRAPH_KAFKA_COMPRESSION", "snappy-ish")
    with pytest.raises(ConfigError, match="LEMONGRAPH_KAFKA_COMPRESSION"):
        common_settings(None, Path("x"), 1, True, KafkaSecurity())


def _records(topic: str) -> list[Produced]:
    """Decision-like JSON: what the engine produces, repetitive between records."""
    out: list[Produced] = []
    for i in range(600):
        key = f"job-{i % 50:06d}"
        value = orjson.dumps(
            {
                "type": "decision",
                "job_key": key,
                "playbook": "onboarding",
                "seq": i,
                "effects": [{"kind": "open_task", "milestone": "verify_id", "n": i}],
            }
        )
        out.append((topic, i % 2, key.encode(), value, None, [("trace", b"t%d" % i)]))
    return out


@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy"])
def test_each_codec_round_trips_on_the_broker_and_is_stored_compressed(
    kafka_url: str, codec: str
) -> None:
    bootstrap = bootstrap_of(kafka_url)
    security = KafkaSecurity()
    batched = f"codec-{codec}-{uuid.uuid4().hex[:8]}"
    sent = f"{batched}-send"
    plain = f"{batched}-plain"
    records = _records(batched)

    async def go() -> None:
        await ensure_topics(bootstrap, {batched: 2, sent: 2, plain: 2}, security=security)
        for topic, name in ((batched, codec), (plain, "none")):
            # The engine's path: record batches from the producer's own builder.
            client = AIOKafkaProducer(
                **client_kwargs(bootstrap, security), compression_type=compression_type(name)
            )
            await client.start()
            try:
                await produce_batches(client, [(topic, *r[1:]) for r in records])
            finally:
                await client.stop()
        # The helper the CLI and the bench produce with.
        async with producer(bootstrap, security=security, compression=codec) as client:
            futures = [await client.send(sent, r[3], key=r[2], partition=r[1]) for r in records]
            await asyncio.gather(*futures)

    asyncio.run(go())

    async def read(topic: str) -> list[tuple[int, bytes | None, bytes | None, tuple[object, ...]]]:
        return [
            (r.partition, r.key, r.value, r.headers)
            async for r in read_topic(bootstrap, topic, idle=0.3, security=security)
        ]

    want = sorted((p, k, v, tuple(h or ())) for _t, p, k, v, _ts, h in records)
    assert sorted(asyncio.run(read(batched))) == want
    assert sorted((p, k, v) for p, k, v, _h in asyncio.run(read(sent))) == sorted(
        (p, k, v) for p, k, v, _h in want
    )
    counted = asyncio.run(topic_bytes(bootstrap, [batched, sent, plain], security))
    for topic in (batched, sent):
        assert counted[topic].records == len(records)
        assert set(counted[topic].codecs) == {codec}, counted[topic]
    assert set(counted[plain].codecs) == {"none"}
    assert counted[batched].produced == counted[plain].produced
    # Key, value, and the header's name ("trace") and value.
    produced = sum(len(r[2] or b"") + len(r[3] or b"") + 5 + len(r[5][0][1]) for r in records)
    assert counted[plain].produced == produced
    # Uncompressed, the batches hold the records plus their framing; compressed,
    # far less (the records repeat their job key, playbook and field names).
    assert counted[plain].stored > produced
    assert counted[batched].stored < 0.5 * counted[plain].stored, counted
