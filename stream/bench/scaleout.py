"""``lemongraph bench --scale-out``: scale-out proved, not assumed (issue 35).

On the bench's broker (``Cluster``), an inbox of ``partitions`` partitions and
``workers`` real worker processes in one group (``python -m stream worker``,
each with its own data folder) take a steady load: the onboarding mix at
``rate`` events/s for ``seconds``, each inbox record known by where the broker
put it (partition, offset: a decision's ``origin``). During it, at set instants,
workers are SIGKILLed and started again on their data folders. Then the
``decisions`` and ``tasks`` topics are read back and judged by
``stream/bench/rebalance.py``: every record decided (nothing lost), no record
decided two different ways (an equal copy is a re-delivery, counted apart:
docs/kafka.md, "Duplicates"), each task once by id, each rebalance's pause per
partition, the event→decision latency beside the load average.

Then the CPU per event with two workers against one, through one group on the
same partitions: a steady load (``cpu_rate`` for ``cpu_seconds``) through fresh
topics and fresh workers, ``cpu_rounds`` rounds of each, alternating which goes
first; the workers' CPU (user + system, /proc) from before the load to its last
decision, per decision; and their CPU idle beforehand, per second. On 2 cores
throughput cannot scale; the CPU per event says whether coordination costs.
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from stream.bench.cluster import Cluster, bench_site, produce
from stream.bench.figures import Parameters
from stream.bench.rebalance import (
    Decided,
    Rebalance,
    Sent,
    check_decisions,
    check_tasks,
    latencies_ms,
    pauses,
    percentile,
)
from stream.bench.scaleout_figures import ScaleOutFigures, ScaleOutPlan
from stream.bench.workload import decides, onboarding_mix
from stream.runtime import native
from stream.runtime.errors import BenchError
from stream.runtime.kafka import producer, read_topic
from stream.runtime.partitions import home_partition
from stream.runtime.processes import ChildProcess, collector_paused, cpu_s
from topics import InboxEvent, JobStart, Topics, encode

__all__ = ["ScaleOut", "read_decisions", "read_tasks", "run_scale_out", "steady_load", "steady_mix"]


async def steady_load(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes, bytes]],
    rate: float,
    actions: Sequence[tuple[float, Callable[[], None]]] = (),
) -> list[tuple[int, int, int]]:
    """Produce ``records`` at ``rate`` per second, and run each action at its
    instant (seconds from the first record); returns each record's (partition,
    offset, timestamp ms). No linger, no waiting for each ack (that would hold
    the rate below ``rate``)."""
    todo = sorted(actions, key=lambda a: a[0])
    async with producer(bootstrap, linger_ms=0) as client:
        started = time.monotonic()
        pending = []
        for i, (key, value) in enumerate(records):
            target = started + i / rate
            while todo and started + todo[0][0] <= target:
                at, act = todo.pop(0)
                await asyncio.sleep(max(0.0, started + at - time.monotonic()))
                act()
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(await client.send(topic, value, key=key))
        for at, act in todo:
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            act()
        done = [await p for p in pending]
    return [(m.partition, m.offset, m.timestamp) for m in done]


def warm_up_keys(partitions: int) -> list[str]:
    """A job key on each partition, in partition order."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        key = f"warm-up-{i}"
        found.setdefault(home_partition(key.encode(), partitions), key)
        i += 1
    return [found[p] for p in sorted(found)]


def steady_mix(
    count: int, slice_jobs: int, prefix: str
) -> tuple[list[tuple[bytes, bytes]], list[bool]]:
    """``count`` inbox records of the onboarding mix, ``slice_jobs`` jobs at a
    time (so that starts and later events alternate all along), and whether
    each is to make a decision."""
    mix: list[JobStart | InboxEvent] = []
    n = 0
    while len(mix) < count:
        mix += onboarding_mix(slice_jobs, seed=n + 1, prefix=f"{prefix}{n:03d}")
        n += 1
    mix = mix[:count]
    return [(m.key.encode(), encode(m.compact())) for m in mix], decides(mix)


