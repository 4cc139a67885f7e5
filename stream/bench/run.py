"""The benchmark run: every figure in one process tree, on one broker.

Order: raw aiokafka ceiling → Faust doing nothing → naive Faust (table write and
send per event) → the engine end to end, and the bytes it produced per event by
topic → naive Faust and the engine's burst again, alternating, ``throughput_rounds``
in all (the figures are their medians) → latency at a steady rate → memory per idle
job → recovery after SIGKILL → the worker idle with 10,000 and with 1,000,000
sleeping jobs written into its table, its restart with them, and a cold restore of
such a table from the changelog (``stream/bench/idle.py``) → the engine's burst again
under each batch codec, alternating (events/s and bytes stored per event;
``stream/bench/bytes.py``) → the pure core → tick cost → schedules (a tick among many
stored schedules, and their memory; ``stream/bench/schedules.py``, in-process on
RocksDB). Everything runs against the same broker; each part gets its own topics (a
fresh prefix).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import orjson
from aiokafka.structs import TopicPartition

from stream.bench.bytes import TopicBytes, topic_bytes_under
from stream.bench.cluster import PARTITIONS, Cluster, bench_site, produce
from stream.bench.figures import Figures, Parameters, figures_json, render_table
from stream.bench.idle import Idle, IdleRun
from stream.bench.micro import core_decisions_per_s, state_cache_bytes_per_entry, tick_cost_ms
from stream.bench.rebalance import percentile
from stream.bench.schedules import schedule_memory, schedule_tick_ms
from stream.bench.workload import decides, onboarding_mix
from stream.runtime import native
from stream.runtime.broker import ensure_topics
from stream.runtime.errors import BenchError
from stream.runtime.kafka import (
    configured_compression,
    configured_security,
    new_consumer,
    producer,
    read_topic,
)
from stream.runtime.processes import ChildProcess, collector_paused, cpu_s, rss_mb
from topics import InboxEvent, JobStart, Topics, encode

__all__ = ["Bench", "Figures", "Parameters", "figures_json", "render_table", "run_bench"]


async def _consume_all(bootstrap: str, topic: str, count: int) -> float:
    consumer = new_consumer(
        bootstrap, configured_security(), offsets="earliest", max_poll_records=10_000
    )
    await consumer.start()
    try:
        await asyncio.sleep(0)
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = 0
        started = time.perf_counter()
        while seen < count:
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            seen += sum(len(v) for v in batches.values())
        return time.perf_counter() - started
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class CodecRound:
    """One burst of the codec comparison: events/s, CPU µs per event of each
    process measured, the bytes stored by topic, and the inbox events."""

    rate: float
    cpu_us: list[float]
    stored: dict[str, int]
    events: int


class Bench(Cluster):
    """One run."""

    #: The CPU seconds of each process the last ``_burst`` measured.
    burst_cpu_s: Sequence[float] = ()
    #: The engine's first burst as a codec round (``codec_round_from_engine``).
    engine_codec_round: CodecRound | None = None

    @cached_property
    def figures(self) -> Figures:
        """Every figure of this run, filled in part by part."""
        return Figures(parameters=asdict(self.params))

    # -- raw and framework ceilings ----------------------------------------------------

    def raw(self) -> list[tuple[bytes, bytes]]:
        topic = f"bench-{self.run_id}-raw"
        mix = onboarding_mix(self.params.raw_records // 3 + 1, seed=5)[: self.params.raw_records]
        records = [(m.key.encode(), encode(m.compact())) for m in mix]
        asyncio.run(ensure_topics(self.bootstrap, {topic: PARTITIONS}, security=self.security))
        produce_s = asyncio.run(produce(self.bootstrap, topic, records))
        consume_s = asyncio.run(_consume_all(self.bootstrap, topic, len(records)))
        self.figures.raw_produce_per_s = len(records) / produce_s
        self.figures.raw_consume_per_s = len(records) / consume_s
        self.say(
            f"raw aiokafka: produce {self.figures.raw_produce_per_s:,.0f}/s, "
            f"consume {self.figures.raw_consume_per_s:,.0f}/s ({len(records):,} records)"
        )
        return records

    def faust_baseline(
        self, mode: str, records: list[tuple[bytes, bytes]], round_: int = 0
    ) -> float:
        topic = f"bench-{self.run_id}-{mode}" + (f"-r{round_}" if round_ else "")
        asyncio.run(ensure_topics(self.bootstrap, {topic: PARTITIONS}, security=self.security))
        asyncio.run(produce(self.bootstrap, topic, records))
        data = (
            self.workdir / f"faust-{mode}"
            if not round_
            else self.workdir / f"faust-{mode}-r{round_}"
        )
        child = ChildProcess(
            [
                sys.executable,
                "-m",
                "stream.bench.faust_apps",
                mode,
                self.url,
                topic,
                str(data),
                str(len(records)),
                str(PARTITIONS),
            ],
            dict(os.environ),
            self.workdir,
        )
        try:
            first = float(child.wait_for("BENCH first", 120).split()[2])
            done = float(child.wait_for("BENCH done", 600).split()[3])
        finally:
            child.kill()
        rate = (len(records) - 1) / (done - first)
        self.say(f"faust {mode}: {rate:,.0f} events/s ({len(records):,} records)")
        return rate

    # -- the engine ---------------------------------------------------------------------

    def engine(self) -> None:
        prefix = f"bench-{self.run_id}-engine."
        topics = Topics(prefix)
        data = self.workdir / "engine"
        env = self.worker_env(prefix, data)
        worker = self.start_worker(env)
        try:
            worker.wait_for("ready", 120)
            base_rss = rss_mb(worker.proc.pid)
            # 1. Throughput: a burst of the onboarding mix for engine_jobs jobs.
            rate, records, expected = self._burst(topics, cpu_of=self._cpu_pids(worker))
            self._engine_round(rate, records)
            self.say(
                f"engine: {rate:,.0f} events/s ({records:,} records, "
                f"{self.params.engine_jobs:,} jobs, {expected:,} decisions)"
            )
            # ... and the bytes it produced, per inbox event.
            f = self.figures
            f.compression = configured_compression()
            events, produced, stored, counts = self._bytes(prefix)
            if self.params.codec_round_from_engine:
                used = [1e6 * s / records for s in self.burst_cpu_s]
                self.engine_codec_round = CodecRound(rate, used, stored, events)
            f.records_per_event_by_topic = _per(counts, events, 3)
            f.bytes_per_event_by_topic = _per(produced, events)
            f.bytes_per_event = sum(produced.values()) / events
            f.stored_bytes_per_event_by_topic = _per(stored, events)
            f.stored_bytes_per_event = sum(stored.values()) / events
            self.say(
                f"bytes per event ({events:,} inbox events): {f.bytes_per_event:,.0f} produced "
                f"({_shown(f.bytes_per_event_by_topic)}); {f.stored_bytes_per_event:,.0f} "
                f"stored in {f.compression} batches ({_shown(f.stored_bytes_per_event_by_topic)})"
            )
            # 2. Latency at a steady rate: new jobs, task.opened on arrival.
            self._latency(topics)
            # ... and its bytes per event (the topics' growth over the run).
            after = self._bytes(prefix)
            steady = after[0] - events
            f.steady_bytes_per_event = (sum(after[1].values()) - sum(produced.values())) / steady
            f.steady_stored_bytes_per_event = (
                sum(after[2].values()) - sum(stored.values())
            ) / steady
            self.say(
                f"bytes per event at {self.params.latency_rate:,}/s ({steady:,} job starts): "
                f"{f.steady_bytes_per_event:,.0f} produced, "
                f"{f.steady_stored_bytes_per_event:,.0f} stored in {f.compression} batches"
            )
            # 3. Memory: fill the table to recovery_jobs idle jobs.
            have = self.params.engine_jobs + self._latency_jobs + 1  # + the warm-up job
            more = max(0, self.params.recovery_jobs - have)
            starts = [
                (
                    f"idle-{i:07d}".encode(),
                    encode(JobStart(key=f"idle-{i:07d}", playbook_key="onboarding").compact()),
                )
                for i in range(more)
            ]
            done_before = self.decisions_so_far(topics.decisions)
            asyncio.run(produce(self.bootstrap, topics.inbox, starts))
            self.wait_decisions(topics.decisions, done_before + more, 900)
            time.sleep(self.params.write_settle_seconds)  # the last batch's writes and commit
            jobs = have + more
            rss = rss_mb(worker.proc.pid)
            self.figures.rss_mb_per_100k_jobs = (rss - base_rss) * 100_000 / jobs
            self.say(
                f"memory: worker RSS {base_rss:.0f} MB empty, {rss:.0f} MB with "
                f"{jobs:,} idle jobs → {self.figures.rss_mb_per_100k_jobs:.0f} MB per 100k"
            )
            # 4. Recovery: SIGKILL, restart, first new decision.
            worker.kill()
            decided = self.decisions_so_far(topics.decisions)
            restarted = time.time()
            worker = self.start_worker(env)
            probe = InboxEvent(key="tp-000001", action="meeting_cancelled").compact()
            asyncio.run(produce(self.bootstrap, topics.inbox, [(b"tp-000001", encode(probe))]))
            stamps = self.wait_decisions(topics.decisions, decided + 1, 300)
            first_new = max(stamps) / 1000
            self.figures.recovery_s = first_new - restarted
            self.say(
                f"recovery: first new decision {self.figures.recovery_s:.1f}s after "
                f"restarting a SIGKILLed worker with {jobs:,} jobs in its table"
            )
        finally:
            worker.kill()

    def idle(self) -> None:
        """Sleeping jobs through the real worker (stream/bench/idle.py): idle
        RSS and restart with idle_small and idle_large jobs in its table, and a
        cold restore of cold_restore_jobs from the changelog (first, its worker
        the idle runs' seed, with ``idle_seeded_by_cold``)."""
        f, params = self.figures, self.params
        idle = Idle(self, params.idle_seconds, params.write_settle_seconds)
        shared = params.idle_one_seed
        names = [f"idle{params.idle_small}", f"idle{params.idle_large}", "cold"]
        cold: IdleRun | None = None
        if params.idle_seeded_by_cold:  # the cold restore first, its worker the seed
            if not shared or params.cold_restore_jobs != params.idle_small:
                raise BenchError(
                    "idle_seeded_by_cold: idle_one_seed, cold_restore_jobs = idle_small"
                )
            small_run = large_run = idle.unseeded(names[0])
            cold = idle.cold_restore(small_run, params.cold_restore_jobs, keep=True)
        else:
            if shared:  # one seeded worker for both idle runs; the cold one's topics made
                names = names[:1]
            seeds = idle.seed(*names)
            small_run = seeds[0]
            large_run = small_run if shared else seeds[1]
            cold_run = idle.unseeded("cold") if shared else seeds[2]
        runs: list[IdleRun] = []
        for seeded, jobs in ((small_run, params.idle_small), (large_run, params.idle_large)):
            # shared: the large run's jobs are written over the small run's table
            run = idle.restart(seeded, jobs, keep=shared and not runs)
            runs.append(run)
            self.say(
                f"idle: worker RSS {run.rss_mb:.0f} MB (peak {run.rss_mb_peak:.0f}) holding "
                f"{jobs:,} sleeping jobs ({run.disk_mb:.0f} MB on disk, written in "
                f"{run.fill_s:.1f}s); restart to first new decision {run.recovery_s:.1f}s"
            )
        small, large = runs
        f.rss_mb_idle_10k, f.rss_mb_idle_1m = small.rss_mb, large.rss_mb
        f.rss_idle_ratio = large.rss_mb / small.rss_mb
        f.recovery_s_10k_jobs, f.recovery_s_1m_jobs = small.recovery_s, large.recovery_s
        f.disk_mb_idle_1m = large.disk_mb
        self.say(
            f"idle: RSS {large.jobs:,} / {small.jobs:,} jobs = {f.rss_idle_ratio:.2f}x "
            "(target <= 1.5x)"
        )
        if cold is None:
            cold = idle.cold_restore(cold_run, params.cold_restore_jobs)
        f.cold_restore_s, f.cold_restore_rss_mb = cold.recovery_s, cold.rss_mb
        f.cold_restore_changelog_mb = cold.produced_mb
        f.cold_restore_s_per_100k = cold.recovery_s * 100_000 / cold.jobs
        self.say(
            f"cold restore: {cold.jobs:,} jobs ({cold.produced_mb:.0f} MB of changelog) into an "
            f"empty data folder: first new decision {cold.recovery_s:.1f}s after the start, "
            f"RSS {cold.rss_mb:.0f} MB (peak {cold.rss_mb_peak:.0f})"
        )

    def _cpu_pids(self, worker: ChildProcess) -> tuple[int, ...]:
        """The worker's pid, and the embedded broker's (whose CPU is measured too)."""
        return (worker.proc.pid,) + ((self.broker_pid,) if self.broker_pid else ())

    def _engine_round(self, rate: float, records: int) -> None:
        """Keep a burst's events/s and CPU µs per event (``burst_cpu_s``)."""
        f = self.figures
        f.engine_events_per_s_rounds.append(rate)
        used = [1e6 * s / records for s in self.burst_cpu_s]
        f.engine_worker_cpu_us_per_event_rounds.append(round(used[0], 1))
        if len(used) > 1:
            f.engine_broker_cpu_us_per_event_rounds.append(round(used[1], 1))
        f.engine_events_per_s = statistics.median(f.engine_events_per_s_rounds)

    def throughput_rounds(self, records: list[tuple[bytes, bytes]]) -> None:
        """Naive Faust and the engine's burst (a fresh worker and topics each)
        again, ``throughput_rounds`` in all with the first ones, alternating
        which goes first: the machine's load moves both alike, so their medians
        (and their ratio) move less than one run of each."""
        f = self.figures
        f.naive_events_per_s_rounds = [f.naive_events_per_s]
        for round_ in range(1, self.params.throughput_rounds):
            parts = [self._naive_round, self._engine_burst_round]
            for part in parts if round_ % 2 == 0 else parts[::-1]:
                part(round_, records)
        f.naive_events_per_s = statistics.median(f.naive_events_per_s_rounds)
        f.engine_events_per_s = statistics.median(f.engine_events_per_s_rounds)
        self.say(
            f"throughput, {len(f.engine_events_per_s_rounds)} rounds: engine "
            + " / ".join(f"{r:,.0f}" for r in f.engine_events_per_s_rounds)
            + f" events/s (median {f.engine_events_per_s:,.0f}; worker CPU µs per event "
            + " / ".join(f"{c:,.0f}" for c in f.engine_worker_cpu_us_per_event_rounds)
            + "), naive "
            + " / ".join(f"{r:,.0f}" for r in f.naive_events_per_s_rounds)
            + f" (median {f.naive_events_per_s:,.0f})"
        )

    def _naive_round(self, round_: int, records: list[tuple[bytes, bytes]]) -> None:
        rate = self.faust_baseline("naive", records, round_)
        self.figures.naive_events_per_s_rounds.append(rate)

    def _engine_burst_round(self, round_: int, _records: list[tuple[bytes, bytes]]) -> None:
        prefix = f"bench-{self.run_id}-engine-r{round_}."
        env = self.worker_env(prefix, self.workdir / f"engine-r{round_}")
        worker = self.start_worker(env)
        try:
            worker.wait_for("ready", 120)
            rate, records, _decided = self._burst(Topics(prefix), cpu_of=self._cpu_pids(worker))
        finally:
            worker.kill()
        self._engine_round(rate, records)
        self.say(f"engine, round {round_ + 1}: {rate:,.0f} events/s ({records:,} records)")

    def _bytes(self, prefix: str) -> tuple[int, dict[str, int], dict[str, int], dict[str, int]]:
        """The inbox events under ``prefix``, and the bytes of every other topic
        there: (events, produced by topic, stored by topic, records by topic)."""
        counted: dict[str, TopicBytes] = asyncio.run(
            topic_bytes_under(self.bootstrap, prefix, self.security)
        )
        inbox = counted.pop("inbox", None)
        if inbox is None or not counted:
            raise BenchError(f"no records under {prefix!r} to count: {sorted(counted)}")
        produced = {name: c.produced for name, c in counted.items()}
        stored = {name: c.stored for name, c in counted.items()}
        return inbox.records, produced, stored, {name: c.records for name, c in counted.items()}

    def codecs(self) -> None:
        """The throughput burst again through a fresh worker per codec, the
        codecs alternating (each round in another order), and the bytes stored
        per event with each: compressed and not, side by side."""
        configured = configured_compression()
        codecs = list(dict.fromkeys([*self.params.codecs, configured]))
        rates: dict[str, list[float]] = {c: [] for c in codecs}
        cpu: dict[str, list[list[float]]] = {c: [] for c in codecs}
        stored: dict[str, list[dict[str, int]]] = {c: [] for c in codecs}
        events: dict[str, list[int]] = {c: [] for c in codecs}
        for round_ in range(self.params.codec_rounds):
            shift = round_ % len(codecs)
            for codec in codecs[shift:] + codecs[:shift]:
                taken = self.engine_codec_round if round_ == 0 and codec == configured else None
                done = taken or self._codec_round(round_, codec)
                cpu[codec].append(done.cpu_us)
                rates[codec].append(done.rate)
                stored[codec].append(done.stored)
                events[codec].append(done.events)
                self.say(
                    f"codec {codec}, round {round_ + 1}: {done.rate:,.0f} events/s, "
                    f"{sum(done.stored.values()) / done.events:,.0f} bytes stored per event, CPU "
                    "µs per event: "
                    + " and ".join(f"{us:,.0f}" for us in done.cpu_us)
                    + (" (the engine's burst above)" if taken else "")
                )
        f = self.figures
        for codec in codecs:
            f.codec_events_per_s[codec] = statistics.median(rates[codec])
            f.codec_worker_cpu_us_per_event[codec] = statistics.median(c[0] for c in cpu[codec])
            if self.broker_pid:
                f.codec_broker_cpu_us_per_event[codec] = statistics.median(c[1] for c in cpu[codec])
            runs = list(zip(stored[codec], events[codec], strict=True))
            totals = [sum(by_topic.values()) / n for by_topic, n in runs]
            f.codec_stored_bytes_per_event[codec] = round(statistics.median(totals), 1)
            names = sorted({name for by_topic, _n in runs for name in by_topic})
            f.codec_stored_bytes_per_event_by_topic[codec] = {
                name: round(statistics.median(by_topic.get(name, 0) / n for by_topic, n in runs), 1)
                for name in names
            }
        self.say(
            "codecs side by side (median of "
            f"{self.params.codec_rounds}): "
            + "; ".join(
                f"{c} {f.codec_events_per_s[c]:,.0f} events/s, "
                f"{f.codec_stored_bytes_per_event[c]:,.0f} bytes stored per event"
                for c in codecs
            )
        )

    def _codec_round(self, round_: int, codec: str) -> CodecRound:
        """The throughput burst through a fresh worker writing with ``codec``."""
        prefix = f"bench-{self.run_id}-codec{round_}-{codec}."
        env = self.worker_env(prefix, self.workdir / f"codec{round_}-{codec}")
        env["LEMONGRAPH_KAFKA_COMPRESSION"] = codec
        worker = self.start_worker(env)
        pids = (worker.proc.pid,) + ((self.broker_pid,) if self.broker_pid else ())
        try:
            worker.wait_for("ready", 120)
            rate, records, _decided = self._burst(Topics(prefix), codec, pids)
        finally:
            worker.kill()
        count, _produced, by_topic, _counts = self._bytes(prefix)
        return CodecRound(rate, [1e6 * s / records for s in self.burst_cpu_s], by_topic, count)

    def engine_two_workers(self) -> None:
        """The throughput burst again, through two worker processes sharing the
        partitions (each with its own data folder)."""
        prefix = f"bench-{self.run_id}-engine2."
        topics = Topics(prefix)
        workers = [
            self.start_worker(self.worker_env(prefix, self.workdir / f"engine2-{i}"))
            for i in range(2)
        ]
        try:
            for worker in workers:
                worker.wait_for("ready", 120)
            # Let the group settle (two joins, one rebalance) before the burst.
            time.sleep(self.params.settle_seconds)
            rate, records, _decided = self._burst(topics)
            self.figures.engine_2_workers_events_per_s = rate
            self.say(f"engine, 2 worker processes: {rate:,.0f} events/s ({records:,} records)")
        finally:
            for worker in workers:
                worker.kill()

    _latency_jobs = 0

    def _latency(self, topics: Topics) -> None:
        rate, seconds = self.params.latency_rate, self.params.latency_seconds
        count = int(rate * seconds)
        self._latency_jobs = count
        sent: dict[str, float] = {}

        async def go() -> None:
            # No linger (a record is sent when due), and no waiting for each
            # acknowledgement: that would hold the rate far below ``rate``.
            async with producer(self.bootstrap, linger_ms=0) as client:
                started = time.monotonic()
                pending = []
                for i in range(count):
                    key = f"lat-{i:06d}"
                    target = started + i / rate
                    delay = target - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    value = encode(JobStart(key=key, playbook_key="onboarding").compact())
                    pending.append((key, await client.send(topics.inbox, value, key=key.encode())))
                for key, delivery in pending:
                    sent[key] = (await delivery).timestamp / 1000  # set when sent

        with collector_paused():  # the bench's own pauses are not the engine's latency
            asyncio.run(go())
        span = max(sent.values()) - min(sent.values())
        self.figures.latency_rate_achieved = (count - 1) / span if span > 0 else 0.0
        arrived: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while len(arrived) < count and time.monotonic() < deadline:
            arrived = asyncio.run(_task_arrivals(self.bootstrap, topics.tasks, "lat-"))
        latencies = sorted((arrived[k] - sent[k]) * 1000 for k in sent if k in arrived)
        if len(latencies) < count:
            raise BenchError(f"only {len(latencies)} of {count} tasks arrived")
        self.figures.p50_latency_ms = statistics.median(latencies)
        self.figures.p99_latency_ms = percentile(latencies, 0.99)
        self.say(
            f"latency at {rate:,}/s for {seconds:g}s (achieved "
            f"{self.figures.latency_rate_achieved:,.0f}/s): "
            f"p50 {self.figures.p50_latency_ms:.1f} ms,"
            f" p99 {self.figures.p99_latency_ms:.1f} ms (event produced → task.opened "
            f"arrived, broker timestamps)"
        )

    def _burst(
        self, topics: Topics, compression: str | None = None, cpu_of: tuple[int, ...] = ()
    ) -> tuple[float, int, int]:
        """The onboarding mix for ``engine_jobs`` jobs produced at once to
        running workers: (events/s, records, decisions). Timed from the burst's
        first inbox record to its last decision (broker timestamps), after a
        warm-up job has been decided (the group is joined, partitions assigned).
        ``compression``: the inbox producer's codec (the environment's when None).
        The CPU seconds each process of ``cpu_of`` used from the warm-up's decision
        to the last decision seen go to ``burst_cpu_s``."""
        warm_up = encode(JobStart(key="warm-up", playbook_key="onboarding").compact())
        asyncio.run(produce(self.bootstrap, topics.inbox, [(b"warm-up", warm_up)], compression))
        self.wait_decisions(topics.decisions, 1, 120)
        cpu = [cpu_s(pid) for pid in cpu_of]
        mix = onboarding_mix(self.params.engine_jobs, seed=11, prefix="tp")
        records = [(m.key.encode(), encode(m.compact())) for m in mix]
        asyncio.run(produce(self.bootstrap, topics.inbox, records, compression))
        expected = _expected_decisions(mix)
        stamps = self.wait_decisions(topics.decisions, expected + 1, 600)
        self.burst_cpu_s = [cpu_s(pid) - was for pid, was in zip(cpu_of, cpu, strict=True)]
        refused = asyncio.run(_refusals(self.bootstrap, topics.decisions))
        if refused:
            raise BenchError(f"the engine refused {len(refused)} inputs, e.g. {refused[:3]}")
        first = asyncio.run(_first_stamp(self.bootstrap, topics.inbox, b"tp-"))
        span = (max(stamps) - first) / 1000
        return (len(records) / span if span > 0 else 0.0), len(records), expected


async def _task_arrivals(bootstrap: str, topic: str, key_prefix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    async for r in read_topic(bootstrap, topic, idle=0.3):
        if r.key is not None and r.key.startswith(key_prefix.encode()):
            value = orjson.loads(r.value or b"{}")
            if value.get("type") == "task.opened":
                out.setdefault(r.key.decode(), r.timestamp_ms / 1000)
    return out


async def _first_stamp(bootstrap: str, topic: str, key_prefix: bytes) -> int:
    """The earliest broker timestamp of the records whose key has the prefix."""
    stamps = [
        r.timestamp_ms
        async for r in read_topic(bootstrap, topic, idle=0.3)
        if r.key is not None and r.key.startswith(key_prefix)
    ]
    return min(stamps)


async def _refusals(bootstrap: str, topic: str) -> list[str]:
    out = []
    async for r in read_topic(bootstrap, topic, idle=0.3):
        value = orjson.loads(r.value or b"{}")
        if value.get("outcome") == "refused":
            out.append(str(value.get("refused")))
    return out


def _per(by_topic: dict[str, int], events: int, digits: int = 1) -> dict[str, float]:
    return {name: round(count / events, digits) for name, count in sorted(by_topic.items())}


def _shown(by_topic: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:,.0f}" for name, value in by_topic.items())


def _expected_decisions(mix: list[JobStart | InboxEvent]) -> int:
    """Every record is a decision except a retried idempotency key."""
    return sum(decides(mix))


def run_bench(
    quick: bool, say: Callable[[str], None] = print, playbooks: Path | None = None
) -> Figures:
    """Run every part and return the figures."""
    params = Parameters.for_run(quick)
    say(f"parameters: {', '.join(f'{k}={v}' for k, v in asdict(params).items())}")
    with bench_site(say, playbooks) as site:
        playbooks, workdir = site.playbooks, site.workdir
        bench = Bench(site.url, params, say, playbooks, workdir, broker_pid=site.broker_pid)
        bench.figures.core = native.check().describe()
        records = bench.raw()
        faust_records = records[: params.faust_records]
        bench.figures.framework_events_per_s = bench.faust_baseline("noop", faust_records)
        bench.figures.naive_events_per_s = bench.faust_baseline("naive", faust_records)
        bench.engine()
        bench.throughput_rounds(faust_records)
        bench.idle()
        bench.engine_two_workers()
        bench.codecs()
        f = bench.figures
        f.engine_vs_naive = f.engine_events_per_s / f.naive_events_per_s
        f.engine_vs_framework = f.engine_events_per_s / f.framework_events_per_s
        f.core_decisions_per_s = core_decisions_per_s(playbooks, params.core_jobs)
        say(f"pure core: {f.core_decisions_per_s:,.0f} decisions/s")
        f.state_cache_kb_per_entry = state_cache_bytes_per_entry(playbooks, params.core_jobs) / 1024
        say(
            f"state cache: {f.state_cache_kb_per_entry:.1f} KB per entry (tracemalloc, "
            f"{params.core_jobs:,} decoded jobs; 10,000 entries by default)"
        )
        f.tick_ms_1k_pending = tick_cost_ms(playbooks, params.tick_due, params.tick_due)
        f.tick_ms_1m_pending = tick_cost_ms(
            playbooks, params.tick_pending_large, params.tick_due, repeats=1 if quick else 3
        )
        say(
            f"tick: {f.tick_ms_1k_pending:.1f} ms with {params.tick_due:,} pending, "
            f"{f.tick_ms_1m_pending:.1f} ms with {params.tick_pending_large:,} pending "
            f"({params.tick_due:,} due in both)"
        )
        bench_schedules(f, params, say, workdir)
        return f


def bench_schedules(
    f: Figures, params: Parameters, say: Callable[[str], None], workdir: Path
) -> None:
    """The schedules' figures (stream/bench/schedules.py), into ``f``."""
    total, due = params.schedules_total, params.schedules_due
    small, large = schedule_tick_ms((due, total), due, workdir, params.schedule_tick_repeats)
    f.schedule_tick_ms_100, f.schedule_tick_ms_100k = small, large
    f.schedule_tick_ratio = large / small
    say(
        f"schedules tick: {small:.1f} ms with {due:,} stored, {large:.1f} ms with "
        f"{total:,} stored ({due:,} due in both): ratio {f.schedule_tick_ratio:.2f}"
    )
    memory = schedule_memory(total, workdir)
    f.schedule_mb_per_100k = memory.per_100k(memory.index_bytes) / 1e6
    f.schedule_rss_mb_per_100k = memory.per_100k(memory.rss_mb)
    f.schedule_rocksdb_mb_per_100k = memory.per_100k(memory.rocksdb_bytes) / 1e6
    f.schedule_row_mb_per_100k = memory.per_100k(memory.row_bytes) / 1e6
    f.schedule_rebuild_s_100k = memory.per_100k(memory.rebuild_s)
    say(
        f"schedules memory, per 100k ({total:,} stored): index {f.schedule_mb_per_100k:.1f} MB "
        f"(tracemalloc), RSS +{f.schedule_rss_mb_per_100k:.1f} MB, RocksDB "
        f"{f.schedule_rocksdb_mb_per_100k:.1f} MB of SST ({f.schedule_row_mb_per_100k:.1f} MB "
        f"of rows); assignment to first tick {f.schedule_rebuild_s_100k:.2f} s (nothing rebuilt)"
    )
