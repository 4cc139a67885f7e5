"""`lemongraph bench --quick` keeps working: every figure is measured and written
to the JSON file. Speed is not asserted here (benchmarks print figures)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[3]
KEYS = (
    "raw_produce_per_s",
    "framework_events_per_s",
    "naive_events_per_s",
    "engine_events_per_s",
    "engine_2_workers_events_per_s",
    "p50_latency_ms",
    "latency_rate_achieved",
    "p99_latency_ms",
    "core_decisions_per_s",
    "tick_ms_1m_pending",
    "tick_ms_1k_pending",
    "recovery_s",
    "rss_mb_per_100k_jobs",
    "rss_mb_idle_10k",
    "rss_mb_idle_1m",
    "rss_idle_ratio",
    "recovery_s_1m_jobs",
    "recovery_s_10k_jobs",
    "cold_restore_s",
    "cold_restore_rss_mb",
    "cold_restore_changelog_mb",
    "state_cache_kb_per_entry",
    "schedule_tick_ms_100k",
    "schedule_tick_ms_100",
    "schedule_tick_ratio",
    "schedule_mb_per_100k",
    "schedule_rss_mb_per_100k",
    "schedule_rocksdb_mb_per_100k",
    "schedule_row_mb_per_100k",
    "schedule_rebuild_s_100k",
    "bytes_per_event",
    "stored_bytes_per_event",
    "steady_bytes_per_event",
    "steady_stored_bytes_per_event",
)
#: The topics the worker writes for every event (by name after the run's prefix).
EVERY_EVENT = ("tasks", "decisions", "engine-jobstate-changelog")


def test_bench_quick_measures_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    # LEMONGRAPH_BENCH_SMOKE: --quick on a smaller workload (stream/bench/run.py,
    # Parameters.for_run); the same figures, measured, not their speed.
    env = dict(
        os.environ, LEMONGRAPH_PLAYBOOKS_DIR=str(ROOT / "examples"), LEMONGRAPH_BENCH_SMOKE="1"
    )
    env.pop("LEMONGRAPH_KAFKA_URL", None)  # its own embedded broker, as documented
    env.pop("LEMONGRAPH_FETCH_MAX_WAIT_MS", None)  # the default the benchmark measures
    env.pop("LEMONGRAPH_KAFKA_COMPRESSION", None)  # the default codec
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lemongraph"), "bench", "--quick", "--json", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=380,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = orjson.loads(out.read_bytes())
    for key in KEYS:
        assert figures[key] > 0, (key, figures[key])
    assert figures["parameters"]["quick"] is True
    # The latency run produces at roughly the rate it names (it once waited for
    # each ack in turn and reached a sixth of it). This checks the benchmark's
    # honesty, not anyone's speed, so the bound is loose enough for a busy machine.
    assert figures["latency_rate_achieved"] > 0.5 * figures["parameters"]["latency_rate"]
    assert figures["engine_vs_naive"] == pytest.approx(
        figures["engine_events_per_s"] / figures["naive_events_per_s"]
    )
    # The throughput figures are the medians of their rounds, one CPU figure
    # per engine round (worker and broker).
    rounds = figures["parameters"]["throughput_rounds"]
    for name in ("engine", "naive"):
        each = figures[f"{name}_events_per_s_rounds"]
        assert len(each) == rounds, (name, each)
        assert figures[f"{name}_events_per_s"] == pytest.approx(statistics.median(each))
    for name in ("worker", "broker"):
        cpu = figures[f"engine_{name}_cpu_us_per_event_rounds"]
        assert len(cpu) == rounds, (name, cpu)
        assert min(cpu) > 0, (name, cpu)
    assert figures["schedule_tick_ratio"] == pytest.approx(
        figures["schedule_tick_ms_100k"] / figures["schedule_tick_ms_100"]
    )
    # Bytes per event: every topic the worker writes for an event is counted, the
    # parts add up, and the default codec (zstd) stores fewer bytes than none on
    # the same burst (the batches are compressed on the broker, not only sent so).
    assert figures["compression"] == "zstd"
    by_topic = figures["bytes_per_event_by_topic"]
    for topic in EVERY_EVENT:
        assert by_topic[topic] > 0, (topic, by_topic)
        assert figures["stored_bytes_per_event_by_topic"][topic] > 0, topic
        assert figures["records_per_event_by_topic"][topic] > 0, topic
    assert sum(by_topic.values()) == pytest.approx(figures["bytes_per_event"], abs=1.0)
    assert set(figures["codec_events_per_s"]) == {"none", "zstd"}
    assert min(figures["codec_events_per_s"].values()) > 0
    stored = figures["codec_stored_bytes_per_event"]
    assert 0 < stored["zstd"] < stored["none"], stored
    # CPU per event of the worker and of the embedded broker, for each codec.
    for cpu in ("codec_worker_cpu_us_per_event", "codec_broker_cpu_us_per_event"):
        assert set(figures[cpu]) == {"none", "zstd"}, figures[cpu]
        assert min(figures[cpu].values()) > 0, (cpu, figures[cpu])
    assert "bytes per event" in result.stdout
    assert "engine / framework" in result.stdout
    assert "schedules tick" in result.stdout
    assert "parameters:" in result.stdout
