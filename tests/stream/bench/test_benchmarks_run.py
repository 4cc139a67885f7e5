"""The benchmark scripts still run. No timing is asserted: only that they finish
and print the lines they promise."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NUMBER = r"[0-9][0-9,]*(\.[0-9]+)?"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--quick"], {}, id="flag"),
        pytest.param([], {"LEMONGRAPH_BENCH_QUICK": "1"}, id="env"),
    ],
)
def test_bench_condition_runs_quick(args: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_condition.py"), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **env},
        capture_output=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^condition: .+ WITHIN 24h$", out, re.M)
    assert re.search(r"^atoms: 5$", out, re.M)
    assert re.search(r"^parameters: .*quick=True", out, re.M)
    for world in ("open", "closed"):
        assert re.search(
            rf"^evaluate \({world} world, 200 facts, verdict \w+\): {NUMBER} evaluations/s",
            out,
            re.M,
        ), out
    for earlier in ("10", "10000"):
        assert re.search(
            rf"^monitor feed \+ verdict after {earlier} earlier occurrences: {NUMBER} µs$",
            out,
            re.M,
        ), out
    assert re.search(rf"^ratio \(after 10000 / after 10\): {NUMBER}$", out, re.M), out
