"""In-process figures: the pure core's decision rate, the cost of a tick, and
what one entry of the engine's state cache holds."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rocksdict

from compiler import Event, JobGraph, Start, Tick, to_iso
from stream.bench.workload import onboarding_mix
from stream.engine.engine import Engine, Record, Scan
from stream.engine.registry import Registry
from stream.engine.store import NOTHING_APPLIED, decode_stored, encode_stored
from stream.engine.timers import DUE_VALUE, JOBS, due_key
from stream.runtime.config import RocksDBMemory
from stream.runtime.faust_tuning import BoundedRocksDBOptions
from stream.runtime.files import load_playbook_file
from topics import JobStart, TickRecord, Topics, encode

__all__ = ["core_decisions_per_s", "state_cache_bytes_per_entry", "tick_cost_ms"]

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def core_decisions_per_s(playbooks: Path, jobs: int) -> float:
    """Decisions per second of ``JobGraph.next`` alone on the onboarding mix."""
    graph = JobGraph(load_playbook_file(playbooks / "onboarding.yaml"))
    mix = onboarding_mix(jobs, seed=3)
    states: dict[str, object] = {}
    started = time.perf_counter()
    for i, message in enumerate(mix):
        now = T0 + timedelta(seconds=i)
        key = message.key
        if isinstance(message, JobStart):
            step = graph.next(None, now, Start(key, "onboarding"))
        else:
            event = Event(
                message.action,
                None,
                message.properties or None,
                message.source,
                message.idempotency_key,
            )
            step = graph.next(states[key], now, event)  # type: ignore[arg-type]
        states[key] = step.state
    # And the deadlines: advance every job past its windows.
    late = T0 + timedelta(days=40)
    for key, state in states.items():
        states[key] = graph.next(state, late, Tick()).state  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    return (len(mix) + len(states)) / elapsed


def state_cache_bytes_per_entry(playbooks: Path, entries: int) -> float:
    """The Python heap one entry of the engine's state cache holds (bytes,
    tracemalloc): ``entries`` onboarding jobs taken through the bench's mix,
    each stored as the engine stores it and decoded back, held as the cache
    holds them (``Engine._cache``: job → applied positions, state, due time).
    The worker holds at most LEMONGRAPH_STATE_CACHE of them."""
    graph = JobGraph(load_playbook_file(playbooks / "onboarding.yaml"))
    states: dict[str, object] = {}
    for i, message in enumerate(onboarding_mix(entries, seed=3)):
        now = T0 + timedelta(seconds=i)
        if isinstance(message, JobStart):
            step = graph.next(None, now, Start(message.key, "onboarding"))
        else:
            event = Event(message.action, None, message.properties or None, message.source)
            step = graph.next(states[message.key], now, event)  # type: ignore[arg-type]
        states[message.key] = step.state
    raws = [encode_stored(0, NOTHING_APPLIED, state) for state in states.values()]  # type: ignore[arg-type]
    del states
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache: OrderedDict[tuple[int, str], object] = OrderedDict()
        for raw in raws:
            stored = decode_stored(raw)
            cache[(0, stored.state.key)] = (stored.applied, stored.state, stored.next_due_ms)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held / len(cache)


def rocks_table(
    db: rocksdict.Rdict,
) -> tuple[Callable[[str, int], bytes | None], Scan]:
    """``load`` and ``scan`` over one RocksDB database, as ``stream/engine/table.py``
    reads a partition's."""

    def load(key: str, _partition: int) -> bytes | None:
        raw = db.get(key.encode())
        return None if raw is None else bytes(raw)

    def scan(_partition: int, low: str, high: str) -> Iterator[tuple[str, bytes]]:
        options = rocksdict.ReadOptions()
        options.set_iterate_upper_bound(high.encode())
        for key, value in db.items(from_key=low.encode(), read_opt=options):
            assert isinstance(key, bytes)
            assert isinstance(value, bytes)
            yield key.decode(), value

    return load, scan


def tick_cost_ms(playbooks: Path, pending: int, due: int, repeats: int = 3) -> float:
    """Milliseconds for the engine to handle one tick that finds ``due`` jobs due
    among ``pending`` jobs waiting on timers (median of ``repeats``), on a
    RocksDB database that holds the due-time index (stream/engine/timers.py) as a
    worker's table does."""
    topics = Topics("bench.")
    playbook = load_playbook_file(playbooks / "onboarding.yaml")
    registry = Registry([playbook])
    graph = registry.latest("onboarding")
    assert graph is not None
    far = int((T0 + timedelta(days=365)).timestamp() * 1000)
    samples = []
    for _ in range(repeats):
        path = Path(tempfile.mkdtemp(prefix="lemongraph-tick-"))
        # The worker's own RocksDB options (stream/runtime/faust_tuning.py): its cache,
        # bloom filters and index blocks.
        db = rocksdict.Rdict(str(path), options=BoundedRocksDBOptions(RocksDBMemory()).as_options())
        try:
            # The due jobs are real stored jobs; the others exist only as index
            # rows far in the future, which is all a tick may look at.
            rows = rocksdict.WriteBatch(raw_mode=True)
            for i in range(due):
                key = f"due-{i}"
                state = graph.next(None, T0, Start(key, "onboarding")).state
                assert state is not None
                rows.put(key.encode(), encode_stored(0, NOTHING_APPLIED, state))
                when = int(state.timers[0].at.timestamp() * 1000)
                rows.put(due_key(JOBS, when, key).encode(), DUE_VALUE)
            db.write(rows)
            for start in range(0, pending - due, 100_000):
                rows = rocksdict.WriteBatch(raw_mode=True)
                for i in range(start, min(start + 100_000, pending - due)):
                    rows.put(due_key(JOBS, far + i, f"idle-{i}").encode(), DUE_VALUE)
                db.write(rows)
            db.flush()

            load, scan = rocks_table(db)
            engine = Engine(topics, registry, load, partitions=1, scan=scan)
            at = T0 + timedelta(days=8)  # past collectIdentity's 7-day window
            tick = Record(
                topics.ticks,
                0,
                0,
                b"tick",
                encode(TickRecord(partition=0, at=to_iso(at))),
                int(at.timestamp() * 1000),
            )
            started = time.perf_counter()
            batch = engine.process([tick])
            samples.append((time.perf_counter() - started) * 1000)
            assert batch.decisions == due, (batch.decisions, due)
        finally:
            db.close()
            shutil.rmtree(path, ignore_errors=True)
    return statistics.median(samples)
