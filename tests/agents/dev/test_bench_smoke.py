"""`lemongraph bench-agents` keeps working: a small run measures every figure and
writes them to the JSON file. Speed is not asserted (benchmarks print figures)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]


def test_bench_agents_measures_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "agents.json"
    env = dict(os.environ, LEMONGRAPH_PLAYBOOKS_DIR=str(ROOT / "examples"))
    env.pop("LEMONGRAPH_KAFKA_URL", None)  # its own embedded broker, as documented
    env.pop("LEMONGRAPH_FETCH_MAX_WAIT_MS", None)  # the default the benchmark measures
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lemongraph"), "bench-agents", "--jobs", "20",
         "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = orjson.loads(out.read_bytes())
    assert figures["jobs"] == 20
    for key, value in figures.items():
        assert value > 0, (key, value)
    assert figures["service_vs_direct"] == pytest.approx(
        figures["service_model_calls_per_s"] / figures["direct_model_calls_per_s"]
    )
    # two model calls and one tool call per job, in both parts
    assert figures["direct_model_calls_per_s"] == pytest.approx(
        2 * figures["direct_tool_calls_per_s"]
    )
    assert figures["service_model_calls_per_s"] == pytest.approx(
        2 * figures["service_tool_calls_per_s"]
    )
    # the history bound cuts the tokens of a long conversation
    assert (
        figures["tokens_onboarding_first"]
        < figures["tokens_onboarding_bounded"]
        < figures["tokens_onboarding_unbounded"]
    )
    assert "service / direct" in result.stdout
