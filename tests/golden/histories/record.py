"""Records the golden decision histories in this folder, with the real engine
(``stream.engine.engine.Engine``) over a dict standing in for the RocksDB table,
committed as a worker commits (outputs, then state, then ``committed``).

    .venv/bin/python -m tests.golden.histories.record      # rewrite the files

Each history is the ``decisions`` topic of one run, one JSON record a line, in
the order a worker would have produced them. ``tests/stream/engine/test_golden_histories.py``
replays each through ``stream/cli/replay.py`` without a broker and requires every
state hash and effect to match; it also re-records each and requires the same
bytes, so a change to the core or the engine that alters a decision fails there
first. Rewrite them only for a change that is meant to alter decisions, and say
so in the commit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from stream.bench.workload import onboarding_mix
from stream.engine.engine import Engine, Record
from stream.engine.registry import Registry
from stream.runtime.files import load_playbook_file, playbook_files
from stream.runtime.partitions import home_partition
from topics import InboxEvent, JobStart, Topics

HERE = Path(__file__).resolve().parent
PLAYBOOKS = HERE.parents[2] / "examples"
TOPICS = Topics("golden.")
PARTITIONS = 4
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
#: The worker's clock: after every record, so no decision is bounded by it.
WALL_MS = int((T0 + timedelta(days=400)).timestamp() * 1000)


def registry() -> Registry:
    """The bundled playbooks."""
    return Registry(load_playbook_file(path) for path in playbook_files(PLAYBOOKS))


class Run:
    """An engine and its table; ``feed`` decides records in batches."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, int], bytes] = {}
        self.engine = Engine(
            TOPICS,
            registry(),
            lambda key, partition: self.store.get((key, partition)),
            partitions=PARTITIONS,
            wall_ms=lambda: WALL_MS,
            scan=self.scan,
        )
        self.offsets: dict[tuple[str, int], int] = {}
        self.decisions: list[bytes] = []

    def scan(self, partition: int, low: str, high: str) -> list[tuple[str, bytes]]:
        """The due-time index's rows, as the table reads them (stream/engine/timers.py)."""
        return sorted(
            (k, raw) for (k, p), raw in self.store.items() if p == partition and low <= k < high
        )

    def record(self, topic: str, partition: int, key: bytes, value: bytes, at: datetime) -> Record:
        where = (topic, partition)
        offset = self.offsets.get(where, 0)
        self.offsets[where] = offset + 1
        return Record(topic, partition, offset, key, value, int(at.timestamp() * 1000))

    def inbox(self, message: dict[str, Any] | JobStart | InboxEvent, at: datetime) -> Record:
        if not isinstance(message, dict):
            message = message.compact()
        key = message["key"].encode()
        return self.record(
            TOPICS.inbox, home_partition(key, PARTITIONS), key, orjson.dumps(message), at
        )

    def ticks(self, at: datetime) -> list[Record]:
        """One tick per partition at ``at``."""
        return [
            self.record(
                TOPICS.ticks,
                p,
                b"tick",
                orjson.dumps(
                    {"type": "tick", "partition": p, "at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
                ),
                at,
            )
            for p in range(PARTITIONS)
        ]

    def feed(self, records: list[Record], *, crash: bool = False) -> None:
        """Decide ``records``; with ``crash``, the outputs reach the log but the
        state is never written (a worker killed between the two)."""
        batch = self.engine.process(records)
        self.decisions.extend(
            o.value for o in batch.outputs if o.topic == TOPICS.decisions and o.value
        )
        if crash:
            self.engine.assigned()  # a new process: nothing of the lost batch in memory
            return
        for key, partition, raw in batch.writes():
            if raw is None:
                self.store.pop((key, partition), None)
            else:
                self.store[(key, partition)] = raw
        self.engine.committed(batch)


def _timed(
    messages: Iterable[JobStart | InboxEvent], step: timedelta
) -> list[tuple[JobStart | InboxEvent, datetime]]:
    return [(m, T0 + i * step) for i, m in enumerate(messages)]


def onboarding() -> list[bytes]:
    """40 onboarding jobs of the benchmark's mix, then ticks across 8 days, so
    every window closes."""
    run = Run()
    timed = _timed(onboarding_mix(40, seed=11, prefix="h"), timedelta(minutes=7))
    for start in range(0, len(timed), 25):
        run.feed([run.inbox(m, at) for m, at in timed[start : start + 25]])
    for hours in range(0, 8 * 24 + 1, 6):
        run.feed(run.ticks(T0 + timedelta(hours=hours)))
    return run.decisions


def crash_and_recover() -> list[bytes]:
    """A batch decided and produced, the worker killed before the state write,
    the same records decided again: byte-identical re-emissions in the log."""
    run = Run()
    messages = [
        {"type": "job.start", "key": "c-1", "playbook_key": "onboarding"},
        {"type": "job.start", "key": "c-2", "playbook_key": "payment-reminders"},
    ]
    run.feed([run.inbox(m, T0) for m in messages])
    later = [
        {"type": "event", "key": "c-1", "action": "id_uploaded", "idempotency_key": "u-1"},
        {"type": "event", "key": "c-2", "action": "reminder_sent"},
    ]
    batch = [run.inbox(m, T0 + timedelta(hours=1)) for m in later]
    run.feed(batch, crash=True)
    run.feed(batch)  # re-delivered to the restarted worker
    run.feed(run.ticks(T0 + timedelta(days=9)))
    return run.decisions


def refusals() -> list[bytes]:
    """What the core refuses, and events it applies once: an event for an
    unknown job, a second start, an unknown playbook, a retried idempotency
    key, an agent's claim."""
    run = Run()
    at = T0
    messages = [
        {"type": "event", "key": "r-1", "action": "id_uploaded"},  # before its start
        {"type": "job.start", "key": "r-1", "playbook_key": "onboarding"},
        {"type": "job.start", "key": "r-1", "playbook_key": "onboarding"},
        {"type": "job.start", "key": "r-2", "playbook_key": "no-such-playbook"},
        {"type": "event", "key": "r-1", "action": "id_uploaded", "idempotency_key": "k"},
        {"type": "event", "key": "r-1", "action": "id_uploaded", "idempotency_key": "k"},
        {"type": "event", "key": "r-1", "action": "account_activated", "source": "agent"},
    ]
    for message in messages:
        at += timedelta(minutes=5)
        run.feed([run.inbox(message, at)])
    return run.decisions


HISTORIES: dict[str, Callable[[], list[bytes]]] = {
    "onboarding.jsonl": onboarding,
    "crash-and-recover.jsonl": crash_and_recover,
    "refusals.jsonl": refusals,
}


def encode(decisions: list[bytes]) -> bytes:
    """A history file's bytes."""
    return b"".join(d + b"\n" for d in decisions)


def main() -> int:
    for name, make in HISTORIES.items():
        data = encode(make())
        (HERE / name).write_bytes(data)
        lines = data.count(b"\n")
        print(f"{name}: {lines} decisions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
