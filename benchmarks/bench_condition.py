"""Benchmark of the condition language (docs/conditions.md). Not a test: it prints figures.

    python benchmarks/bench_condition.py            # full run
    python benchmarks/bench_condition.py --quick    # a few seconds (also LEMONGRAPH_BENCH_QUICK=1)

It measures
1. evaluations per second of a five-atom condition over a realistic fact list
   (``Condition.evaluate``, which counts every fact afresh), open and closed world;
2. the cost of feeding ONE occurrence to a ``Monitor`` and reading its verdict,
   after 10 and after 10,000 earlier occurrences, and the ratio of the two. A
   monitor keeps a count and a few ids per atom, so the ratio should stay near 1.

Each figure is the median of several repeats, timed with ``time.perf_counter``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

from compiler import Condition, Fact, Monitor, compile_condition

CONDITION = (
    '(order:total >= 500 OR plan IN ["pro", "enterprise"]) AND NOT cancelled'
    ' AND COUNT(reminder_sent) < 3 AND status == "won" WITHIN 24h'
)


def realistic_facts(n: int) -> list[Fact]:
    """``n`` occurrences a sales job might see: mostly noise the condition does not
    read, some orders, plan changes, two reminders and status changes (won at 187)."""
    facts: list[Fact] = []
    for i in range(n):
        kind = i % 20
        if kind == 3:
            facts.append(Fact("order", properties={"total": 50 + 37 * i % 900}, id=f"o{i}"))
        elif kind == 7:
            facts.append(Fact("status", "won" if i == 187 else "open", id=f"s{i}"))
        elif kind == 11 and i < 40:
            facts.append(Fact("reminder_sent", id=f"r{i}"))
        elif kind == 13:
            facts.append(Fact("plan", "free" if i % 3 else "pro", id=f"p{i}"))
        else:
            facts.append(Fact("page_view", properties={"path": f"/p/{i % 17}"}, id=f"v{i}"))
    return facts


def median_seconds(run: Callable[[], None], repeats: int) -> float:
    """The median wall time of ``run`` over ``repeats`` runs (after one warm-up)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_evaluate(cond: Condition, facts: list[Fact], loops: int, repeats: int) -> None:
    for closed in (False, True):

        def run(closed: bool = closed) -> None:
            for _ in range(loops):
                cond.evaluate(facts, closed=closed)

        per_eval = median_seconds(run, repeats) / loops
        world = "closed" if closed else "open"
        verdict = cond.evaluate(facts, closed=closed).value
        print(
            f"evaluate ({world} world, {len(facts)} facts, verdict {verdict}): "
            f"{1 / per_eval:,.0f} evaluations/s ({per_eval * 1e6:.1f} µs each)"
        )


def bench_feed(cond: Condition, histories: list[int], feeds: int, repeats: int) -> list[float]:
    """Median µs to feed one occurrence to a monitor that has already seen ``n``
    occurrences, and read its verdict, for each ``n`` in ``histories``. The
    histories are timed in alternation, so that a busy machine slows all alike."""
    bases = []
    for earlier in histories:
        base = cond.monitor()
        for fact in realistic_facts(earlier):
            base.feed(fact)
        bases.append(base)
    occurrence = Fact("order", properties={"total": 650}, id="new")
    times: list[list[float]] = [[] for _ in histories]
    for _ in range(repeats + 1):
        for base, samples in zip(bases, times, strict=True):
            # one fresh copy per timed feed, so each feed really comes after `n`
            # earlier occurrences; copying happens outside the timed loop
            monitors = [Monitor(cond, dict(base.tallies)) for _ in range(feeds)]
            start = time.perf_counter()
            for monitor in monitors:
                monitor.feed(occurrence)
                monitor.verdict()
            samples.append((time.perf_counter() - start) / feeds)
    return [statistics.median(samples[1:]) * 1e6 for samples in times]  # [0]: warm-up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("LEMONGRAPH_BENCH_QUICK") == "1"

    n_facts = 200
    loops, repeats = (20, 3) if quick else (500, 7)
    feeds, feed_repeats = (200, 3) if quick else (20_000, 9)

    cond = compile_condition(CONDITION)
    facts = realistic_facts(n_facts)
    print(f"condition: {cond}")
    print(f"atoms: {len(cond.atoms)}")
    print(
        f"parameters: facts={n_facts} evaluations/repeat={loops} evaluate_repeats={repeats} "
        f"feeds/repeat={feeds} feed_repeats={feed_repeats} quick={quick} "
        f"python={sys.version.split()[0]}"
    )
    bench_evaluate(cond, facts, loops, repeats)
    after_10, after_10k = bench_feed(cond, [10, 10_000], feeds, feed_repeats)
    print(f"monitor feed + verdict after 10 earlier occurrences: {after_10:.2f} µs")
    print(f"monitor feed + verdict after 10000 earlier occurrences: {after_10k:.2f} µs")
    print(f"ratio (after 10000 / after 10): {after_10k / after_10:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
