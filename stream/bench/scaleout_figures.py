"""What the scale-out run measures with (``ScaleOutPlan``: the full run and
``--quick``) and what it measured (``ScaleOutFigures``, ``--json``'s
``scale_out``), and the lines ``lemongraph bench --scale-out`` prints
(``stream/bench/scaleout.py`` runs it; benchmarks/README.md, "Scale-out").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from stream.bench.rebalance import RebalancePause

__all__ = ["ScaleOutFigures", "ScaleOutPlan", "render_scale_out", "scale_out_json"]


@dataclass(frozen=True)
class ScaleOutPlan:
    """What the scale-out run measures with."""

    quick: bool = False
    partitions: int = 8
    workers: int = 4
    #: The steady load: inbox records per second, for so many seconds.
    rate: float = 300.0
    seconds: float = 60.0
    #: Each kill: (seconds into the load, index of the worker SIGKILLed); the
    #: worker is started again ``restart_after`` seconds later, on its data folder.
    #: Longer than a kill's pause (the session, 6 s, and the re-join), so that
    #: the restart's rebalance does not cut it short.
    kills: tuple[tuple[float, int], ...] = ((12.0, 1), (34.0, 2))
    restart_after: float = 12.0
    #: Seconds to let the group settle once every partition has decided.
    settle_seconds: float = 8.0
    #: A partition that made no decision this long after a rebalance paused.
    pause_floor_s: float = 1.0
    #: Jobs per slice of the onboarding mix (each slice's jobs interleaved).
    slice_jobs: int = 200
    #: CPU per event with two workers against one: rounds of each, alternating.
    cpu_rounds: int = 3
    cpu_rate: float = 1000.0
    cpu_seconds: float = 20.0
    #: Seconds the workers' idle CPU is measured before each CPU load.
    idle_seconds: float = 3.0

    @classmethod
    def for_run(cls, quick: bool) -> ScaleOutPlan:
        if not quick:
            return cls()
        return cls(
            quick=True,
            rate=150.0,
            seconds=45.0,
            # Each kill 8 s after the last restart: its join's rebalance is over.
            kills=((5.0, 1), (25.0, 2)),
            # Past the session (6 s) and the re-join, so the kill's pause ends first.
            restart_after=12.0,
            settle_seconds=4.0,
            cpu_rounds=1,
            cpu_rate=500.0,
            cpu_seconds=6.0,
            idle_seconds=2.0,
        )


@dataclass
class ScaleOutFigures:
    """Every figure of the scale-out run (``--json``'s ``scale_out``)."""

    #: Inbox records produced, those that were to make a decision, and the rate
    #: they were produced at (events/s).
    events: int = 0
    expected_decisions: int = 0
    rate_achieved: float = 0.0
    #: Records without a decision, and records decided two different ways
    #: ("p<partition>@<offset> <job key>", the first 20): both must be 0.
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)
    decided_differently: int = 0
    decided_differently_examples: list[str] = field(default_factory=list)
    #: Distinct decisions, and equal copies beyond the first (re-decided after a kill).
    decisions: int = 0
    redelivered_decisions: int = 0
    #: Task records by (task_id, type): distinct, equal copies, different ones.
    tasks: int = 0
    redelivered_tasks: int = 0
    tasks_differing: int = 0
    #: Each kill and restart, with each partition's pause (s).
    rebalances: list[RebalancePause] = field(default_factory=list)
    max_pause_s: float = 0.0
    #: Event → decision (its record's timestamp to its first decision's broker
    #: timestamp), over the whole run, kills included (ms).
    p50_latency_ms: float = 0.0
    p99_latency_ms: float = 0.0
    max_latency_ms: float = 0.0
    #: The machine's load average (1, 5, 15 min) before and after the run.
    load_average_before: list[float] = field(default_factory=list)
    load_average_after: list[float] = field(default_factory=list)
    #: Worker CPU µs per decided event with one worker and with two (each
    #: round, and their medians), and their ratio (two / one).
    cpu_us_per_event_1_worker_rounds: list[float] = field(default_factory=list)
    cpu_us_per_event_2_workers_rounds: list[float] = field(default_factory=list)
    cpu_us_per_event_1_worker: float = 0.0
    cpu_us_per_event_2_workers: float = 0.0
    cpu_2_vs_1: float = 0.0
    #: The same beyond what the workers spend idle (their idle rate, measured
    #: just before, times the leg's time): the work of the events themselves.
    cpu_net_us_per_event_1_worker_rounds: list[float] = field(default_factory=list)
    cpu_net_us_per_event_2_workers_rounds: list[float] = field(default_factory=list)
    cpu_net_us_per_event_1_worker: float = 0.0
    cpu_net_us_per_event_2_workers: float = 0.0
    cpu_net_2_vs_1: float = 0.0
    #: A worker's CPU idle in its group (ms per second; median over the rounds).
    idle_cpu_ms_per_s_per_worker: float = 0.0
    core: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Something lost, or decided (or a task written) two different ways."""
        return bool(self.lost or self.decided_differently or self.tasks_differing)


def render_scale_out(f: ScaleOutFigures) -> str:
    """The scale-out figures as lines of text, what must hold beside them."""
    p = f.parameters
    lines = [
        f"scale-out: {p.get('workers')} workers, {p.get('partitions')} partitions, "
        f"{f.events:,} inbox records at {f.rate_achieved:,.0f}/s "
        f"({f.expected_decisions:,} to decide); load average {_load(f.load_average_before)} "
        f"before, {_load(f.load_average_after)} after",
        f"  lost (no decision): {f.lost:,}  (must be 0)"
        + (f": {', '.join(f.lost_examples[:5])}" if f.lost else ""),
        f"  decided two different ways: {f.decided_differently:,}  (must be 0)"
        + (f": {', '.join(f.decided_differently_examples[:5])}" if f.decided_differently else ""),
        f"  decisions: {f.decisions:,}, and {f.redelivered_decisions:,} equal copies re-decided "
        "after a kill",
        f"  tasks by (task_id, type): {f.tasks:,}, {f.redelivered_tasks:,} equal copies, "
        f"{f.tasks_differing:,} different  (must be 0)",
    ]
    for r in f.rebalances:
        paused = (
            ", ".join(
                f"p{n} {'>=' if n in r.silent else ''}{r.by_partition[n]:.1f}s" for n in r.paused
            )
            or "none"
        )
        lines.append(
            f"  {r.what} at {r.at_s:.1f}s: longest pause {r.max_s:.1f}s; paused "
            f"(>= {p.get('pause_floor_s')}s): {paused}"
        )
    lines += [
        f"  event -> decision: p50 {f.p50_latency_ms:,.0f} ms, p99 {f.p99_latency_ms:,.0f} ms, "
        f"max {f.max_latency_ms:,.0f} ms (the kills included)",
        f"  worker CPU per event: 1 worker {f.cpu_us_per_event_1_worker:,.0f} µs "
        f"({_rounds(f.cpu_us_per_event_1_worker_rounds)}), 2 workers "
        f"{f.cpu_us_per_event_2_workers:,.0f} µs ({_rounds(f.cpu_us_per_event_2_workers_rounds)}): "
        f"{f.cpu_2_vs_1:.2f}x at {p.get('cpu_rate'):,}/s",
        f"  beyond idle: 1 worker {f.cpu_net_us_per_event_1_worker:,.0f} µs "
        f"({_rounds(f.cpu_net_us_per_event_1_worker_rounds)}), 2 workers "
        f"{f.cpu_net_us_per_event_2_workers:,.0f} µs "
        f"({_rounds(f.cpu_net_us_per_event_2_workers_rounds)}): {f.cpu_net_2_vs_1:.2f}x; "
        f"a worker idle {f.idle_cpu_ms_per_s_per_worker:.1f} ms of CPU per second",
        f.core,
    ]
    return "\n".join(lines)


def _load(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def _rounds(values: Sequence[float]) -> str:
    return " / ".join(f"{v:,.0f}" for v in values)


def scale_out_json(f: ScaleOutFigures) -> bytes:
    """The figures as one JSON object: ``{"scale_out": {...}}``."""
    # A pause's partitions are numbers: JSON's keys are text ("0", "1", ...).
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    return orjson.dumps({"scale_out": asdict(f)}, option=options)
