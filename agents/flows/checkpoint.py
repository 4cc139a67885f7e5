"""How a flow run is checkpointed (docs/flows.md, "Crash safety"): whole in
the job's conversation record while it is small, else as a **base** and a
**delta** per step, records of their own on the ``conversations`` changelog
beside the conversation's, so that a step writes what it changed and a
fan-out of N items writes O(N) bytes, not O(N²).

* The base is the run as it was (state, actions, the inputs kept), split into
  parts of at most ``PART_BYTES`` (each record stays under the producer's
  1 MB request size): ``{job}\\x00flow/{run_id}/b{gen}/{i}``.
* A delta is one input stepped (and when), and, when the driver checkpoints
  without the conversation's record, the few fields it changed (``seq`` says
  which is latest): ``{job}\\x00flow/{run_id}/d{gen}/{j}``, j counting from 0.
  The state is the base's stepped again on the deltas' inputs: the step
  function is pure, so it is the same state.
* Once the deltas outweigh the base (or the run ended) the run is written
  again as the base of the next generation, and the records of the last one
  are deleted (tombstones) after the conversation's record points at it: the
  bases grow geometrically, so all the bases together cost O(what the deltas
  cost).

A key starts with the job's key and ``\\x00``, which no job key has."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

__all__ = ["INLINE_BYTES", "PART_BYTES", "RunLog", "owed_records", "read_back", "record_key"]


class Tracked(Protocol):
    """What of a flow run's track (agents/flows/track.py, ``FlowTrack``) its
    checkpoint reads."""

    @property
    def run_id(self) -> str: ...

    @property
    def journaled(self) -> int: ...

    @property
    def journaled_start(self) -> bool: ...

    @property
    def journaled_at(self) -> str | None: ...

    @property
    def status(self) -> str: ...

    @property
    def log(self) -> RunLog: ...

    @property
    def active(self) -> bool: ...

    def small_json(self) -> dict[str, Any]: ...

    def run_json(self) -> dict[str, Any]: ...


#: A run whose state, actions and kept inputs take more bytes than this is
#: kept as a base and deltas; below it, whole in the conversation's record.
INLINE_BYTES = 16 * 1024
#: Bytes of the base per record (base64 makes it 4/3 of this, under 1 MB).
PART_BYTES = 384 * 1024

Get = Callable[[bytes], bytes | None]


def record_key(job_key: str, run_id: str, suffix: str) -> bytes:
    """The changelog key of one record of a run's checkpoint."""
    return f"{job_key}\x00flow/{run_id}/{suffix}".encode()


