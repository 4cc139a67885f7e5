"""``lemongraph simulate`` and ``check`` on scenario files that declare schedules
(docs/schedules.md, "Proving schedules on a virtual clock"), through the real
console script; and the shipped examples/schedules.scenario.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.stream.cli.test_cli_simulate_check import PLAYBOOKS, run
from topics import HeartbeatAlert, ScheduleRunRecord

SCHEDULES = """\
schedules:
  - id: nightly
    name: Nightly export
    schedule: "30 2 * * *"
    timezone: America/New_York
    action: {type: start_job, playbook_key: export}
  - id: queue-check
    name: Queue check
    schedule: every 30m
    action: {type: prompt, agent: queue_watcher, prompt: "Check the queue."}
    meta: {heartbeat: true}
    deliver_to: email:ops@example.com
"""

SCENARIO = """\
schedules: schedules.yaml
scenarios:
  - name: spring-forward-night
    base: 2026-03-08T05:00:00Z
    until: 2h45m
    down: [{from: 1h15m, to: 2h10m}]
    replies:
      queue-check: [HEARTBEAT_OK, HEARTBEAT_OK, "The queue is stuck.", HEARTBEAT_OK]
    expect:
      runs:
        - 2026-03-08T05:30:00Z queue-check suppressed
        - 2026-03-08T06:00:00Z queue-check suppressed
        - 2026-03-08T06:30:00Z queue-check missed
        - 2026-03-08T07:00:00Z nightly completed
        - 2026-03-08T07:00:00Z queue-check completed
        - 2026-03-08T07:30:00Z queue-check suppressed
      count: {suppressed: 3, missed: 1, completed: 2}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "schedules.yaml").write_text(SCHEDULES, encoding="utf-8")
    (tmp_path / "night.scenario.yaml").write_text(SCENARIO, encoding="utf-8")
    return tmp_path


def test_simulate_shows_every_run(folder: Path) -> None:
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        f"PASS  {folder}/night.scenario.yaml :: spring-forward-night  → "
        "6 run(s): 3 suppressed, 1 missed, 2 completed",
        "1 passed, 0 failed",
    ]


def test_the_trace_shows_local_times_and_deliveries(folder: Path) -> None:
    proc = run("simulate", "--dir", str(folder), "--trace")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # 02:30 EST does not exist that night: the nightly run is at 03:00 EDT, at +2h10m
    # (the worker was down at 07:00Z and came back at 07:10Z).
    nightly = [line for line in lines if "nightly completed" in line]
    assert len(nightly) == 1
    assert nightly[0].split()[0] == "+2h10m"
    assert "(2026-03-08 03:00 EDT)" in nightly[0]
    delivered = [line for line in lines if "↳ deliver to" in line]
    assert len(delivered) == 1
    assert "email:ops@example.com" in delivered[0]
    assert "'Queue check: The queue is stuck.'" in delivered[0]
    # The alert's own record, before its delivery (docs/schedules.md, "Heartbeats").
    alerted = [line for line in lines if "↳ heartbeat.alert" in line]
    assert len(alerted) == 1
    assert "heartbeat.alert warning (run sl-" in alerted[0]
    assert lines.index(alerted[0]) < lines.index(delivered[0])
    assert "queue-check missed" in proc.stdout
    assert lines[-1] == "1 passed, 0 failed"


