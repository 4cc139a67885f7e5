"""The engine without a broker, for unit tests: a dict stands in for the
RocksDB table, and :class:`Harness` commits each batch the way the Faust layer
does (stream/engine/app.py): it keeps the outputs, writes ``Batch.writes()`` into the
dict, then calls ``engine.committed(batch)``. Helpers read the outputs back
through the topics models."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from compiler import load_playbook
from stream.engine.batch import Batch, Output, Record
from stream.engine.engine import Engine
from stream.engine.registry import Registry
from stream.engine.timers import DUE_PREFIX, parse_due_key
from stream.gateway.readmodels.states import snapshot_of_state
from stream.runtime.partitions import home_partition
from topics import (
    DeadLetter,
    DecisionRecord,
    JobSnapshot,
    TaskClosedRecord,
    TaskOpenedRecord,
    Topics,
    stored_job_state,
)

TOPICS = Topics("test.")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
#: The worker's clock in these tests: later than every record's timestamp.
WALL = T0 + timedelta(days=400)

ONBOARD = """\
key: onboard
version: 1
instructions: Be brief and friendly.
milestones:
  - id: collect
    instructions: Ask for an ID document.
    condition: id_uploaded WITHIN 7d
    integrations: [email]
  - id: activate
    needs: [collect]
    instructions: Activate the account.
    condition: account_activated
    integrations: [crm]
"""

QUICK = """\
key: quick
version: 1
milestones:
  - id: reply
    condition: customer_replied WITHIN 2h
"""


def ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def registry(*texts: str) -> Registry:
    return Registry(load_playbook(text) for text in texts)


def start(key: str, playbook: str = "onboard", **extra: Any) -> dict[str, Any]:
    return {
        "type": "job.start",
        "key": key,
        "playbook_key": playbook,
        "subject": {},
        "contacts": [],
        **extra,
    }


def event(key: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"type": "event", "key": key, "action": action, **extra}


class Harness:
    """An engine on a dict-backed table, committed like the Faust layer commits."""

    def __init__(
        self,
        reg: Registry,
        store: dict[tuple[str, int], bytes] | None = None,
        partitions: int = 1,
    ) -> None:
        self.registry = reg
        self.store: dict[tuple[str, int], bytes] = {} if store is None else store
        self.loads: list[tuple[str, int]] = []
        self.partitions = partitions
        self.wall = WALL
        self.engine = Engine(
            TOPICS,
            reg,
            self.load,
            partitions=partitions,
            wall_ms=lambda: ms(self.wall),
            scan=self.scan,
        )
        self.next_offset: dict[int, int] = {}

    def load(self, key: str, partition: int) -> bytes | None:
        self.loads.append((key, partition))
        return self.store.get((key, partition))

    def scan(self, partition: int, low: str, high: str) -> list[tuple[str, bytes]]:
        return dict_scan(self.store, partition, low, high)

    def due_rows(self, partition: int = 0) -> list[tuple[int, str, str]]:
        """The due-time index of ``partition``: (due ms, kind, name), in key order."""
        return due_rows(self.store, partition)

    def restart(self) -> Harness:
        """A new engine (a new worker process) on the same table."""
        fresh = Harness(self.registry, self.store, self.partitions)
        fresh.next_offset = self.next_offset
        return fresh

    def stored_items(self) -> list[tuple[str, bytes]]:
        return [(key, raw) for (key, _p), raw in self.store.items()]

    def inbox(
        self,
        message: dict[str, Any] | bytes | None,
        *,
        at: datetime | int = T0,
        partition: int | None = None,
        key: bytes | str | None = "auto",
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Record:
        """An inbox record, on its key's home partition unless ``partition`` says."""
        if isinstance(message, dict):
            value: bytes | None = orjson.dumps(message)
            record_key = message["key"].encode() if key == "auto" else key
        else:
            value = message
            record_key = b"job-1" if key == "auto" else key
        assert not isinstance(record_key, str)
        if partition is None:
            partition = home_partition(record_key, self.partitions) if record_key else 0
        offset = self.next_offset.get(partition, 0)
        self.next_offset[partition] = offset + 1
        stamp = ms(at) if isinstance(at, datetime) else at
        return Record(TOPICS.inbox, partition, offset, record_key, value, stamp, headers or [])

    def tick(self, at: datetime, partition: int = 0, offset: int = 0) -> Record:
        value = orjson.dumps(
            {"type": "tick", "schema": 1, "partition": partition, "at": at_text(at)}
        )
        return Record(TOPICS.ticks, partition, offset, b"tick", value, ms(at))

    def run(self, records: Iterable[Record], *, commit: bool = True) -> Batch:
        batch = self.engine.process(list(records))
        if commit:
            write(self.store, batch)
            self.engine.committed(batch)
        return batch

    def snapshots(self, batch: Batch) -> list[JobSnapshot]:
        """The job views a gateway builds from the batch's job rows (in the
        order the table writes them)."""
        out = []
        for key, _partition, raw in batch.writes():
            state = stored_job_state(key.encode(), raw)
            if state is None:
                continue
            data = orjson.loads(state)
            graph = self.engine.registry.graph(data["playbook_key"], data["playbook_version"])
            out.append(snapshot_of_state(data, graph.playbook if graph is not None else None))
        return out

    def state_bytes(self, key: str, partition: int = 0) -> bytes:
        raw = self.store[(key, partition)]
        return raw[raw.index(b"\n") + 1 :]


