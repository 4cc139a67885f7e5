"""Wakes held for a schedule whose definition has not been read yet
(docs/schedules.md, "Wake").

Definitions (``schedules``) and wakes (the inbox) are different topics, whose
order a consumer does not keep: a wake written just after a definition can
reach the worker first. Such a wake is not dead-lettered: its original record
(key, value, headers, timestamp and where it came from) is kept in the
engine's table, under ``"\\x00schedule-held/<id>"`` (a key no job can have), on
the schedule's home partition, with a row of the due-time index
(stream/engine/timers.py, kind ``h``) at the first wake's instant plus
:data:`HOLD_MS`. So, through the same table write and changelog as every state:

* when the definition is read, the held wakes are decided in the order they
  came, in the same batch as the definition, and the row is deleted;
* a wake is held once: a second copy (the same request id, or a forwarded
  copy of the same inbox record) is a duplicate;
* at most :data:`HELD_MAX` wakes are held per schedule; one more is
  dead-lettered with the reason;
* at the due time, wakes still without a definition are dead-lettered with
  their original bytes and ``no schedule 'x' was defined within 5m of the wake``.
"""

from __future__ import annotations

from base64 import b64decode, b64encode
from collections.abc import Callable
from typing import Any

import orjson

from stream.engine.batch import META_PREFIX, Batch, Record
from stream.runtime.errors import StorageError
from topics import MAX_RECORD_BYTES

__all__ = [
    "HELD",
    "HELD_MAX",
    "HELD_PREFIX",
    "HOLD_MS",
    "Held",
    "HeldWake",
    "held_key",
]

#: The table key of a schedule's held wakes is this and its id.
HELD_PREFIX = f"{META_PREFIX}schedule-held/"
#: The due-time index's kind of held wakes (stream/engine/timers.py).
HELD = "h"
#: How long the first wake of a schedule not defined waits for its definition.
HOLD_MS = 300_000
#: The most wakes held for one schedule.
HELD_MAX = 100

#: A held wake: the inbox record as it came, and where it was produced.
HeldWake = tuple[Record, tuple[int, int]]

#: Reads a row of the engine's table: ``load(key, partition)``.
Load = Callable[[str, int], bytes | None]


def held_key(schedule_id: str) -> str:
    """The table key of the wakes held for ``schedule_id``."""
    return f"{HELD_PREFIX}{schedule_id}"


def peek_held(raw: bytes) -> int | None:
    """The due time of a stored row of held wakes (None: not one this worker
    can read; a tick never fires it, and the definition still releases it)."""
    try:
        due = orjson.loads(raw)["due"]
    except (ValueError, KeyError, TypeError):
        return None
    return due if isinstance(due, int) else None


def _b64(data: bytes | None) -> str | None:
    return None if data is None else b64encode(data).decode("ascii")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else b64decode(text)


def _encode(wake: HeldWake, request: str) -> dict[str, Any]:
    record, origin = wake
    return {
        "request": request,
        "origin": list(origin),
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [[name, _b64(value)] for name, value in record.headers],
    }


def _decode(item: dict[str, Any]) -> HeldWake:
    record = Record(
        item["topic"],
        item["partition"],
        item["offset"],
        _bytes(item["key"]),
        _bytes(item["value"]),
        item["timestamp"],
        [(name, _bytes(value) or b"") for name, value in item["headers"]],
    )
    return record, (item["origin"][0], item["origin"][1])


class Held:
    """The held wakes of the engine's table, read and written through a batch
    (``Batch.rows``, ``Batch.timers``)."""

    def __init__(self, load: Load) -> None:
        self.load = load

    def _read(self, partition: int, schedule_id: str, batch: Batch) -> dict[str, Any] | None:
        """The stored row (the batch's own first), whose due time as stored
        the batch notes."""
        key = held_key(schedule_id)
        if (partition, key) in batch.rows:
            pending = batch.rows[(partition, key)]
            return None if pending is None else dict(orjson.loads(pending))
        try:
            raw = self.load(key, partition)
        except Exception as exc:
            raise StorageError(f"cannot read {key!r} of partition {partition}: {exc}") from exc
        row = None if raw is None else dict(orjson.loads(raw))
        where = (partition, HELD, schedule_id)
        if where not in batch.timers:
            due = None if row is None else int(row["due"])
            batch.timers[where] = (due, due)
        return row

    def hold(
        self,
        schedule_id: str,
        wake: HeldWake,
        request: str,
        now_ms: int,
        batch: Batch,
    ) -> str | None:
        """Hold ``wake`` (request id ``request``, read at ``now_ms``) for
        ``schedule_id`` on the record's partition. The reason to dead-letter it
        instead, or None (held, or held before: a duplicate)."""
        partition = wake[0].partition
        row = self._read(partition, schedule_id, batch) or {"due": now_ms + HOLD_MS, "wakes": []}
        wakes: list[dict[str, Any]] = row["wakes"]
        if any(item["request"] == request for item in wakes):
            batch.duplicates += 1
            return None
        if len(wakes) >= HELD_MAX:
            return (
                f"schedule.wake: no schedule {schedule_id!r}, and {HELD_MAX} wakes already "
                "wait for its definition"
            )
        row["wakes"] = [*wakes, _encode(wake, request)]
        raw = orjson.dumps(row)
        if len(raw) > MAX_RECORD_BYTES:
            return (
                f"schedule.wake: no schedule {schedule_id!r}, and the wakes waiting for its "
                f"definition would be larger than {MAX_RECORD_BYTES:,} bytes"
            )
        # -- nothing below can fail --
        batch.rows[(partition, held_key(schedule_id))] = raw
        where = (partition, HELD, schedule_id)
        batch.timers[where] = (batch.timers[where][0], int(row["due"]))
        return None

    def take(self, partition: int, schedule_id: str, batch: Batch) -> list[HeldWake]:
        """The wakes held for ``schedule_id``, in the order they came, and
        their row deleted (in the batch)."""
        row = self._read(partition, schedule_id, batch)
        if row is None:
            return []
        batch.rows[(partition, held_key(schedule_id))] = None
        where = (partition, HELD, schedule_id)
        batch.timers[where] = (batch.timers[where][0], None)
        return [_decode(item) for item in row["wakes"]]

    def due(self, partition: int, schedule_id: str, batch: Batch) -> None:
        """Read the row so the batch knows its due time (see ``DueIndex.fires``)."""
        self._read(partition, schedule_id, batch)


def expired(schedule_id: str) -> str:
    """Why a held wake is dead-lettered at its due time."""
    return f"no schedule {schedule_id!r} was defined within {HOLD_MS // 60_000}m of the wake"