async def read_decisions(
    bootstrap: str, topic: str, inbox: str
) -> tuple[list[Decided], dict[int, list[int]]]:
    """The decisions of inbox records, and every decision's broker timestamp by
    partition (sorted)."""
    decided: list[Decided] = []
    stamps: dict[int, list[int]] = {}
    async for r in read_topic(bootstrap, topic, idle=0.5):
        stamps.setdefault(r.partition, []).append(r.timestamp_ms)
        value = orjson.loads(r.value or b"{}")
        origin = value.get("origin") or {}
        if origin.get("topic") != inbox:
            continue
        fwd = origin.get("forwarded")
        decided.append(
            Decided(
                value["job_key"],
                origin["partition"],
                origin["offset"],
                r.timestamp_ms,
                r.value or b"",
                (fwd["partition"], fwd["offset"]) if fwd else None,
            )
        )
    for each in stamps.values():
        each.sort()
    return decided, stamps


async def read_tasks(bootstrap: str, topic: str) -> list[tuple[str, str, bytes]]:
    """``(task_id, type, value)`` of every ``task.opened`` and ``task.closed``."""
    out: list[tuple[str, str, bytes]] = []
    async for r in read_topic(bootstrap, topic, idle=0.5):
        value = orjson.loads(r.value or b"{}")
        if value.get("type") in ("task.opened", "task.closed"):
            out.append((str(value["task_id"]), str(value["type"]), r.value or b""))
    return out


@dataclass(frozen=True)
class CpuLeg:
    """One CPU leg: the workers' CPU µs per decided event, the same beyond
    their idle rate over the leg's time, and one worker's idle CPU (ms/s)."""

    us_per_event: float
    net_us_per_event: float
    idle_ms_per_s: float


def _cpu(pids: Sequence[int]) -> float:
    return sum(cpu_s(pid) for pid in pids)


