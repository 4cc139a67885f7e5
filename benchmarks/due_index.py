"""Recovery and tick cost of the timer index, old (an in-memory heap rebuilt
from every stored job's header on assignment) against new (the durable due-time
index, stream/engine/timers.py), on the same machine in the same run.

    python benchmarks/due_index.py --jobs 100000 --code new|old [--json]

Run it once per code version: ``--code old`` with ``PYTHONPATH`` pointing at a
checkout of the old code (its engine has ``rebuild_timers``). It

* writes ``--jobs`` onboarding jobs straight into a Faust RocksDB table
  (``stream/engine/table.py``'s ``JobTable``, 4 partitions, each job stored as the
  worker stores it, due in 7 days; ``--due`` of them due at the first tick),
  and with ``--code new`` their due-time index rows as the migration writes
  them (``Engine.index_rows``, timed: the one-time cost of an old table);
* times recovery as a worker does it at an assignment, from a fresh engine to
  the first decision: old, ``rebuild_timers(table.items())`` then the first
  tick; new, ``assigned()``, the index mark read per partition, then the first
  tick (the broker's part of an assignment, the changelog catch-up and the log
  checks, is the same for both and not included);
* reports the process's RSS after recovery, and its growth during it.

``--tick PENDING`` runs ``stream.bench.micro.tick_cost_ms`` of the code version
instead: one tick finding ``--due`` due among PENDING timers (old: the heap;
new: the index rows in a RocksDB database), the median of three.

New code only: ``--tombstones N`` times ticks after N fired timers' rows were
deleted (RocksDB tombstones, not compacted) ahead of the due ones: the first
tick after an assignment reads over them, the next start at the floor
(``Engine.settle``). ``--bytes`` counts the table rows (the changelog's
records) and key + value bytes the index adds per inbox event on the bench's
onboarding mix.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import faust
import rocksdict

from compiler import Start, to_iso
from stream.engine.engine import Engine, Record, home_partition
from stream.engine.registry import Registry
from stream.engine.store import next_due_ms
from stream.engine.table import JobTable
from stream.runtime.files import load_playbook_file
from topics import TickRecord, Topics, encode

PARTITIONS = 4
T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
PLAYBOOKS = Path(__file__).resolve().parent.parent / "examples"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(table: JobTable, registry: Registry, jobs: int, due: int) -> None:
    """``jobs`` stored jobs; the first ``due`` started 10 days before the rest
    (so their 7-day window is over at the first tick)."""
    graph = registry.latest("onboarding")
    assert graph is not None
    template: dict[bool, tuple[bytes, int]] = {}
    for early in (True, False):
        at = T0 - timedelta(days=10) if early else T0
        state = graph.next(None, at, Start("template", "onboarding")).state
        assert state is not None
        due_ms = next_due_ms(state)
        assert due_ms is not None
        template[early] = (state.to_bytes(), due_ms)
    chunk: list[tuple[str, int, bytes | None]] = []
    for i in range(jobs):
        key = f"job-{i:07d}"
        early = i < due
        # The same state for every job but its key: a job's key is in its state.
        raw, due_ms = template[early]
        body = raw.replace(b'"template"', b'"%s"' % key.encode())
        p = home_partition(key.encode(), PARTITIONS)
        header = b"LG2 %d %d -\n" % (p, due_ms)
        chunk.append((key, p, header + body))
        if len(chunk) >= 20_000:
            table.write(chunk, {})
            chunk = []
    table.write(chunk, {})


def first_tick(engine: Engine, topics: Topics, table: JobTable) -> tuple[int, float]:
    """Decide one tick per partition at T0 (the early jobs are due): (decisions,
    seconds to the first decision's batch)."""
    at = T0 + timedelta(seconds=1)
    decisions = 0
    first = 0.0
    began = time.perf_counter()
    for p in range(PARTITIONS):
        value = encode(TickRecord(partition=p, at=to_iso(at)))
        record = Record(topics.ticks, p, 0, b"tick", value, int(at.timestamp() * 1000))
        batch = engine.process([record])
        decisions += batch.decisions
        if batch.decisions and not first:
            first = time.perf_counter() - began
        table.write(batch.writes(), {})  # as the worker does, after the acks
        engine.committed(batch)
    return decisions, first


def tombstones(dead: int, due_count: int, idle: int = 500_000) -> dict[str, Any]:
    """Ticks over ``dead`` deleted index rows (see the module's docstring)."""
    from stream.bench.micro import rocks_table
    from stream.engine.store import NOTHING_APPLIED, encode_stored
    from stream.engine.timers import DUE_VALUE, JOBS, due_key

    registry = Registry([load_playbook_file(PLAYBOOKS / "onboarding.yaml")])
    graph = registry.latest("onboarding")
    assert graph is not None
    topics = Topics("bench.")
    path = tempfile.mkdtemp(prefix="lemongraph-tombstones-")
    db = rocksdict.Rdict(path, options=rocksdict.Options(raw_mode=True))
    try:
        rows = rocksdict.WriteBatch(raw_mode=True)
        due = 0
        for i in range(due_count):
            key = f"due-{i}"
            state = graph.next(None, T0, Start(key, "onboarding")).state
            assert state is not None
            rows.put(key.encode(), encode_stored(0, NOTHING_APPLIED, state))
            due = next_due_ms(state) or 0
            rows.put(due_key(JOBS, due, key).encode(), DUE_VALUE)
        db.write(rows)
        for start in range(0, dead + idle, 100_000):
            rows = rocksdict.WriteBatch(raw_mode=True)
            for i in range(start, min(start + 100_000, dead + idle)):
                at = 10_000 + i if i < dead else due + 10**10 + i
                rows.put(due_key(JOBS, at, f"x-{i}").encode(), DUE_VALUE)
            db.write(rows)
        db.flush()
        for start in range(0, dead, 1000):  # fired: deleted, 1,000 a tick
            rows = rocksdict.WriteBatch(raw_mode=True)
            for i in range(start, min(start + 1000, dead)):
                rows.delete(due_key(JOBS, 10_000 + i, f"x-{i}").encode())
            db.write(rows)
        db.flush()
        load, scan = rocks_table(db)
        engine = Engine(topics, registry, load, partitions=1, scan=scan)

        def tick(now_ms: int) -> tuple[float, int]:
            at = datetime.fromtimestamp(now_ms / 1000, UTC)
            value = encode(TickRecord(partition=0, at=to_iso(at)))
            began = time.perf_counter()
            batch = engine.process([Record(topics.ticks, 0, 0, b"tick", value, now_ms)])
            elapsed = (time.perf_counter() - began) * 1000
            rows = rocksdict.WriteBatch(raw_mode=True)
            for key, _p, raw in batch.writes():
                if raw is None:
                    rows.delete(key.encode())
                else:
                    rows.put(key.encode(), raw)
            db.write(rows)
            engine.committed(batch)
            return elapsed, batch.decisions

        first = tick(due - 2)
        second = tick(due - 1)
        third = tick(due)
        return {
            "deleted_rows_ahead": dead,
            "first_tick_after_assignment_ms": first[0],
            "next_tick_nothing_due_ms": second[0],
            "tick_ms": third[0],
            "due": third[1],
        }
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)


