"""Schedules at scale (docs/schedules.md): the cost of a tick among many
schedules that are not due, and the memory a schedule costs.

Both go through the worker's own parts, with no broker: the engine
(``stream/engine/engine.py``) with its schedules hook (``stream/engine/schedules.py``), the
state of every schedule stored as the worker stores it in a real RocksDB
database (raw mode, one WriteBatch per tick, as ``stream/engine/table.py`` writes),
the due-time index stored beside them (stream/engine/timers.py: rows of the same
database, read by a tick up to its ``now``), and tick records decided by
``Engine.process``.

* **Tick cost**: ``total`` schedules, ``due`` of them due at each tick (every
  five minutes; the others daily at 23:00, so never due in the measured
  ticks). A tick is timed from ``Engine.process([tick])`` to the batch's rows
  written to RocksDB; each repeat is the next five-minute slot, after the
  previous batch was committed. A tick must cost what is due, not what is
  stored: the ratio of 100,000 to 100 schedules (100 due in both) should stay
  near 1.
* **Memory**: the worker holds nothing per schedule (the states and the
  due-time index stay in RocksDB): measured with ``tracemalloc`` around what a
  partition assignment does (``Engine.assigned``) and a first tick, and as the
  process's RSS before and after; and the RocksDB bytes of the rows (the live
  SST files after a flush and a full compaction, and the rows' own key + value
  bytes, index rows included).
"""

from __future__ import annotations

import gc
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rocksdict

from compiler import Define, ScheduleState, schedule_step, to_iso, validate_schedule
from stream.bench.micro import rocks_table
from stream.engine.engine import Engine, Record
from stream.engine.registry import Registry
from stream.engine.schedules import Schedules, encode_schedule, schedule_key
from stream.engine.timers import DUE_VALUE, SCHEDULES, due_key, due_range
from topics import TickRecord, Topics, encode

__all__ = ["ScheduleMemory", "schedule_memory", "schedule_tick_ms"]

#: A Monday, 09:00 UTC: the due schedules' first slot is 09:05, the idle ones' 23:00.
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _definition(i: int, due: bool) -> dict[str, object]:
    """A realistic definition: a start_job with a key template, half of the idle
    ones in New York time."""
    return {
        "id": f"{'due' if due else 'idle'}-{i:06d}",
        "name": f"{'Due' if due else 'Idle'} schedule {i}",
        "schedule": "every 5m" if due else "daily at 23:00",
        "timezone": "UTC" if due or i % 2 else "America/New_York",
        "action": {
            "type": "start_job",
            "playbook_key": "onboarding",
            "key": "bench-{schedule}-{instant}",
            "subject": {"plan": "pro"},
        },
    }


def _states(total: int, due: int) -> list[ScheduleState]:
    """``total`` schedule states defined at ``T0``, the first ``due`` of them due at
    every five-minute slot. Each is validated and defined through the pure state
    machine, as a worker defines one from the ``schedules`` topic."""
    out = []
    for i in range(total):
        schedule = validate_schedule(_definition(i, i < due), "bench")
        state = schedule_step(None, T0, Define(schedule)).state
        assert state is not None
        out.append(state)
    return out


def _open(path: Path) -> rocksdict.Rdict:
    return rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))


def _store(db: rocksdict.Rdict, rows: list[tuple[str, bytes | None]]) -> None:
    batch = rocksdict.WriteBatch(raw_mode=True)
    for key, value in rows:
        if value is None:
            batch.delete(key.encode())
        else:
            batch.put(key.encode(), value)
    db.write(batch)


def _stored(db: rocksdict.Rdict) -> Iterator[tuple[str, bytes]]:
    """The stored rows, one at a time (as a worker reads its table)."""
    for key, value in db.items():
        assert isinstance(key, bytes)  # raw mode
        assert isinstance(value, bytes)
        yield key.decode(), value


def _fill(path: Path, total: int, due: int) -> None:
    states = _states(total, due)
    db = _open(path)
    try:
        for start in range(0, len(states), 10_000):
            chunk = states[start : start + 10_000]
            rows: list[tuple[str, bytes | None]] = []
            for s in chunk:
                rows.append((schedule_key(s.schedule.id), encode_schedule(0, s)))
                when = s.due_ms()
                if when is not None:
                    rows.append((due_key(SCHEDULES, when, s.schedule.id), DUE_VALUE))
            _store(db, rows)
        db.flush()
    finally:
        db.close()


def _engine(db: rocksdict.Rdict, hook: Schedules, wall_ms: int = 0) -> Engine:
    """An engine over ``db`` as a worker's table (one partition)."""
    load, scan = rocks_table(db)
    return Engine(
        hook.names,
        Registry([]),
        load,
        partitions=1,
        schedules=hook,
        wall_ms=(lambda: wall_ms) if wall_ms else None,
        scan=scan,
    )


def _tick(topics: Topics, at: datetime) -> Record:
    value = encode(TickRecord(partition=0, at=to_iso(at)))
    return Record(topics.ticks, 0, 0, b"tick", value, int(at.timestamp() * 1000))