@dataclass
class RunLog:
    """Where a run's checkpoint is: generation ``gen`` (0: whole in the
    conversation's record), its base's parts and the deltas after it."""

    gen: int = 0
    chunks: int = 0
    #: Delta records of this generation written (or owed).
    deltas: int = 0
    #: Actions carried out since the base (the base's actions and those the
    #: deltas' steps returned, less these many from the front, are left).
    taken: int = 0
    #: Checkpoints taken: the latest of the conversation's record and the
    #: deltas' snapshots says the fields a snapshot keeps.
    seq: int = 0
    base_bytes: int = 0
    delta_bytes: int = 0
    #: Inputs stepped and not yet in a delta record: (input, at).
    inputs: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    #: Records to write before the conversation's record (key suffix, value).
    owed: list[tuple[str, bytes]] = field(default_factory=list)
    #: Records to delete after it (the last generation's).
    after: list[str] = field(default_factory=list)

    def meta(self) -> dict[str, Any]:
        return {
            "gen": self.gen,
            "chunks": self.chunks,
            "deltas": self.deltas,
            "taken": self.taken,
            "seq": self.seq,
            "base_bytes": self.base_bytes,
            "delta_bytes": self.delta_bytes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunLog:
        log = cls()
        for name in ("gen", "chunks", "deltas", "taken", "seq", "base_bytes", "delta_bytes"):
            setattr(log, name, int(data.get(name, 0)))
        return log

    def stepped(self, data: dict[str, Any], at: str) -> None:
        if self.gen:
            self.inputs.append((data, at))

    def due(self, track: Tracked) -> bool:
        """The run is to be written again as a base: the deltas outweigh it,
        or it ended (so that reading it back steps nothing)."""
        if not self.deltas and not self.inputs:
            return False
        return not track.active or self.delta_bytes > max(self.base_bytes, INLINE_BYTES)

    @property
    def light(self) -> bool:
        """A step may be checkpointed by its delta alone (no conversation record)."""
        return self.gen > 0

    def checkpoint(self, track: Tracked) -> dict[str, Any]:
        """The run as the conversation's record keeps it (its records owed)."""
        self.seq += 1
        small = track.small_json()
        if self.gen == 0:
            run = track.run_json()
            raw = orjson.dumps(run)
            if len(raw) <= INLINE_BYTES:
                return {**small, **run}
            self._rebase(raw)
        elif self.due(track):
            self._rebase(orjson.dumps(track.run_json()))
        else:
            self._flush(None)
        return {**small, "log": self.meta()}

    def mark(self, track: Tracked) -> None:
        """A checkpoint by deltas alone: the inputs stepped, and the fields a
        step changes (``snapshot``) on the last of them."""
        self.seq += 1
        self._flush(
            {
                "seq": self.seq,
                "taken": self.taken,
                "journaled": track.journaled,
                "journaled_start": track.journaled_start,
                "journaled_at": track.journaled_at,
                "status": track.status,
            }
        )

    def _flush(self, snapshot: dict[str, Any] | None) -> None:
        records: list[dict[str, Any]] = [
            {"kind": "flow_delta", "input": data, "at": at} for data, at in self.inputs
        ]
        self.inputs = []
        if snapshot is not None:
            if not records:
                records.append({"kind": "flow_delta"})
            records[-1]["track"] = snapshot
        for record in records:
            raw = orjson.dumps(record)
            self.owed.append((f"d{self.gen}/{self.deltas}", raw))
            self.deltas += 1
            self.delta_bytes += len(raw)

    def _rebase(self, raw: bytes) -> None:
        self.after.extend(self._suffixes())
        self.gen += 1
        self.taken = self.deltas = self.delta_bytes = 0
        self.inputs = []
        parts = [raw[i : i + PART_BYTES] for i in range(0, len(raw), PART_BYTES)]
        self.chunks, self.base_bytes = len(parts), len(raw)
        for i, part in enumerate(parts):
            data = {"kind": "flow_chunk", "data": base64.b64encode(part).decode()}
            self.owed.append((f"b{self.gen}/{i}", orjson.dumps(data)))

    def _suffixes(self) -> list[str]:
        if not self.gen:
            return []
        return [f"b{self.gen}/{i}" for i in range(self.chunks)] + [
            f"d{self.gen}/{j}" for j in range(self.deltas)
        ]


def owed_records(conv: Any, *, after: bool = False) -> list[tuple[bytes, bytes | None]]:
    """The checkpoint records the conversation's flow runs owe: those to write
    before its own record, or (``after``) the tombstones to write after it."""
    found: list[tuple[bytes, bytes | None]] = []
    for track in conv.flows.values():
        log: RunLog = track.log
        if after:
            found += [(record_key(conv.job_key, track.run_id, s), None) for s in log.after]
            log.after = []
        else:
            found += [(record_key(conv.job_key, track.run_id, s), v) for s, v in log.owed]
            log.owed = []
    return found


def read_back(
    job_key: str, run_id: str, log: RunLog, get: Get
) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The run's base, its deltas in order (every one there, also those
    written after the conversation's record) and their bytes. ValueError
    when a record the conversation's record counts is missing."""
    parts: list[bytes] = []
    for i in range(log.chunks):
        raw = get(record_key(job_key, run_id, f"b{log.gen}/{i}"))
        if raw is None:
            raise ValueError(f"part {i + 1} of {log.chunks} of its checkpoint is missing")
        parts.append(base64.b64decode(orjson.loads(raw)["data"]))
    run: dict[str, Any] = orjson.loads(b"".join(parts))
    deltas: list[dict[str, Any]] = []
    size = 0
    while True:
        raw = get(record_key(job_key, run_id, f"d{log.gen}/{len(deltas)}"))
        if raw is None:
            break
        deltas.append(orjson.loads(raw))
        size += len(raw)
    if len(deltas) < log.deltas:
        raise ValueError(f"delta {len(deltas)} of its checkpoint is missing")
    return run, deltas, size