def index_bytes(jobs: int = 5000, partitions: int = 4) -> dict[str, Any]:
    """The index's share of the table rows written per inbox event."""
    from stream.bench.workload import onboarding_mix
    from stream.engine.timers import DUE_PREFIX

    registry = Registry([load_playbook_file(PLAYBOOKS / "onboarding.yaml")])
    topics = Topics("bench.")
    store: dict[tuple[str, int], bytes] = {}

    def scan(p: int, low: str, high: str) -> list[tuple[str, bytes]]:
        return sorted((k, v) for (k, q), v in store.items() if q == p and low <= k < high)

    engine = Engine(
        topics,
        registry,
        lambda k, p: store.get((k, p)),
        partitions=partitions,
        scan=scan,
        wall_ms=lambda: 1_790_000_000_000,
    )
    offsets = [0] * partitions
    records = []
    for i, message in enumerate(onboarding_mix(jobs, seed=3)):
        key = message.key.encode()
        p = home_partition(key, partitions)
        value = encode(message.compact())
        records.append(Record(topics.inbox, p, offsets[p], key, value, 1_780_000_000_000 + 7 * i))
        offsets[p] += 1
    tally = {"index": [0, 0], "other": [0, 0]}
    for start in range(0, len(records), 500):
        batch = engine.process(records[start : start + 500])
        for key, p, raw in batch.writes():
            kind = "index" if key.startswith(DUE_PREFIX) else "other"
            tally[kind][0] += 1
            tally[kind][1] += len(key.encode()) + (len(raw) if raw else 0)
            if raw is None:
                store.pop((key, p), None)
            else:
                store[(key, p)] = raw
        engine.committed(batch)
    events = len(records)
    return {
        "events": events,
        "index_rows_per_event": tally["index"][0] / events,
        "index_bytes_per_event": tally["index"][1] / events,
        "other_rows_per_event": tally["other"][0] / events,
        "other_bytes_per_event": tally["other"][1] / events,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--code", choices=["old", "new"], required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--tick",
        type=int,
        default=0,
        metavar="PENDING",
        help="instead: stream.bench.micro.tick_cost_ms with PENDING timers, --due due",
    )
    parser.add_argument("--tombstones", type=int, default=0, metavar="N")
    parser.add_argument("--bytes", action="store_true")
    args = parser.parse_args()
    if args.tombstones:
        print(json.dumps(tombstones(args.tombstones, args.due)))
        return
    if args.bytes:
        print(json.dumps(index_bytes()))
        return
    if args.tick:
        from stream.bench.micro import tick_cost_ms

        ms = tick_cost_ms(PLAYBOOKS, args.tick, args.due)
        print(json.dumps({"code": args.code, "pending": args.tick, "due": args.due, "tick_ms": ms}))
        return
    registry = Registry([load_playbook_file(PLAYBOOKS / "onboarding.yaml")])
    topics = Topics("bench.")
    workdir = Path(tempfile.mkdtemp(prefix="lemongraph-due-index-"))
    out: dict[str, Any] = {"code": args.code, "jobs": args.jobs, "due": args.due}
    try:
        app = faust.App("due-bench", datadir=str(workdir), store="rocksdb://", web_enabled=False)
        table = JobTable(
            app.Table("jobstate", partitions=PARTITIONS, key_type=bytes, value_type=bytes)
        )
        began = time.perf_counter()
        fill(table, registry, args.jobs, args.due)
        out["fill_s"] = time.perf_counter() - began
        if args.code == "new":
            from stream.engine.timers import INDEX_MARK

            engine = Engine(topics, registry, table.get, partitions=PARTITIONS, scan=table.scan)
            began = time.perf_counter()
            for p in range(PARTITIONS):
                table.write(engine.index_rows(p, table.partition_items(p)), {})
            out["index_once_s"] = time.perf_counter() - began
        for p in range(PARTITIONS):  # on disk, not in the memtable: as after a restart
            table._db(p).flush()
            table._db(p).compact_range(None, None)
        rss_before = _rss_mb()
        began = time.perf_counter()
        engine = Engine(
            topics,
            registry,
            table.get,
            partitions=PARTITIONS,
            **({"scan": table.scan} if args.code == "new" else {}),
        )
        if args.code == "old":
            # What JobTable.items() reads in a worker (Faust's visible rows of
            # the partitions assigned to it).
            store = table.table.data
            rows = (
                (key.decode(), bytes(value))
                for p in range(PARTITIONS)
                for key, value in store._visible_items(table._db(p))
            )
            waiting = engine.rebuild_timers(rows)  # type: ignore[attr-defined]
            out["waiting"] = waiting
        else:
            engine.assigned()
            marks = [table.get(INDEX_MARK, p) is not None for p in range(PARTITIONS)]
            assert all(marks), marks
        assigned = time.perf_counter() - began
        decisions, first = first_tick(engine, topics, table)
        out["assignment_s"] = assigned
        out["recovery_s"] = assigned + first
        out["first_tick_all_partitions_s"] = time.perf_counter() - began - assigned
        out["decisions"] = decisions
        out["rss_mb"] = _rss_mb()
        out["rss_growth_mb"] = _rss_mb() - rss_before
        assert decisions == args.due, (decisions, args.due)
        if args.code == "new":
            # A tick with nothing due, after the due rows were deleted (RocksDB
            # tombstones at the head of the range until compaction).
            at = T0 + timedelta(seconds=2)
            samples = []
            for p in range(PARTITIONS):
                value = encode(TickRecord(partition=p, at=to_iso(at)))
                record = Record(topics.ticks, p, 1, b"tick", value, int(at.timestamp() * 1000))
                t = time.perf_counter()
                engine.process([record])
                samples.append(time.perf_counter() - t)
            out["idle_tick_ms"] = 1000 * max(samples)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")


if __name__ == "__main__":
    main()