class _Worker:
    """One worker's engine and schedules hook over a RocksDB database of
    ``total`` stored schedules, ``due`` of them due at each five-minute slot."""

    def __init__(self, path: Path, total: int, due: int, last: datetime) -> None:
        _fill(path, total, due)
        self.path = path
        self.due = due
        self.db = _open(path)
        self.topics = Topics("bench.")
        self.hook = Schedules(self.topics)
        self.engine = _engine(self.db, self.hook, int(last.timestamp() * 1000))
        self.engine.assigned()  # as on a partition assignment: nothing to rebuild
        self.ticks = 0

    def tick(self) -> float:
        """Decide the next slot's tick and store what it decided; milliseconds."""
        self.ticks += 1
        tick = _tick(self.topics, T0 + STEP * self.ticks)
        fired = self.hook.fired
        gc.collect()
        started = time.perf_counter()
        batch = self.engine.process([tick])
        _store(self.db, [(key, raw) for key, _p, raw in batch.writes()])
        elapsed = (time.perf_counter() - started) * 1000
        self.engine.committed(batch)
        if self.hook.fired - fired != self.due:
            raise AssertionError(f"{self.hook.fired - fired} of {self.due} schedules fired")
        return elapsed

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)


def schedule_tick_ms(
    totals: tuple[int, ...], due: int, workdir: Path, repeats: int = 11
) -> list[float]:
    """Milliseconds for the worker to decide one tick that finds ``due`` stored
    schedules due among each of ``totals``, and to store what it decided: the
    median of ``repeats`` consecutive ticks each. The workers' ticks alternate,
    so a machine that slows down meanwhile slows them all alike."""
    last = T0 + STEP * (repeats + 1)
    workers = []
    try:
        for total in totals:
            workers.append(_Worker(workdir / f"schedules-{total}-{due}", total, due, last))
        samples: list[list[float]] = [[] for _ in workers]
        for _ in range(repeats):
            for worker, out in zip(workers, samples, strict=True):
                out.append(worker.tick())
        return [statistics.median(s) for s in samples]
    finally:
        for worker in workers:
            worker.close()


@dataclass(frozen=True)
class ScheduleMemory:
    """What ``count`` stored schedules cost."""

    count: int
    #: what the worker holds after an assignment and a first tick, traced by
    #: tracemalloc (the due-time index is in RocksDB)
    index_bytes: int
    #: the RSS growth of a fresh process doing the same
    rss_mb: float
    #: the live SST files after a flush and a full compaction
    rocksdb_bytes: int
    #: the rows' own key + value bytes
    row_bytes: int
    #: seconds from a partition assignment to its first tick decided (nothing
    #: is rebuilt: this is the tick's own cost)
    rebuild_s: float

    def per_100k(self, value: float) -> float:
        """``value`` scaled to 100,000 schedules."""
        return value * 100_000 / self.count


def _sst_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix == ".sst")


def schedule_memory(count: int, workdir: Path) -> ScheduleMemory:
    """Store ``count`` schedules, then assign them to a worker and tick once."""
    path = workdir / f"schedules-memory-{count}"
    _fill(path, count, 0)
    db = _open(path)
    try:
        db.compact_range(None, None)
        db.flush()
        rocksdb_bytes = _sst_bytes(path)
        row_bytes = sum(len(k.encode()) + len(v) for k, v in _stored(db))
        topics = Topics("bench.")
        hook = Schedules(topics)
        engine = _engine(db, hook)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            engine.assigned()
            engine.process([_tick(topics, T0)])
            gc.collect()
            index_bytes = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        low, high = due_range(SCHEDULES, 10**16)
        indexed = sum(1 for _ in _engine(db, hook).scan(0, low, high))
        if indexed != count:
            raise AssertionError(f"the index holds {indexed} of {count} schedules")
    finally:
        db.close()
    try:
        rss, rebuild_s = _child_rebuild(path)
        return ScheduleMemory(count, index_bytes, rss, rocksdb_bytes, row_bytes, rebuild_s)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _child_rebuild(path: Path) -> tuple[float, float]:
    """The RSS growth (MB) of a fresh process rebuilding a worker's index from
    the database at ``path`` (this process's allocator holds too much history
    for its own RSS to mean anything), and the seconds the rebuild took."""
    proc = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "stream.bench.schedules", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rss, seconds = proc.stdout.split()[-2:]
    return float(rss), float(seconds)


def _rebuild_in_child(path: Path) -> None:
    db = _open(path)
    try:
        topics = Topics("bench.")
        hook = Schedules(topics)
        engine = _engine(db, hook)
        gc.collect()
        before = _rss_mb()
        started = time.perf_counter()
        engine.assigned()
        engine.process([_tick(topics, T0)])
        seconds = time.perf_counter() - started
        gc.collect()
        print(f"{_rss_mb() - before:.3f} {seconds:.4f}")
    finally:
        db.close()


if __name__ == "__main__":
    _rebuild_in_child(Path(sys.argv[1]))
