"""A standalone ticker: one tick per partition of ``ticks`` every interval.

Workers carry a leader-only ticker of their own; this process is for
deployments that run workers with ``--no-ticker`` and one ticker beside them.
Two tickers do no harm (a tick fires only what is due), they only add traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from datetime import UTC, datetime

from compiler import to_iso
from stream.runtime.config import Settings
from stream.runtime.errors import TopicError
from stream.runtime.kafka import bootstrap_of, producer, topic_partitions
from topics import TickRecord, Topics, encode

__all__ = ["run_ticker"]


async def run_ticker(
    settings: Settings, say: Callable[[str], None] = print, stop: asyncio.Event | None = None
) -> int:
    """Tick until SIGINT/SIGTERM (or ``stop``); returns the number of ticks sent."""
    assert settings.kafka_url is not None
    bootstrap = bootstrap_of(settings.kafka_url)
    topic = Topics(settings.topic_prefix).ticks
    partitions = await topic_partitions(bootstrap, topic)
    if not partitions:
        raise TopicError(f"topic {topic} does not exist: start a worker first (it creates it)")
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    say(f"ticker: {len(partitions)} partitions of {topic}, every {settings.tick_interval:g}s")
    sent = 0
    async with producer(bootstrap) as client:
        while not stop.is_set():
            at = to_iso(datetime.now(UTC))
            for partition in partitions:
                record = TickRecord(partition=partition, at=at)
                await client.send(topic, encode(record), key=b"tick", partition=partition)
                sent += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.tick_interval)
    say(f"ticker: stopped after {sent} ticks")
    return sent