def dict_scan(
    store: dict[tuple[str, int], bytes], partition: int, low: str, high: str
) -> list[tuple[str, bytes]]:
    """The rows of a dict table's partition with keys in [low, high), in key
    order (a str's code point order is its UTF-8 bytes' order, RocksDB's)."""
    return sorted(
        (key, raw) for (key, p), raw in store.items() if p == partition and low <= key < high
    )


def write(store: dict[tuple[str, int], bytes], batch: Batch) -> None:
    """Apply ``batch.writes()`` as the table does (None deletes the row)."""
    for key, partition, raw in batch.writes():
        if raw is None:
            store.pop((key, partition), None)
        else:
            store[(key, partition)] = raw


def due_rows(store: dict[tuple[str, int], bytes], partition: int = 0) -> list[tuple[int, str, str]]:
    """The due-time index rows of a dict table's partition: (due ms, kind, name)."""
    out = []
    for key, _raw in dict_scan(store, partition, DUE_PREFIX, DUE_PREFIX + "\uffff"):
        due, name = parse_due_key(key)
        out.append((due, key[len(DUE_PREFIX)], name))
    return out


def at_text(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def on(batch: Batch, topic: str) -> list[Output]:
    return [o for o in batch.outputs if o.topic == TOPICS.name(topic)]


def decisions(batch: Batch) -> list[DecisionRecord]:
    return [DecisionRecord.model_validate_json(o.value) for o in on(batch, "decisions")]


def tasks(batch: Batch) -> list[TaskOpenedRecord | TaskClosedRecord]:
    out: list[TaskOpenedRecord | TaskClosedRecord] = []
    for o in on(batch, "tasks"):
        data = orjson.loads(o.value)
        if data["type"] == "task.opened":
            out.append(TaskOpenedRecord.model_validate(data))
        else:
            out.append(TaskClosedRecord.model_validate(data))
    return out


@dataclass(frozen=True)
class Letter:
    """A dead letter as produced: its headers read back, its key and value."""

    meta: DeadLetter
    key: bytes | None
    value: bytes | None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.meta, name)


def letters(batch: Batch) -> list[Letter]:
    return [
        Letter(DeadLetter.from_headers(o.headers or []), o.key, o.value)
        for o in on(batch, "deadletter")
    ]


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def latest_hashes(records: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Each job's latest seq and state hash, from its decisions as read from the
    topic (``{"value": ...}``): the hash is on the decisions, not the snapshots."""
    out: dict[str, tuple[int, str]] = {}
    for r in records:
        d = r["value"]
        key, seq, state_hash = d["job_key"], d["seq"], d["state_hash"]
        if state_hash is not None and seq >= out.get(key, (0, ""))[0]:
            out[key] = (seq, state_hash)
    return out
