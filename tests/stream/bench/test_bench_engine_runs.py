"""benchmarks/bench_engine.py runs and reports its figures (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "bench_engine.py"


def test_bench_engine_quick_reports_cpu_and_bytes_by_topic() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--jobs", "60", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["inbox_records"] > 60
    assert out["decisions"] > 60
    assert len(out["process_us_per_event_rounds"]) == 2
    assert out["process_us_per_event"] > 0
    topics = out["bytes_per_event_by_topic"]
    for name in ("decisions", "tasks", "engine-jobstate-changelog"):
        assert topics[name] > 0, name
    assert abs(sum(topics.values()) - out["bytes_per_event"]) < 1e-6
