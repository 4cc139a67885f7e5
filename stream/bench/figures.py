"""What one benchmark run measures with (``Parameters``: the full run and
``--quick``) and what it measured (``Figures``, the keys of ``--json``), and the
figures as the table ``lemongraph bench`` prints, with the targets beside them
(README, section Benchmarks).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

__all__ = ["Figures", "Parameters", "figures_json", "render_table"]


@dataclass(frozen=True)
class Parameters:
    """What a run measures with."""

    quick: bool
    raw_records: int
    faust_records: int
    engine_jobs: int
    latency_rate: int
    latency_seconds: float
    recovery_jobs: int
    core_jobs: int
    tick_pending_large: int
    tick_due: int
    #: Schedules stored in the large run of the schedules tick and in its memory
    #: figure (docs/schedules.md); ``schedules_due`` of them due at each tick.
    schedules_total: int = 100_000
    schedules_due: int = 100
    #: Seconds to let a group of two new workers settle before their burst.
    settle_seconds: float = 8.0
    #: The codecs whose bursts are compared (docs/kafka.md, "Compression"), and
    #: how many times each, alternating; the configured codec is added.
    codecs: tuple[str, ...] = ("none", "lz4", "zstd")
    codec_rounds: int = 3
    #: Sleeping jobs written straight into a real worker's table for its idle
    #: RSS and restart (the ``*_10k`` and ``*_1m`` figures), and into the
    #: changelog for the cold restore (stream/bench/idle.py).
    idle_small: int = 10_000
    idle_large: int = 1_000_000
    cold_restore_jobs: int = 100_000
    #: Seconds an idle worker's RSS is sampled (once a second) before it is read.
    idle_seconds: float = 6.0
    #: Rounds of naive Faust and of the engine's burst (a fresh worker each),
    #: alternating, so that both see the machine's load of the moment:
    #: ``naive_events_per_s`` and ``engine_events_per_s`` are their medians.
    throughput_rounds: int = 3
    #: The engine's first burst (a fresh worker, the configured codec) counts as
    #: that codec's first round instead of a burst of its own: the same figures,
    #: one worker fewer, but not measured beside the other codecs' rounds.
    codec_round_from_engine: bool = False
    #: Seconds a worker is left after its last decision for that batch's writes
    #: and offset commit to settle (its commit interval is 1 s), before its RSS
    #: is read or it is stopped.
    write_settle_seconds: float = 1.5
    #: Consecutive ticks of each schedules tick run (the figure is their median).
    schedule_tick_repeats: int = 11
    #: The idle run with ``idle_large`` jobs restarts the worker of the run with
    #: ``idle_small`` (its jobs written over that table) instead of a worker
    #: seeded for it, and the cold restore's topics are created rather than
    #: seeded by a worker run on them: the same figures, two worker starts fewer.
    idle_one_seed: bool = False
    #: With ``idle_one_seed``: the cold restore runs first, on the idle runs'
    #: topics, with ``idle_small`` jobs of the same keys (``cold_restore_jobs`` must
    #: equal it), and its worker, stopped cleanly, leaves the partitions' databases
    #: the idle runs write into: it is the seed worker too. The same figures, one
    #: worker start fewer.
    idle_seeded_by_cold: bool = False

    @classmethod
    def for_run(cls, quick: bool) -> Parameters:
        if quick:
            params = cls(
                True,
                20_000,
                5_000,
                1_000,
                1_000,
                3.0,
                5_000,
                500,
                100_000,
                200,
                20_000,
                100,
                4.0,
                ("none",),
                1,
                1_000,
                20_000,
                5_000,
                throughput_rounds=1,
                idle_seconds=3.0,
            )
            if os.environ.get("LEMONGRAPH_BENCH_SMOKE"):
                # The test suite's smoke run: every figure, on the least work that
                # still measures it (tests/stream/bench/test_bench_smoke.py).
                return replace(
                    params,
                    raw_records=5_000,
                    faust_records=1_000,
                    engine_jobs=300,
                    latency_seconds=1.0,
                    core_jobs=200,
                    tick_pending_large=10_000,
                    tick_due=100,
                    settle_seconds=1.0,
                    idle_large=5_000,
                    cold_restore_jobs=1_000,  # = idle_small (idle_seeded_by_cold)
                    # (the engine's jobs and the latency run's are 1,301 of them)
                    recovery_jobs=2_000,
                    schedules_total=2_000,
                    idle_seconds=1.0,
                    codec_round_from_engine=True,
                    write_settle_seconds=0.5,
                    schedule_tick_repeats=3,
                    idle_one_seed=True,
                    idle_seeded_by_cold=True,
                )
            return params
        return cls(False, 100_000, 30_000, 10_000, 1_000, 10.0, 100_000, 3_000, 1_000_000, 1_000)


@dataclass
class Figures:
    """Every figure of one run (the keys of ``--json``)."""

    raw_produce_per_s: float = 0.0
    raw_consume_per_s: float = 0.0
    framework_events_per_s: float = 0.0
    naive_events_per_s: float = 0.0
    engine_events_per_s: float = 0.0
    engine_vs_naive: float = 0.0
    engine_vs_framework: float = 0.0
    #: Each round's naive Faust and engine burst (events/s), in the order run
    #: (``throughput_rounds``): the two figures above are their medians.
    naive_events_per_s_rounds: list[float] = field(default_factory=list)
    engine_events_per_s_rounds: list[float] = field(default_factory=list)
    #: CPU µs per event of the engine's worker and of the embedded broker in each
    #: round's burst (user + system, /proc; steadier than events/s).
    engine_worker_cpu_us_per_event_rounds: list[float] = field(default_factory=list)
    engine_broker_cpu_us_per_event_rounds: list[float] = field(default_factory=list)
    #: The same workload through two worker processes in one group (scale-out on
    #: this machine; the ratios above compare one process with one process).
    engine_2_workers_events_per_s: float = 0.0
    p50_latency_ms: float = 0.0
    p99_latency_ms: float = 0.0
    #: The rate the latency run's events were actually produced at (events/s).
    latency_rate_achieved: float = 0.0
    core_decisions_per_s: float = 0.0
    tick_ms_1m_pending: float = 0.0
    tick_ms_1k_pending: float = 0.0
    recovery_s: float = 0.0
    rss_mb_per_100k_jobs: float = 0.0
    #: A tick with schedules_total stored schedules and with schedules_due, the
    #: same schedules_due due in both (ms, median of 11 alternating ticks).
    schedule_tick_ms_100k: float = 0.0
    schedule_tick_ms_100: float = 0.0
    #: schedule_tick_ms_100k / schedule_tick_ms_100: flat is about 1.
    schedule_tick_ratio: float = 0.0
    #: The worker's in-memory structures per 100,000 schedules after an
    #: assignment and a first tick (tracemalloc, MB; the due-time index is in
    #: RocksDB, stream/engine/timers.py).
    schedule_mb_per_100k: float = 0.0
    #: A fresh process's RSS growth doing the same, per 100,000 schedules (MB).
    schedule_rss_mb_per_100k: float = 0.0
    #: RocksDB's live SST bytes of 100,000 stored schedules (MB), and their rows'
    #: own key + value bytes (MB).
    schedule_rocksdb_mb_per_100k: float = 0.0
    schedule_row_mb_per_100k: float = 0.0
    #: Seconds from a partition assignment to its first tick decided, per
    #: 100,000 stored schedules (the key kept from when the index was rebuilt
    #: on assignment; nothing is rebuilt now).
    schedule_rebuild_s_100k: float = 0.0
    #: Bytes the engine's burst produced per inbox event (key + value + header
    #: names and values), all output topics together and by topic (the name
    #: after the run's prefix; the jobstate changelog is Faust's
    #: ``engine-jobstate-changelog``).
    bytes_per_event: float = 0.0
    bytes_per_event_by_topic: dict[str, float] = field(default_factory=dict)
    #: The same records as the broker stores and serves them: record batches,
    #: compressed with ``compression`` (LEMONGRAPH_KAFKA_COMPRESSION).
    stored_bytes_per_event: float = 0.0
    stored_bytes_per_event_by_topic: dict[str, float] = field(default_factory=dict)
    compression: str = ""
    #: Records per inbox event by topic (a job's changelog row is written once
    #: per batch, so these depend on how many of a job's events one batch holds).
    records_per_event_by_topic: dict[str, float] = field(default_factory=dict)
    #: The latency run's job starts at ``latency_rate`` (small batches, so less
    #: for the codec to share between records): stored and produced bytes per event.
    steady_stored_bytes_per_event: float = 0.0
    steady_bytes_per_event: float = 0.0
    #: The burst again through one fresh worker per codec, alternating
    #: (``codec_rounds`` times each): median events/s and stored bytes per event,
    #: by codec, and stored bytes per event by codec and topic.
    codec_events_per_s: dict[str, float] = field(default_factory=dict)
    codec_stored_bytes_per_event: dict[str, float] = field(default_factory=dict)
    #: CPU µs per event of the worker and of the embedded broker during the burst
    #: (user + system, /proc; steadier than events/s on a shared machine).
    codec_worker_cpu_us_per_event: dict[str, float] = field(default_factory=dict)
    codec_broker_cpu_us_per_event: dict[str, float] = field(default_factory=dict)
    codec_stored_bytes_per_event_by_topic: dict[str, dict[str, float]] = field(default_factory=dict)
    #: The real worker's RSS (MB), idle, holding idle_small and idle_large
    #: sleeping jobs (written into its table, then the worker restarted; the
    #: median of its last reads over a few idle seconds), and their ratio
    #: (target: at most 1.5). ``--quick`` holds fewer (see ``parameters``).
    rss_mb_idle_10k: float = 0.0
    rss_mb_idle_1m: float = 0.0
    rss_idle_ratio: float = 0.0
    #: Seconds from starting the worker (a new process on the same data
    #: folder) to its first new decision, with idle_large and idle_small jobs
    #: in its local table (target with 1,000,000: at most 10 s).
    recovery_s_1m_jobs: float = 0.0
    recovery_s_10k_jobs: float = 0.0
    #: The job table's databases on disk with idle_large jobs (MB).
    disk_mb_idle_1m: float = 0.0
    #: A cold restore: cold_restore_jobs jobs (and their index rows) in the
    #: changelog, a worker started on an empty data folder: seconds to its
    #: first new decision, its RSS after (MB), the changelog's bytes as
    #: produced (MB), and the seconds per 100,000 jobs.
    cold_restore_s: float = 0.0
    cold_restore_rss_mb: float = 0.0
    cold_restore_changelog_mb: float = 0.0
    cold_restore_s_per_100k: float = 0.0
    #: The Python heap one entry of the engine's state cache holds (KB,
    #: tracemalloc; a decoded onboarding job): the cache holds at most
    #: LEMONGRAPH_STATE_CACHE entries (10,000 by default).
    state_cache_kb_per_entry: float = 0.0
    #: How the decision core ran (stream/runtime/native.py): compiled with mypyc or not.
    core: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


def render_table(f: Figures) -> str:
    """The figures as a table with the targets beside them."""
    stored = int(f.parameters.get("schedules_total", 100_000))
    due = int(f.parameters.get("schedules_due", 100))
    small = int(f.parameters.get("idle_small", 10_000))
    large = int(f.parameters.get("idle_large", 1_000_000))
    cold = int(f.parameters.get("cold_restore_jobs", 100_000))
    rows = [
        ("raw aiokafka produce", f"{f.raw_produce_per_s:,.0f} records/s", ""),
        ("raw aiokafka consume", f"{f.raw_consume_per_s:,.0f} records/s", ""),
        (
            "Faust agent doing nothing (framework ceiling)",
            f"{f.framework_events_per_s:,.0f} events/s",
            "",
        ),
        ("Faust table write + send per event (naive)", f"{f.naive_events_per_s:,.0f} events/s", ""),
        ("lemongraph engine end to end", f"{f.engine_events_per_s:,.0f} events/s", ""),
        # The targets of issue 35 (benchmarks/README.md).
        ("  engine / naive", f"{f.engine_vs_naive:.2f}×", "target ≥ 4×"),
        ("  engine / framework", f"{f.engine_vs_framework:.2f}×", "target ≥ 0.8×"),
        (
            "  worker CPU per event (median of the rounds)",
            f"{statistics.median(f.engine_worker_cpu_us_per_event_rounds or [0.0]):,.0f} µs",
            "target ≤ 60 µs",
        ),
        (
            "engine end to end, 2 worker processes",
            f"{f.engine_2_workers_events_per_s:,.0f} events/s",
            "",
        ),
        ("latency run: events produced at", f"{f.latency_rate_achieved:,.0f} events/s", ""),
        ("latency p50 (event → task)", f"{f.p50_latency_ms:.1f} ms", ""),
        ("latency p99 (event → task)", f"{f.p99_latency_ms:.1f} ms", "target < 50 ms"),
        ("pure core", f"{f.core_decisions_per_s:,.0f} decisions/s", ""),
        ("state cache, per entry", f"{f.state_cache_kb_per_entry:.1f} KB", "tracemalloc"),
        ("tick, large pending set", f"{f.tick_ms_1m_pending:.1f} ms", "flat in pending"),
        ("tick, 1k pending", f"{f.tick_ms_1k_pending:.1f} ms", ""),
        ("bytes per event, as produced", f"{f.bytes_per_event:,.0f} B", "target ≤ 2 KB"),
        *(
            (f"  {name}", f"{value:,.0f} B", "")
            for name, value in f.bytes_per_event_by_topic.items()
        ),
        (
            f"bytes per event, stored ({f.compression} batches)",
            f"{f.stored_bytes_per_event:,.0f} B",
            "what a broker's disk holds",
        ),
        *(
            (f"  {name}", f"{value:,.0f} B", "")
            for name, value in f.stored_bytes_per_event_by_topic.items()
        ),
        (
            f"bytes per event at the latency run's rate, stored ({f.compression})",
            f"{f.steady_stored_bytes_per_event:,.0f} B",
            f"{f.steady_bytes_per_event:,.0f} B as produced",
        ),
        *(
            (
                f"engine burst, {codec} batches",
                f"{rate:,.0f} events/s",
                f"{f.codec_stored_bytes_per_event.get(codec, 0):,.0f} B stored per event, CPU "
                f"µs per event: worker {f.codec_worker_cpu_us_per_event.get(codec, 0):,.0f}, "
                f"broker {f.codec_broker_cpu_us_per_event.get(codec, 0):,.0f}",
            )
            for codec, rate in f.codec_events_per_s.items()
        ),
        ("recovery after SIGKILL", f"{f.recovery_s:.1f} s", "target ≤ 10 s"),
        ("memory per 100k idle jobs", f"{f.rss_mb_per_100k_jobs:.0f} MB RSS", ""),
        (f"worker idle, {small:,} jobs", f"{f.rss_mb_idle_10k:.0f} MB RSS", ""),
        (f"worker idle, {large:,} jobs", f"{f.rss_mb_idle_1m:.0f} MB RSS", ""),
        (f"  {large:,} / {small:,}", f"{f.rss_idle_ratio:.2f}×", "target ≤ 1.5×"),
        (
            f"restart to first decision, {large:,} jobs",
            f"{f.recovery_s_1m_jobs:.1f} s",
            "target ≤ 10 s",
        ),
        (f"restart to first decision, {small:,} jobs", f"{f.recovery_s_10k_jobs:.1f} s", ""),
        (
            f"cold restore from the changelog, {cold:,} jobs",
            f"{f.cold_restore_s:.1f} s",
            f"{f.cold_restore_changelog_mb:.0f} MB of changelog, RSS "
            f"{f.cold_restore_rss_mb:.0f} MB",
        ),
        (
            f"schedules tick, {stored:,} stored, {due:,} due",
            f"{f.schedule_tick_ms_100k:.1f} ms",
            "",
        ),
        (f"schedules tick, {due:,} stored, {due:,} due", f"{f.schedule_tick_ms_100:.1f} ms", ""),
        (f"  {stored:,} / {due:,}", f"{f.schedule_tick_ratio:.2f}×", "flat: about 1×"),
        ("schedules in memory per 100k", f"{f.schedule_mb_per_100k:.1f} MB", "tracemalloc"),
        ("  RSS per 100k", f"{f.schedule_rss_mb_per_100k:.1f} MB", ""),
        ("schedules in RocksDB per 100k", f"{f.schedule_rocksdb_mb_per_100k:.1f} MB", "SST"),
        ("  assignment to first tick", f"{f.schedule_rebuild_s_100k:.2f} s", "nothing rebuilt"),
        (f.core, "", ""),
    ]
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{width}}  {b:>{value_width}}  {c}".rstrip() for a, b, c in rows)


def figures_json(f: Figures) -> bytes:
    """The figures as one JSON object."""
    return orjson.dumps(asdict(f), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
