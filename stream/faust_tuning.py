"""Settings Faust does not expose.

Faust creates its worker consumer with ``fetch_max_wait_ms=1500`` written into
the code. Apache Kafka answers a fetch as soon as one byte is there, so the
value only bounds idle polls; the embedded Tansu broker holds every fetch for
the whole wait, which put ~0.4 s of latency on each batch (measured: a record's
delivery took a median 363 ms with 1500 ms, 4 ms with 50 ms). This module lowers
the wait for the consumers Faust creates in this process. With
``stream/table.py`` and ``stream/fetch.py`` it is one of the three places that
reach into Faust's internals; tests/stream/test_stream_faust.py pins them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from .kafka import KafkaSecurity, compression_type, configured_security

__all__ = ["FETCH_MAX_WAIT_MS", "FETCH_MAX_WAIT_MS_TANSU", "common_settings", "set_fetch_max_wait"]

#: How long a fetch may wait for data (see the module docstring): Apache Kafka
#: answers as soon as data is there; Tansu waits out the whole wait.
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_WAIT_MS_TANSU = 20


def common_settings(
    kafka_url: str | None,
    datadir: Path,
    partitions: int,
    tansu: bool,
    security: KafkaSecurity | None = None,
    compression: str | None = None,
) -> dict[str, Any]:
    """Faust settings every lemongraph app uses, on Apache Kafka and on the
    embedded broker alike (the engine adds its batch settings to these);
    ``security``, and ``compression`` (a codec of ``stream.kafka.COMPRESSIONS``):
    the environment's when None."""
    chosen = security if security is not None else configured_security()
    options: dict[str, Any] = {
        "broker": kafka_url,
        "broker_credentials": chosen.faust_credentials(),
        "datadir": str(datadir),
        "web_enabled": False,
        "topic_partitions": partitions,
        "topic_replication_factor": 1,
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": 1.0,
        "key_serializer": "raw",
        "value_serializer": "raw",
        # Kafka's own batch compression, for everything the app produces: its
        # sends, its changelogs, and the engine's record batches (stream/produce.py
        # builds them with this producer's codec). docs/kafka.md, "Compression".
        "producer_compression_type": compression_type(compression),
        # Rejoining a group waits about the rebalance timeout; Faust's defaults
        # (tens of seconds) make every start slow.
        "broker_rebalance_timeout": 3.0,
        "broker_session_timeout": 6.0,
        "broker_heartbeat_interval": 1.0,
    }
    if tansu:
        # Tansu reports the end offset of a partition as the base offset of its
        # last batch + 1, which trips Faust's recovery consistency check.
        options["recovery_consistency_check"] = False
    return options


_ORIGINAL = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer


def set_fetch_max_wait(milliseconds: int) -> None:
    """Make Faust's worker consumers (created from now on) wait at most this long
    for a fetch to fill."""

    def create(self: Any, transport: Any) -> Any:
        consumer = _ORIGINAL(self, transport)
        consumer._fetch_max_wait_ms = milliseconds  # read when the consumer starts
        return consumer

    faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]
