"""Benchmark the pure decision core, ``JobGraph.next`` (docs/decisions.md).

Two measurements, both in-process and without I/O (no Kafka, no RocksDB):

1. **onboarding** — ``examples/onboarding.yaml`` driven by a realistic mix over many
   jobs: a start, world and tool events that move the job (ID upload, self-service or
   a booked call, activation), agent chatter, unrelated events, redelivered
   duplicates and daily ticks from the tick topic. Inputs of all jobs are
   interleaved in time order, as one partition would see them. Prints decisions per
   second (also with the state serialised after every decision, as the shell does)
   and the size of job state.
2. **open milestones** — the cost of one decision as the number of open milestones
   grows: a generated playbook with N parallel roots ``ping AND NOT stop_i``, fed
   ``ping`` events that every root reads but that settle none, so all N stay open
   (every open monitor is evaluated on every input). Prints µs per decision, the
   cost of the start (opening N milestones) and the state size for each N.
3. **count evidence** — the state size of one open ``COUNT(ping) >= 1000000`` before
   and after the ``ping`` events: such a tally keeps an occurrence id per match, up
   to the bound, so its state grows with the job's history.

Every figure is the median of several repeats timed with ``time.perf_counter``.
The workload is generated up front from a fixed seed, so runs are comparable.

    python benchmarks/bench_core.py            # full run
    python benchmarks/bench_core.py --quick    # smoke run (a few seconds)
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from compiler import Event, Input, JobGraph, JobState, Start, Tick, compile_playbook
from stream.runtime.files import load_playbook_file

ROOT = Path(__file__).resolve().parent.parent
ONBOARDING = ROOT / "examples" / "onboarding.yaml"
BASE = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCALES = (1, 10, 50, 200)

Workload = list[tuple[datetime, str, Input]]


# -- 1. onboarding: a realistic mix over many jobs --------------------------------------


def onboarding_workload(jobs: int, seed: int) -> Workload:
    """Every input of ``jobs`` onboarding jobs, interleaved in time order."""
    rng = random.Random(seed)
    out: Workload = []
    for j in range(jobs):
        key = f"job-{j:06d}"
        out.extend((at, key, inp) for at, inp in _one_job(rng, key, j))
    out.sort(key=lambda row: (row[0], row[1]))  # stable: per job, the order generated
    return out


def _one_job(rng: random.Random, key: str, j: int) -> list[tuple[datetime, Input]]:
    start = BASE + timedelta(minutes=rng.randrange(0, 7 * 24 * 60))
    rows: list[tuple[datetime, Input]] = [(start, Start(key, "onboarding", {"n": j}))]

    def event(at: datetime, action: str, source: str = "world", **kw: Any) -> None:
        n = len(rows)
        ev = Event(action, source=source, idempotency_key=f"{key}:{n}", id=f"{key}:{n}", **kw)  # type: ignore[arg-type]
        rows.append((at, ev))
        if source != "agent" and rng.random() < 0.05:  # a redelivery
            rows.append((at + timedelta(seconds=rng.randrange(1, 120)), ev))

    t = start
    for _ in range(rng.randrange(1, 4)):  # the agent talks to the customer
        event(t + timedelta(minutes=rng.randrange(1, 600)), "message_sent", "agent")
    for _ in range(rng.randrange(0, 3)):  # noise the playbook does not read
        event(t + timedelta(hours=rng.randrange(1, 96)), "email_opened")
    if rng.random() < 0.85:
        t += timedelta(minutes=rng.randrange(30, 6 * 24 * 60))
        event(t, "id_uploaded", properties={"kind": "passport"})
        if rng.random() < 0.1:  # an agent claims progress it cannot prove
            event(t, "self_service_completed", "agent")
        if rng.random() < 0.5:
            t += timedelta(minutes=rng.randrange(60, 2 * 24 * 60))
            event(t, "self_service_completed")
        else:
            t += timedelta(minutes=rng.randrange(30, 24 * 60))
            event(t, "meeting_scheduled", "tool", properties={"room": "A"})
            if rng.random() < 0.1:
                event(t + timedelta(hours=rng.randrange(1, 48)), "meeting_cancelled")
            t += timedelta(days=3)  # NOT meeting_cancelled settles when 3d are over
        if rng.random() < 0.9:
            event(t + timedelta(minutes=rng.randrange(10, 24 * 60)), "account_activated", "tool")
    # the tick topic: one tick a day for two weeks (most find nothing due), then a far one
    rows.extend(
        (start + timedelta(days=k, minutes=rng.randrange(0, 60)), Tick()) for k in range(1, 15)
    )
    rows.append((start + timedelta(days=40), Tick()))
    return rows


def run_workload(
    graph: JobGraph, workload: Workload, serialise: bool
) -> tuple[float, dict[str, JobState | None], Counter[str]]:
    """Decide every input; return the elapsed seconds, the final states and outcomes."""
    states: dict[str, JobState | None] = {}
    outcomes: Counter[str] = Counter()
    nxt = graph.next
    begin = time.perf_counter()
    if serialise:
        for now, key, inp in workload:
            step = nxt(states.get(key), now, inp)
            states[key] = step.state
            if step.state is not None:
                step.state.to_bytes()
    else:
        for now, key, inp in workload:
            states[key] = nxt(states.get(key), now, inp).state
    elapsed = time.perf_counter() - begin
    # outcomes, outside the timed loop
    again: dict[str, JobState | None] = {}
    for now, key, inp in workload:
        step = nxt(again.get(key), now, inp)
        again[key] = step.state
        outcomes[f"{type(inp).__name__.lower()}:{step.outcome}"] += 1
    return elapsed, states, outcomes


def bench_onboarding(jobs: int, repeats: int, seed: int) -> None:
    playbook = load_playbook_file(ONBOARDING)
    graph = JobGraph(playbook)
    workload = onboarding_workload(jobs, seed)
    decisions = len(workload)
    plain: list[float] = []
    persisted: list[float] = []
    states: dict[str, JobState | None] = {}
    outcomes: Counter[str] = Counter()
    for _ in range(repeats):
        elapsed, states, outcomes = run_workload(graph, workload, serialise=False)
        plain.append(elapsed)
        elapsed, _, _ = run_workload(graph, workload, serialise=True)
        persisted.append(elapsed)
    sizes = sorted(len(s.to_bytes()) for s in states.values() if s is not None)
    status = Counter(s.status for s in states.values() if s is not None)
    t_plain, t_persisted = statistics.median(plain), statistics.median(persisted)
    print(f"onboarding: jobs={jobs} decisions={decisions} repeats={repeats}")
    print(f"onboarding: input mix: {_fmt_counter(outcomes)}")
    print(f"onboarding: final job status: {_fmt_counter(status)}")
    print(f"onboarding: decisions/s = {decisions / t_plain:,.0f}")
    print(f"onboarding: µs/decision = {1e6 * t_plain / decisions:.1f}")
    print(f"onboarding: decisions/s with state serialised = {decisions / t_persisted:,.0f}")
    print(f"onboarding: state bytes median = {statistics.median(sizes):.0f}, max = {sizes[-1]}")


# -- 2. cost against the number of open milestones --------------------------------------


def wide_playbook(n: int) -> Any:
    """N parallel roots that all read ``ping`` and stay open: ``ping`` is TRUE, but
    each root also waits for its own ``stop_i``, which never comes."""
    return compile_playbook(
        {
            "key": f"wide-{n}",
            "version": 1,
            "milestones": [
                {
                    "id": f"r{i}",
                    "instructions": f"root {i}",
                    "condition": f"ping AND NOT stop_{i} WITHIN 180d",
                }
                for i in range(n)
            ],
        }
    )


def _pings(events: int) -> list[tuple[datetime, Event]]:
    # no idempotency key: the remembered keys would grow the state with every event
    return [(BASE + timedelta(minutes=k + 1), Event("ping", id=f"p{k}")) for k in range(events)]


def bench_open_milestones(n: int, events: int, repeats: int) -> None:
    playbook = wide_playbook(n)
    graph = JobGraph(playbook)
    start = Start("wide", playbook.key)
    pings = _pings(events)
    per_event: list[float] = []
    per_start: list[float] = []
    state: JobState | None = None
    for _ in range(repeats):
        begin = time.perf_counter()
        state = graph.next(None, BASE, start).state
        per_start.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        for now, ev in pings:
            state = graph.next(state, now, ev).state
        per_event.append((time.perf_counter() - begin) / events)
    assert state is not None
    still_open = sum(1 for m in state.milestones.values() if m.status == "open")
    assert still_open == n, f"expected {n} open milestones, found {still_open}"
    print(
        f"open milestones N={n:<4} µs/decision = {1e6 * statistics.median(per_event):9.1f}   "
        f"start µs = {1e6 * statistics.median(per_start):9.1f}   "
        f"state bytes = {len(state.to_bytes())}"
    )


def bench_count_evidence(events: int) -> None:
    """State size of one open ``COUNT(ping) >= 1000000``: its tally keeps an id per
    matching event up to the bound, and the open milestone's explanation repeats them."""
    graph = JobGraph(
        compile_playbook(
            {"key": "count", "version": 1, "milestones": [{"id": "c", "condition": _BIG}]}
        )
    )
    state = graph.next(None, BASE, Start("count", "count")).state
    sizes = [len(state.to_bytes())] if state is not None else []
    for now, ev in _pings(events):
        state = graph.next(state, now, ev).state
    assert state is not None
    sizes.append(len(state.to_bytes()))
    print(
        f"count evidence: {_BIG!r} state bytes after 0 events = {sizes[0]}, "
        f"after {events} events = {sizes[-1]}"
    )


