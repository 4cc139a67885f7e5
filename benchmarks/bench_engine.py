"""The engine's CPU and bytes per inbox event, in-process (issue 35).

    .venv/bin/python benchmarks/bench_engine.py                # 5,000 jobs, 5 rounds
    .venv/bin/python benchmarks/bench_engine.py --quick        # 300 jobs, 2 rounds
    .venv/bin/python benchmarks/bench_engine.py --json         # one JSON object
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/bench_engine.py

``Engine.process`` (stream/engine/engine.py) on the bench's onboarding mix
(``stream.bench.workload.onboarding_mix``, what ``lemongraph bench``'s burst
produces: about 3.5 inbox records per job), on the home partitions of 4, in
batches of 5,000 as a worker's full batches come, over a dict standing in for
the table, committed as a worker commits (``Batch.writes`` applied, then
``Engine.committed``). Timed with ``time.process_time`` (CPU time of this
process, so another process's load moves it less than wall time), with the
worker's garbage-collector settings (``stream.engine.worker.tune_gc``). Each
round is a fresh engine and table; the figures are medians of the rounds.

Bytes: every output's key + value + header names and values by topic (what a
consumer's network and a broker's disk see before compression), and the rows
the table writes (its changelog, ``engine-jobstate-changelog``), divided by the
inbox records. The workload is generated from ``--seed``, so runs are
comparable; run it with ``PYTHONPATH`` at another checkout (its compiled
modules built) for a baseline in the same session (benchmarks/README.md,
"Bytes per event").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from stream.bench.workload import onboarding_mix
from stream.engine.engine import Engine, Record
from stream.engine.registry import Registry
from stream.engine.worker import tune_gc
from stream.runtime.files import load_playbook_file
from stream.runtime.partitions import home_partition
from topics import Topics

PARTITIONS = 4
T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOPICS = Topics("bench.")
#: The table's changelog, by the name the bench reports it under.
CHANGELOG = "engine-jobstate-changelog"


def inbox_records(jobs: int, seed: int) -> list[Record]:
    """The mix as inbox records on their keys' home partitions, a millisecond apart."""
    offsets = [0] * PARTITIONS
    out = []
    for i, message in enumerate(onboarding_mix(jobs, seed=seed)):
        key = message.key.encode()
        p = home_partition(key, PARTITIONS)
        stamp = int((T0 + timedelta(milliseconds=i)).timestamp() * 1000)
        value = orjson.dumps(message.compact())
        out.append(Record(TOPICS.inbox, p, offsets[p], key, value, stamp, []))
        offsets[p] += 1
    return out


def one_round(records: list[Record], batch_size: int) -> dict[str, Any]:
    """One fresh engine over ``records``: CPU seconds of each part, bytes by topic."""
    registry = Registry([load_playbook_file(EXAMPLES / "onboarding.yaml")])
    store: dict[tuple[str, int], bytes] = {}
    wall = int((T0 + timedelta(days=1)).timestamp() * 1000)
    engine = Engine(
        TOPICS,
        registry,
        lambda key, partition: store.get((key, partition)),
        partitions=PARTITIONS,
        wall_ms=lambda: wall,
    )
    produced: Counter[str] = Counter()
    count: Counter[str] = Counter()
    process = writes = committed = 0.0
    decisions = 0
    clock = time.process_time
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        began = clock()
        batch = engine.process(chunk)
        process += clock() - began
        began = clock()
        rows = batch.writes()
        writes += clock() - began
        for key, partition, raw in rows:
            if raw is None:
                store.pop((key, partition), None)
            else:
                store[(key, partition)] = raw
            produced[CHANGELOG] += len(key.encode()) + len(raw or b"")
            count[CHANGELOG] += 1
        began = clock()
        engine.committed(batch)
        committed += clock() - began
        decisions += batch.decisions
        for output in batch.outputs:
            name = output.topic[len(TOPICS.prefix) :]
            size = len(output.key or b"") + len(output.value or b"")
            size += sum(len(k.encode()) + len(v) for k, v in output.headers or ())
            produced[name] += size
            count[name] += 1
    return {
        "process_s": process,
        "writes_s": writes,
        "committed_s": committed,
        "decisions": decisions,
        "bytes": dict(produced),
        "records": dict(count),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--jobs", type=int, help="onboarding jobs (default 5000; quick 300)")
    parser.add_argument("--rounds", type=int, help="rounds (default 5; quick 2)")
    parser.add_argument("--batch", type=int, default=5000, help="records per batch")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    jobs = args.jobs or (300 if args.quick else 5000)
    rounds = args.rounds or (2 if args.quick else 5)
    records = inbox_records(jobs, args.seed)
    tune_gc()
    results = [one_round(records, args.batch) for _ in range(rounds)]
    n = len(records)
    us = {
        part: [1e6 * r[f"{part}_s"] / n for r in results]
        for part in ("process", "writes", "committed")
    }
    last = results[-1]
    by_topic = {t: b / n for t, b in sorted(last["bytes"].items())}
    out = {
        "code": os.environ.get("PYTHONPATH", "") or "this checkout",
        "jobs": jobs,
        "inbox_records": n,
        "rounds": rounds,
        "batch": args.batch,
        "load_average": os.getloadavg(),
        "process_us_per_event": statistics.median(us["process"]),
        "process_us_per_event_rounds": us["process"],
        "writes_us_per_event": statistics.median(us["writes"]),
        "committed_us_per_event": statistics.median(us["committed"]),
        "decisions": last["decisions"],
        "bytes_per_event": sum(by_topic.values()),
        "bytes_per_event_by_topic": by_topic,
        "records_per_event_by_topic": {t: c / n for t, c in sorted(last["records"].items())},
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"bench_engine: Engine.process in-process; code: {out['code']}")
    print(
        f"parameters: jobs={jobs} inbox_records={n} rounds={rounds} batch={args.batch} "
        f"seed={args.seed} load_average={' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    rounds_text = " / ".join(f"{x:.1f}" for x in us["process"])
    print(f"Engine.process µs/event (CPU) = {out['process_us_per_event']:.1f} ({rounds_text})")
    print(f"Batch.writes µs/event (CPU) = {out['writes_us_per_event']:.1f}")
    print(f"Engine.committed µs/event (CPU) = {out['committed_us_per_event']:.1f}")
    print(f"decisions = {out['decisions']}")
    for topic, size in by_topic.items():
        per = out["records_per_event_by_topic"][topic]
        print(f"bytes/event {topic} = {size:,.0f} ({per:.3f} records/event)")
    print(f"bytes/event all = {out['bytes_per_event']:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
