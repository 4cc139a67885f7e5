"""benchmarks/bench_core.py runs and prints its labelled figures (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "bench_core.py"


def test_bench_core_quick_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "parameters: quick=True" in out
    for label in (
        r"onboarding: jobs=\d+ decisions=\d+ repeats=\d+",
        r"onboarding: input mix: .*start:applied=\d+",
        r"onboarding: final job status: ",
        r"onboarding: decisions/s = [\d,]+",
        r"onboarding: µs/decision = [\d.]+",
        r"onboarding: decisions/s with state serialised = [\d,]+",
        r"onboarding: state bytes median = \d+, max = \d+",
        r"count evidence: .* after 0 events = \d+, after \d+ events = \d+",
    ):
        assert re.search(label, out), f"missing {label!r} in:\n{out}"
    for n in (1, 10, 50, 200):
        pattern = (
            rf"open milestones N={n}\s+µs/decision = +[\d.]+"
            r"\s+start µs = +[\d.]+\s+state bytes = \d+"
        )
        assert re.search(pattern, out), f"missing the N={n} row in:\n{out}"