def test_json_carries_the_records_the_worker_would_write(folder: Path) -> None:
    proc = run("simulate", "--dir", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(proc.stdout)["results"]
    assert result["kind"] == "schedules"
    assert result["passed"] is True
    assert result["runs"] == yaml.safe_load(SCENARIO)["scenarios"][0]["expect"]["runs"]
    assert result["counts"] == {"suppressed": 3, "missed": 1, "completed": 2}
    # Every record is a valid schedule-runs record (the topics model, not ours).
    records = [ScheduleRunRecord.model_validate(r) for r in result["records"]]
    assert {r.status for r in records} == {"running", "suppressed", "missed", "completed"}
    suppressed = [r for r in records if r.status == "suppressed"]
    assert all(r.suppressed and r.output == "HEARTBEAT_OK" for r in suppressed)
    assert [d["target"] for d in result["deliveries"]] == ["email:ops@example.com"]
    (alert,) = [HeartbeatAlert.model_validate(a) for a in result["alerts"]]
    assert (alert.severity, alert.status, alert.delivered_to) == (
        "warning", "completed", "email:ops@example.com",
    )  # fmt: skip


def test_a_missed_expectation_exits_1_and_says_what(folder: Path) -> None:
    wrong = SCENARIO.replace("2026-03-08T07:00:00Z nightly", "2026-03-08T07:30:00Z nightly")
    (folder / "night.scenario.yaml").write_text(wrong, encoding="utf-8")
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1] == (
        "      runs: #4: expected '2026-03-08T07:30:00Z nightly completed', "
        "got '2026-03-08T07:00:00Z nightly completed'"
    )


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ('schedule: "30 2 * * *"', 'schedule: "61 2 * * *": minute field (position 1)'),
        ("timezone: America/New_York", "timezone"),
        ("playbook_key: export}", "action"),
    ],
)
def test_an_invalid_schedule_exits_2_naming_file_line_and_field(
    folder: Path, bad: str, words: str
) -> None:
    broken = {
        'schedule: "30 2 * * *"': 'schedule: "61 2 * * *"',
        "timezone: America/New_York": "timezone: America/Nowhere",
        "playbook_key: export}": "playbok_key: export}",
    }[bad]
    (folder / "schedules.yaml").write_text(SCHEDULES.replace(bad, broken), encoding="utf-8")
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[0]
    assert error.startswith(f"error: {folder}/schedules.yaml:2: schedules[0] (nightly): "), error
    assert words in error, error
    check = run("check", str(folder / "night.scenario.yaml"))
    assert check.returncode == 1
    assert words in check.stdout


def test_inline_schedules_and_check(folder: Path) -> None:
    inline = SCENARIO.replace(
        "schedules: schedules.yaml\n",
        "schedules:\n" + "".join(f"  {line}\n" for line in SCHEDULES.splitlines()[1:]),
    )
    (folder / "schedules.yaml").unlink()
    (folder / "night.scenario.yaml").write_text(inline, encoding="utf-8")
    assert run("simulate", "--dir", str(folder)).returncode == 0
    check = run("check", str(folder))
    assert check.returncode == 0, check.stdout
    assert check.stdout.strip() == "ok: 1 file(s) valid"


def test_a_missing_schedules_file_exits_2(folder: Path) -> None:
    (folder / "schedules.yaml").unlink()
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 2
    assert "schedules 'schedules.yaml' not found" in proc.stderr


def test_the_shipped_schedules_scenarios_pass() -> None:
    shipped = PLAYBOOKS / "schedules.scenario.yaml"
    assert (PLAYBOOKS / "schedules.yaml").is_file()  # what lemongraph dev registers
    proc = run("simulate", "--dir", str(PLAYBOOKS), "schedules", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)["results"]
    wanted = [s["name"] for s in yaml.safe_load(shipped.read_text())["scenarios"]]
    assert [r["scenario"] for r in results] == wanted
    assert all(r["passed"] and r["kind"] == "schedules" for r in results)


def test_an_invalid_inline_schedule_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "x.scenario.yaml").write_text(
        "schedules:\n"
        "  - {id: ok, name: Ok, schedule: hourly, action: {type: start_job, playbook_key: p}}\n"
        "  - {id: bad, name: Bad, schedule: every 7m, action: {type: start_job, playbook_key: p}}\n"
        "scenarios: [{name: s, base: 2026-01-05T09:00:00Z, until: 1d}]\n",
        encoding="utf-8",
    )
    proc = run("simulate", "--dir", str(tmp_path))
    assert proc.returncode == 2
    error = proc.stderr.strip().splitlines()[0]
    assert error.startswith(f"error: {tmp_path}/x.scenario.yaml:3: schedules[1] (bad): schedule:")
    assert "7" in error
