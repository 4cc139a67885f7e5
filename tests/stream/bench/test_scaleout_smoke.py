"""`lemongraph bench --scale-out`'s run, small, on the suite's broker: two real
workers on four partitions under a steady load, one SIGKILLed and started again
during it. Nothing is lost, nothing decided two ways, tasks once by id, and the
kill's pause is measured (stream/bench/scaleout.py). No speed is asserted."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from stream.bench.scaleout import run_scale_out
from stream.bench.scaleout_figures import ScaleOutPlan, render_scale_out, scale_out_json

# slow: a 45 s test starts among the first, not at the end of the run (tests/conftest.py,
# longest_modules_first)
pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]

#: The smallest run that still kills a worker under load: the suite's session
#: timeout is 3 s (tests/conftest.py), so the killed worker's partitions move
#: about 3 s after the kill, and it is started again 6 s after it.
PLAN = ScaleOutPlan(
    quick=True,
    partitions=4,
    workers=2,
    rate=40.0,
    seconds=14.0,
    kills=((3.0, 1),),
    restart_after=6.0,
    settle_seconds=1.0,
    slice_jobs=40,
    cpu_rounds=1,
    cpu_rate=100.0,
    cpu_seconds=3.0,
    idle_seconds=1.0,
)


def test_scale_out_loses_nothing_and_measures_the_pause(
    kafka_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEMONGRAPH_KAFKA_URL", kafka_url)
    lines: list[str] = []
    f = run_scale_out(True, lines.append, ROOT / "examples", PLAN)
    shown = render_scale_out(f) + "\n" + "\n".join(lines)
    assert f.events == int(PLAN.rate * PLAN.seconds), shown
    assert f.lost == 0, shown
    assert f.decided_differently == 0, shown
    assert f.tasks_differing == 0, shown
    assert not f.failed
    # Every record that was to decide did, once by identity (re-deliveries apart).
    assert f.decisions == f.expected_decisions > 0, shown
    assert f.tasks > 0, shown
    # The kill and the restart, in order; the killed worker's partitions made no
    # decision until its session ended and the group re-joined: a pause of at
    # least the floor (1 s) on at least one partition.
    assert [r.what for r in f.rebalances] == ["kill worker 1", "restart worker 1"], shown
    kill = f.rebalances[0]
    assert kill.paused, shown
    assert kill.max_s >= PLAN.pause_floor_s, shown
    assert f.max_pause_s >= kill.max_s
    assert 0 < f.p50_latency_ms <= f.p99_latency_ms <= f.max_latency_ms, shown
    assert len(f.load_average_before) == 3
    # One CPU round of each: measured, not compared.
    assert len(f.cpu_us_per_event_1_worker_rounds) == 1, shown
    assert len(f.cpu_us_per_event_2_workers_rounds) == 1, shown
    assert f.cpu_us_per_event_1_worker > 0, shown
    assert f.cpu_us_per_event_2_workers > 0, shown
    assert f.idle_cpu_ms_per_s_per_worker > 0, shown
    assert f.cpu_net_us_per_event_1_worker_rounds, shown
    # --json: every figure, the pauses by partition too.
    written = orjson.loads(scale_out_json(f))["scale_out"]
    assert written["lost"] == 0
    assert written["rebalances"][0]["what"] == "kill worker 1"
    assert set(written["rebalances"][0]["by_partition"]) == {"0", "1", "2", "3"}
