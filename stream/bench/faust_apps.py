"""The two Faust baselines the engine is compared with, as worker processes:

* ``noop`` — an agent that does nothing per event (the framework's ceiling);
* ``naive`` — an agent that writes a RocksDB table and sends one record per event.

Run: ``python -m stream.bench.faust_apps MODE BROKER_URL TOPIC DATADIR EXPECT``.
It prints ``BENCH first <t>`` at the first event and ``BENCH done <n> <t>`` once
``EXPECT`` events were seen (wall-clock seconds), then keeps running until killed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import faust

from stream.runtime.kafka import GroupTimeouts, configured_security


def build(mode: str, broker: str, topic: str, datadir: str, expect: int, partitions: int) -> Any:
    # The group timeouts of the engine's worker (LEMONGRAPH_SESSION_TIMEOUT_MS): the
    # embedded broker holds a first join for half the session (docs/operations.md,
    # "How long a start takes"); the figures are timed from the first event on.
    timeouts = GroupTimeouts.from_env()
    app = faust.App(
        f"{topic}-{mode}",
        broker=broker,
        broker_credentials=configured_security().faust_credentials(),
        datadir=datadir,
        store="rocksdb://",
        web_enabled=False,
        topic_partitions=partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        broker_rebalance_timeout=timeouts.rebalance_ms / 1000,
        broker_session_timeout=timeouts.session_ms / 1000,
        broker_heartbeat_interval=timeouts.heartbeat_ms / 1000,
        recovery_consistency_check=False,
        key_serializer="raw",
        value_serializer="raw",
    )
    source = app.topic(topic, key_type=bytes, value_type=bytes)
    out = app.topic(f"{topic}-{mode}-out", partitions=partitions, key_type=bytes, value_type=bytes)
    table = app.Table("counts", default=int, partitions=partitions, key_type=bytes, value_type=int)
    seen = [0]

    def count() -> None:
        if seen[0] == 0:
            print(f"BENCH first {time.time():.6f}", flush=True)
        seen[0] += 1
        if seen[0] == expect:
            print(f"BENCH done {seen[0]} {time.time():.6f}", flush=True)

    @app.agent(source)
    async def consume(stream: Any) -> None:
        async for event in stream.events():
            if mode == "naive":
                table[event.key] += 1
                await out.send(key=event.key, value=event.value)
            count()

    return app


def main() -> None:
    mode, broker, topic, datadir, expect, partitions = sys.argv[1:7]
    app = build(mode, broker, topic, datadir, int(expect), int(partitions))
    worker = faust.Worker(app, loglevel="error", quiet=True, redirect_stdouts=False)
    worker.spinner = None
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()


if __name__ == "__main__":
    main()