class ScaleOut(Cluster):
    """One scale-out run on the bench's broker."""

    def __init__(
        self,
        url: str,
        plan: ScaleOutPlan,
        say: Callable[[str], None],
        playbooks: Path,
        workdir: Path,
        broker_pid: int | None = None,
    ) -> None:
        super().__init__(url, Parameters.for_run(plan.quick), say, playbooks, workdir, broker_pid)
        self.plan = plan
        self.figures = ScaleOutFigures(parameters=asdict(plan))
        #: The kill run's workers by index (a restarted one takes its place).
        self.workers: list[ChildProcess] = []
        self.rebalances: list[Rebalance] = []

    def env(self, prefix: str, index: int) -> dict[str, str]:
        """Worker ``index``'s environment: its own data folder, the plan's partitions."""
        env = self.worker_env(prefix, self.workdir / f"{prefix.rstrip('.')}-{index}")
        env["LEMONGRAPH_PARTITIONS"] = str(self.plan.partitions)
        return env

    def start_group(self, prefix: str, count: int) -> list[ChildProcess]:
        """``count`` workers on the topics under ``prefix``, each partition's
        first decision made (every partition assigned), then let settle."""
        group = [self.start_worker(self.env(prefix, i)) for i in range(count)]
        try:
            for worker in group:
                worker.wait_for("ready", 120)
            keys = warm_up_keys(self.plan.partitions)
            starts = [JobStart(key=k, playbook_key="onboarding").compact() for k in keys]
            records = [(k.encode(), encode(s)) for k, s in zip(keys, starts, strict=True)]
            asyncio.run(produce(self.bootstrap, Topics(prefix).inbox, records))
            self.wait_decisions(Topics(prefix).decisions, len(records), 120)
            time.sleep(self.plan.settle_seconds)
        except BaseException:
            for worker in group:
                worker.kill()
            raise
        return group

    def kill(self, index: int) -> None:
        """SIGKILL worker ``index`` (a rebalance follows once its session ends)."""
        self.rebalances.append(Rebalance(f"kill worker {index}", int(time.time() * 1000)))
        self.workers[index].kill()
        self.say(f"scale-out: worker {index} SIGKILLed")

    def restart(self, prefix: str, index: int) -> None:
        """Start worker ``index`` again on its data folder (it joins the group)."""
        self.rebalances.append(Rebalance(f"restart worker {index}", int(time.time() * 1000)))
        self.workers[index] = self.start_worker(self.env(prefix, index))
        self.say(f"scale-out: worker {index} started again")

    def kill_run(self) -> None:
        """The steady load through ``workers`` workers, some killed and
        restarted during it; then every record's decisions judged."""
        plan, f = self.plan, self.figures
        prefix = f"bench-{self.run_id}-scaleout."
        topics = Topics(prefix)
        records, deciding = steady_mix(int(plan.rate * plan.seconds), plan.slice_jobs, "so")
        actions: list[tuple[float, Callable[[], None]]] = []
        for at, index in plan.kills:
            actions.append((at, functools.partial(self.kill, index)))
            actions.append(
                (at + plan.restart_after, functools.partial(self.restart, prefix, index))
            )
        self.workers = self.start_group(prefix, plan.workers)
        try:
            f.load_average_before = [round(x, 2) for x in os.getloadavg()]
            self.say(
                f"scale-out: {len(records):,} records at {plan.rate:,.0f}/s through "
                f"{plan.workers} workers on {plan.partitions} partitions"
            )
            with collector_paused():  # its pauses are not the workers' (cluster.py)
                placed = asyncio.run(
                    steady_load(self.bootstrap, topics.inbox, records, plan.rate, actions)
                )
            sent = [
                Sent(p, o, key.decode(), ts, d)
                for (p, o, ts), (key, _value), d in zip(placed, records, deciding, strict=True)
            ]
            self.judge(topics, sent)
            f.load_average_after = [round(x, 2) for x in os.getloadavg()]
        finally:
            for worker in self.workers:
                worker.kill()

    def judge(self, topics: Topics, sent: list[Sent]) -> None:
        """Read ``decisions`` and ``tasks`` back (waiting for the decisions due)
        and fill in what they say."""
        plan, f = self.plan, self.figures
        f.events = len(sent)
        f.expected_decisions = sum(s.decides for s in sent)
        span = (max(s.at_ms for s in sent) - min(s.at_ms for s in sent)) / 1000
        f.rate_achieved = (len(sent) - 1) / span if span > 0 else 0.0
        try:
            self.wait_decisions(topics.decisions, f.expected_decisions + plan.partitions, 300)
        except BenchError as exc:  # judged below: what is missing is lost
            self.say(f"scale-out: {exc}")
        deadline = time.monotonic() + 60
        while True:
            decided, stamps = asyncio.run(
                read_decisions(self.bootstrap, topics.decisions, topics.inbox)
            )
            delivery = check_decisions(sent, decided)
            if not delivery.lost or time.monotonic() > deadline:
                break
            time.sleep(1)
        copies = delivery.copies
        f.lost, f.lost_examples = len(delivery.lost), delivery.lost[:20]
        f.decided_differently = len(copies.differing)
        f.decided_differently_examples = copies.differing[:20]
        f.decisions, f.redelivered_decisions = copies.distinct, copies.redelivered
        tasks = check_tasks(asyncio.run(read_tasks(self.bootstrap, topics.tasks)))
        f.tasks, f.redelivered_tasks = tasks.distinct, tasks.redelivered
        f.tasks_differing = len(tasks.differing)
        started = min(s.at_ms for s in sent)
        end = max(s[-1] for s in stamps.values())
        f.rebalances = pauses(self.rebalances, stamps, started, end, plan.pause_floor_s)
        f.max_pause_s = max((r.max_s for r in f.rebalances), default=0.0)
        latencies = latencies_ms(sent, delivery.first_ms)
        f.p50_latency_ms = percentile(latencies, 0.5)
        f.p99_latency_ms = percentile(latencies, 0.99)
        f.max_latency_ms = latencies[-1] if latencies else 0.0

    def cpu_rounds(self) -> None:
        """Worker CPU per event through one worker and through two, alternating."""
        plan, f = self.plan, self.figures
        idle: list[float] = []
        for round_ in range(plan.cpu_rounds):
            for workers in (1, 2) if round_ % 2 == 0 else (2, 1):
                leg = self.cpu_leg(workers, round_)
                one = workers == 1
                gross = (
                    f.cpu_us_per_event_1_worker_rounds
                    if one
                    else f.cpu_us_per_event_2_workers_rounds
                )
                net = (
                    f.cpu_net_us_per_event_1_worker_rounds
                    if one
                    else f.cpu_net_us_per_event_2_workers_rounds
                )
                gross.append(round(leg.us_per_event, 1))
                net.append(round(leg.net_us_per_event, 1))
                idle.append(round(leg.idle_ms_per_s, 1))
                self.say(
                    f"scale-out CPU, round {round_ + 1}, {workers} worker(s): "
                    f"{leg.us_per_event:,.0f} µs per event ({leg.net_us_per_event:,.0f} beyond "
                    f"idle); idle {leg.idle_ms_per_s:.1f} ms/s per worker"
                )
        if plan.cpu_rounds:
            median = statistics.median
            f.cpu_us_per_event_1_worker = median(f.cpu_us_per_event_1_worker_rounds)
            f.cpu_us_per_event_2_workers = median(f.cpu_us_per_event_2_workers_rounds)
            f.cpu_2_vs_1 = f.cpu_us_per_event_2_workers / f.cpu_us_per_event_1_worker
            f.cpu_net_us_per_event_1_worker = median(f.cpu_net_us_per_event_1_worker_rounds)
            f.cpu_net_us_per_event_2_workers = median(f.cpu_net_us_per_event_2_workers_rounds)
            f.cpu_net_2_vs_1 = f.cpu_net_us_per_event_2_workers / f.cpu_net_us_per_event_1_worker
            f.idle_cpu_ms_per_s_per_worker = median(idle)

    def cpu_leg(self, workers: int, round_: int) -> CpuLeg:
        """The CPU load through ``workers`` fresh workers on fresh topics: their
        CPU per decided event, in all and beyond what they spent idle just before."""
        plan = self.plan
        prefix = f"bench-{self.run_id}-scaleout-cpu{round_}-{workers}."
        records, deciding = steady_mix(
            int(plan.cpu_rate * plan.cpu_seconds), plan.slice_jobs, "cpu"
        )
        group = self.start_group(prefix, workers)
        try:
            pids = [w.proc.pid for w in group]
            before, started = _cpu(pids), time.monotonic()
            time.sleep(plan.idle_seconds)
            idle_s = (_cpu(pids) - before) / (time.monotonic() - started)  # all workers, per s
            before, started = _cpu(pids), time.monotonic()
            asyncio.run(steady_load(self.bootstrap, Topics(prefix).inbox, records, plan.cpu_rate))
            expected = sum(deciding)
            self.wait_decisions(Topics(prefix).decisions, expected + plan.partitions, 300)
            used, elapsed = _cpu(pids) - before, time.monotonic() - started
        finally:
            for worker in group:
                worker.kill()
        net = used - idle_s * elapsed
        return CpuLeg(1e6 * used / expected, 1e6 * net / expected, 1000 * idle_s / workers)


def run_scale_out(
    quick: bool,
    say: Callable[[str], None] = print,
    playbooks: Path | None = None,
    plan: ScaleOutPlan | None = None,
) -> ScaleOutFigures:
    """The scale-out run on its own broker (LEMONGRAPH_KAFKA_URL's when set)."""
    plan = plan or ScaleOutPlan.for_run(quick)
    say(f"parameters: {', '.join(f'{k}={v}' for k, v in asdict(plan).items())}")
    with bench_site(say, playbooks) as site:
        run = ScaleOut(site.url, plan, say, site.playbooks, site.workdir, site.broker_pid)
        run.figures.core = native.check().describe()
        run.kill_run()
        run.cpu_rounds()
        return run.figures