_BIG = "COUNT(ping) >= 1000000"


# -- main -------------------------------------------------------------------------------


def _fmt_counter(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counter.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--jobs", type=int, help="onboarding jobs (default 2000; quick 40)")
    parser.add_argument("--events", type=int, help="events per N (default 300; quick 20)")
    parser.add_argument("--repeats", type=int, help="repeats per figure (default 5; quick 2)")
    parser.add_argument("--seed", type=int, default=7, help="workload seed (default 7)")
    args = parser.parse_args(argv)
    jobs = args.jobs or (40 if args.quick else 2000)
    events = args.events or (20 if args.quick else 300)
    repeats = args.repeats or (2 if args.quick else 5)

    print("bench_core: the pure decision core, JobGraph.next (no I/O)")
    print(
        f"parameters: quick={args.quick} jobs={jobs} events_per_n={events} "
        f"repeats={repeats} seed={args.seed} scales={','.join(map(str, SCALES))} "
        f"python={platform.python_version()} ({platform.python_implementation()}) "
        f"machine={platform.machine()}"
    )
    print("figures: median of repeats, time.perf_counter")
    bench_onboarding(jobs, repeats, args.seed)
    for n in SCALES:
        bench_open_milestones(n, events, repeats)
    bench_count_evidence(events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
