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

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

__all__ = ["set_fetch_max_wait"]

_ORIGINAL = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer


def set_fetch_max_wait(milliseconds: int) -> None:
    """Make Faust's worker consumers (created from now on) wait at most this long
    for a fetch to fill."""

    def create(self: Any, transport: Any) -> Any:
        consumer = _ORIGINAL(self, transport)
        consumer._fetch_max_wait_ms = milliseconds  # read when the consumer starts
        return consumer

    faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]
