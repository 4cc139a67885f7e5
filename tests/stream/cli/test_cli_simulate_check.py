"""``lemongraph simulate`` and ``lemongraph check`` (docs/scenarios.md;
docs/playbooks.md, 'Checking a playbook'): the click command in the test's process
(tests/inprocess.py); the shipped playbooks' simulate and check run the real
console script as a process, the way a user runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.inprocess import LEMONGRAPH, lemongraph

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = ROOT / "examples"

PLAYBOOK = """\
key: cli-pb
version: 1
milestones:
  - id: first
    condition: a OR b WITHIN 1d
  - id: second
    needs: [first]
    condition: c WITHIN 1d
"""

PASSING = """\
playbook: cli-pb.yaml
scenarios:
  - name: alpha-passes
    base: 2026-01-05T09:00:00Z
    events:
      - {at: 1h, action: a}
      - {at: 2h, action: c, source: tool}
    expect:
      status: done
      done: [first, second]
      tasks: [first, second]
"""

FAILING = """\
playbook: cli-pb.yaml
scenarios:
  - name: beta-misses
    base: 2026-01-05T09:00:00Z
    events:
      - {at: 1h, action: a, source: agent}
    until: 2h
    expect:
      status: done
      done: [first]
"""


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``lemongraph ARGS`` with no LEMONGRAPH_ setting but ``env``'s: in the test's
    process (tests/inprocess.py), or with ``process`` through the console script."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    environ.update(env or {})
    return lemongraph(*args, cwd=cwd or ROOT, env=environ, process=process)


def count_scenarios(folder: Path) -> int:
    """Counted with PyYAML, not with the code under test."""
    total = 0
    for path in folder.rglob("*.scenario.yaml"):
        total += len(yaml.safe_load(path.read_text(encoding="utf-8"))["scenarios"])
    return total


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "cli-pb.yaml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "alpha.scenario.yaml").write_text(PASSING, encoding="utf-8")
    return tmp_path


def test_the_script_exists() -> None:
    assert LEMONGRAPH.is_file(), LEMONGRAPH


# -- simulate -------------------------------------------------------------------


def test_simulate_the_shipped_playbooks_passes() -> None:
    # the console script as its own process (the rest of this module runs in-process)
    proc = run("simulate", "--dir", str(PLAYBOOKS), process=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    n = count_scenarios(PLAYBOOKS)
    assert n > 0
    assert sum(line.startswith("PASS ") for line in lines) == n
    assert not any(line.startswith(("FAIL", "ERROR")) for line in lines)
    assert lines[-1] == f"{n} passed, 0 failed"


def test_simulate_reads_the_configured_folder(folder: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    proc = run("simulate", cwd=elsewhere, env={"LEMONGRAPH_PLAYBOOKS_DIR": str(folder)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alpha-passes" in proc.stdout


def test_simulate_a_missing_folder_exits_2(tmp_path: Path) -> None:
    proc = run("simulate", "--dir", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "nope" in proc.stderr


def test_simulate_json_structure() -> None:
    proc = run("simulate", "--json", "--dir", str(PLAYBOOKS))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) >= {"results", "coverage"}
    assert len(data["results"]) == count_scenarios(PLAYBOOKS)
    for result in data["results"]:
        assert set(result) >= {"file", "scenario", "passed", "status", "milestones", "failures"}
        assert result["passed"] is True
        assert result["failures"] == []
        if result.get("kind") == "schedules":  # no job: runs instead (docs/schedules.md)
            assert (result["status"], result["milestones"]) == (None, {})
            assert result["runs"]
            continue
        assert result["status"] in ("running", "done", "failed", "completed_with_override")
        assert result["file"].endswith(".scenario.yaml")
        assert all(isinstance(v, str) for v in result["milestones"].values())
    by_name = {r["scenario"]: r for r in data["results"]}
    # From examples/onboarding.scenario.yaml, read by hand.
    assert by_name["self-service-path"]["milestones"] == {
        "collectIdentity": "done",
        "bookCall": "dropped",
        "selfServe": "done",
        "activateAccount": "done",
    }
    assert set(data["coverage"]) >= {"onboarding", "lead-qualification", "payment-reminders"}


def test_simulate_json_reports_a_failure(folder: Path) -> None:
    (folder / "beta.scenario.yaml").write_text(FAILING, encoding="utf-8")
    proc = run("simulate", "--json", "--dir", str(folder))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    results = {r["scenario"]: r for r in data["results"]}
    assert results["alpha-passes"]["passed"] is True
    beta = results["beta-misses"]
    assert beta["passed"] is False
    assert beta["status"] == "running"
    assert beta["milestones"] == {"first": "open", "second": "pending"}
    assert "status: expected done, got running" in beta["failures"]
    assert any("first" in f and "done" in f for f in beta["failures"])


def test_simulate_a_failing_scenario_exits_1(folder: Path) -> None:
    (folder / "beta.scenario.yaml").write_text(FAILING, encoding="utf-8")
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^PASS .*alpha-passes", out, re.M)
    assert re.search(r"^FAIL .*beta-misses", out, re.M)
    assert "status: expected done, got running" in out
    assert "expected but not done: first" in out
    assert out.splitlines()[-1] == "1 passed, 1 failed"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "playbook: missing.yaml\nscenarios:\n  - name: x\n    base: 2026-01-05T09:00:00Z\n",
            "missing.yaml",
        ),
        ("playbook: cli-pb.yaml\nscenarios: [\n", "bad.scenario.yaml"),
        (
            "playbook: cli-pb.yaml\nscenarios:\n  - name: x\n    base: 2026-01-05T09:00:00Z\n"
            "    events:\n      - {at: soon, action: a}\n",
            "soon",
        ),
        (
            "playbook: cli-pb.yaml\nscenarios:\n  - name: x\n    base: 2026-01-05T09:00:00\n",
            "base",
        ),
    ],
    ids=["missing-playbook", "bad-yaml", "bad-offset", "naive-base"],
)
def test_simulate_an_unusable_file_exits_2(folder: Path, text: str, words: str) -> None:
    bad = folder / "bad.scenario.yaml"
    bad.write_text(text, encoding="utf-8")
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors, proc.stderr
    assert str(bad) in errors[0]
    assert words in proc.stderr
    # The usable file still ran.
    assert "alpha-passes" in proc.stdout


def test_simulate_an_unusable_inline_playbook_exits_2(folder: Path) -> None:
    bad = folder / "inline.scenario.yaml"
    bad.write_text(
        "playbook: {key: k, version: 1, milestones: [{id: a, needs: [ghost], condition: x}]}\n"
        "scenarios:\n  - name: x\n    base: 2026-01-05T09:00:00Z\n",
        encoding="utf-8",
    )
    proc = run("simulate", "--dir", str(folder))
    assert proc.returncode == 2
    assert str(bad) in proc.stderr
    assert "ghost" in proc.stderr


def test_simulate_filter_keeps_matching_files(folder: Path) -> None:
    (folder / "beta.scenario.yaml").write_text(FAILING, encoding="utf-8")
    proc = run("simulate", "alpha", "--dir", str(folder))
    assert proc.returncode == 0, proc.stdout
    assert "alpha-passes" in proc.stdout
    assert "beta-misses" not in proc.stdout
    proc = run("simulate", "beta", "--dir", str(folder))
    assert proc.returncode == 1
    assert "beta-misses" in proc.stdout
    assert "alpha-passes" not in proc.stdout


def test_simulate_filter_matching_nothing_exits_2(folder: Path) -> None:
    proc = run("simulate", "zeta", "--dir", str(folder))
    assert proc.returncode == 2
    assert "zeta" in proc.stderr
    # It says what FILTER matches, and lists the files and their scenario names.
    assert "FILTER matches scenario file paths, not scenario names" in proc.stderr
    assert f"{folder / 'alpha.scenario.yaml'}: alpha-passes" in proc.stderr


def test_simulate_filter_naming_a_scenario_points_at_its_file(folder: Path) -> None:
    proc = run("simulate", "passes", "--dir", str(folder))
    assert proc.returncode == 2
    assert "(alpha-passes matches 'passes': give part of this path)" in proc.stderr


def test_simulate_filter_on_the_shipped_playbooks() -> None:
    proc = run("simulate", "onboarding", "--dir", str(PLAYBOOKS))
    assert proc.returncode == 0
    files = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PASS")}
    assert len(files) == 1
    assert files.pop().endswith("onboarding.scenario.yaml")


def test_simulate_trace(folder: Path) -> None:
    proc = run("simulate", "--trace", "--dir", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    # inputs, with their offsets
    assert re.search(r"\+0s\s+job\.start cli-pb", out)
    assert re.search(r"\+1h\s+event a \(source world", out)
    assert re.search(r"\+2h\s+event c \(source tool", out)
    # verdicts with the atoms that decided them
    assert re.search(r"verdict first: TRUE", out)
    assert re.search(r"a: TRUE \(count 1\) evidence e1", out)
    assert re.search(r"b: UNKNOWN \(count 0\)", out)
    # transitions
    assert "first: pending → open" in out
    assert "first: open → done" in out
    assert "second: pending → open" in out
    # effects
    assert "task.opened first" in out
    assert "task.closed first  outcome done" in out
    assert "timer set settle second" in out
    assert "timer cancelled settle first" in out
    assert "job finished: done" in out


def test_simulate_coverage_shows_or_branches(folder: Path) -> None:
    proc = run("simulate", "--coverage", "--dir", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "coverage of playbook cli-pb" in out
    assert "OR branch 'a': TRUE 1×" in out
    assert "OR branch 'b': never TRUE" in out
    first = next(line for line in out.splitlines() if line.strip().startswith("first "))
    assert "done:✓" in first
    assert "knocked:·" in first


def test_simulate_coverage_in_json(folder: Path) -> None:
    proc = run("simulate", "--json", "--dir", str(folder))
    data = json.loads(proc.stdout)
    cov = data["coverage"]["cli-pb"]
    assert cov["or_branches"]["first"] == {"a": 1, "b": 0}
    assert set(cov["milestones"]["first"]) == {"open", "done"}


# -- check ----------------------------------------------------------------------


def test_check_the_shipped_playbooks() -> None:
    # the console script as its own process (the rest of this module runs in-process)
    proc = run("check", str(PLAYBOOKS), process=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every playbook, scenario, catalog and flow file; a flow's stand-in model
    # script (flows/NAME.standin.yaml) is the stand-in's, not one check reads.
    n = sum(
        1
        for p in PLAYBOOKS.rglob("*")
        if p.suffix in (".yaml", ".yml", ".json") and ".standin." not in p.name
    )
    assert n >= 11
    assert proc.stdout.strip() == f"ok: {n} file(s) valid"


def test_check_a_valid_folder(folder: Path) -> None:
    proc = run("check", str(folder))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.strip() == "ok: 2 file(s) valid"


BAD_GRAPH = """\
key: bad-graph
version: 1
goals: [second, nope]
milestones:
  - id: first
    condition: a
  - id: second
    needs: [first, ghost]
    condition: b
"""

BAD_CONDITION = """\
key: bad-condition
version: 1
milestones:
  - id: only
    condition: a AND b)
"""


def test_check_prints_one_line_per_problem(tmp_path: Path) -> None:
    graph = tmp_path / "graph.yaml"
    graph.write_text(BAD_GRAPH, encoding="utf-8")
    cond = tmp_path / "cond.yaml"
    cond.write_text(BAD_CONDITION, encoding="utf-8")
    proc = run("check", str(graph), str(cond))
    assert proc.returncode == 1, proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, lines
    for line in lines:
        assert re.match(r"^.+\.yaml:\d+:\d+: \S", line), line
    # positions counted by hand
    assert any(line.startswith(f"{graph}:8:20: milestone second: ") for line in lines)
    assert any(line.startswith(f"{graph}:3:17: ") and "nope" in line for line in lines)
    assert any(line.startswith(f"{cond}:5:23: milestone only: condition: ") for line in lines)
    assert not any("^" in line for line in lines)


def test_check_a_folder_with_bad_files(tmp_path: Path) -> None:
    (tmp_path / "graph.yaml").write_text(BAD_GRAPH, encoding="utf-8")
    (tmp_path / "cond.yaml").write_text(BAD_CONDITION, encoding="utf-8")
    (tmp_path / "fine.yaml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a playbook", encoding="utf-8")
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, lines
    assert all(re.match(r"^.+\.yaml:\d+:\d+: ", line) for line in lines)


def test_check_a_bad_scenario_file(folder: Path) -> None:
    bad = folder / "bad.scenario.yaml"
    bad.write_text(
        "playbook: cli-pb.yaml\nscenarios:\n  - name: x\n    base: 2026-01-05T09:00:00Z\n"
        "    events:\n      - {at: soon, action: a}\n",
        encoding="utf-8",
    )
    proc = run("check", str(folder))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, lines
    # line 6, and `soon` starts at column 14 of "      - {at: soon, action: a}"
    assert lines[0].startswith(f"{bad}:6:14: ")


UNKNOWN_MILESTONE = """\
playbook: cli-pb.yaml
scenarios:
  - name: names-a-ghost
    base: 2026-01-05T09:00:00Z
    expect:
      done: [first, secnd]
"""


@pytest.mark.parametrize("command", ["check", "simulate"])
def test_an_expectation_naming_an_unknown_milestone_is_refused(folder: Path, command: str) -> None:
    bad = folder / "ghost.scenario.yaml"
    bad.write_text(UNKNOWN_MILESTONE, encoding="utf-8")
    proc = run(command, *([str(bad)] if command == "check" else ["--dir", str(folder)]))
    assert proc.returncode == (1 if command == "check" else 2), proc.stdout + proc.stderr
    line = f"{bad}:6:21: scenarios.0.expect.done.1: unknown milestone 'secnd' (did you mean "
    line += "'second'?); playbook cli-pb has first, second"
    assert line in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        (
            "    base: 2026-03-02T09:00:00\n",
            ":4:11: scenarios.0.base: base must have a time zone, e.g. 2026-03-02T09:00:00Z",
        ),
        (
            "    base: 2026-03-02T09:00:00Z\n    expect:\n      completed: [first]\n",
            ":6:18: scenarios.0.expect.completed: unknown field 'completed' (did you mean 'done'?)",
        ),
    ],
)
def test_check_a_scenario_says_what_to_write(folder: Path, scenario: str, message: str) -> None:
    bad = folder / "bad.scenario.yaml"
    bad.write_text("playbook: cli-pb.yaml\nscenarios:\n  - name: x\n" + scenario, encoding="utf-8")
    proc = run("check", str(bad))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [f"{bad}{message}"]


def test_check_refuses_a_due_its_window_never_reaches_inline_too(tmp_path: Path) -> None:
    path = tmp_path / "late.scenario.yaml"
    path.write_text(
        "playbook:\n  key: late\n  version: 1\n  milestones:\n    - id: chase\n"
        "      condition: x AND NOT y WITHIN 4h\n      due: 5h\n"
        "scenarios:\n  - name: s\n    base: 2026-01-05T09:00:00Z\n",
        encoding="utf-8",
    )
    proc = run("check", str(path))
    assert proc.returncode == 1
    (line,) = proc.stdout.splitlines()
    assert re.match(
        re.escape(str(path)) + r".*:7:12: milestone chase: due: 5h is not shorter ", line
    )
    assert "its window, WITHIN 4h" in line


def test_check_a_missing_path(tmp_path: Path) -> None:
    proc = run("check", str(tmp_path / "ghost.yaml"))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [f"{tmp_path / 'ghost.yaml'}: no such file or folder"]


def test_check_malformed_yaml_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("key: p\nversion: 1\nmilestones: [\n", encoding="utf-8")
    proc = run("check", str(bad))
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0].startswith(f"{bad}:4:1: ")


INLINE_BAD = """\
playbook:
  key: inline
  version: 1
  milestones:
    - id: a
      needs: [ghost]
      condition: x AND y)
scenarios:
  - name: never-runs
    base: 2026-01-05T09:00:00Z
"""


def test_check_an_inline_playbook_points_into_the_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "inline.scenario.yaml"
    path.write_text(INLINE_BAD, encoding="utf-8")
    proc = run("check", str(path))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines
    where = re.escape(str(path)) + r"( \(inline playbook\))?"
    # "      needs: [ghost]": ghost at column 15; "      condition: x AND y)": ')' at 25
    assert any(re.match(where + r":6:15: milestone a: ", line) for line in lines), lines
    assert any(re.match(where + r":7:25: milestone a: condition: ", line) for line in lines)


def test_check_an_inline_playbook_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "inline.scenario.yaml"
    path.write_text(INLINE_BAD, encoding="utf-8")
    proc = run("check", str(path))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines
    assert all(line.startswith(str(path)) for line in lines)
    assert any("ghost" in line for line in lines)


def test_simulate_the_golden_scenarios_through_the_cli() -> None:
    golden = ROOT / "tests" / "golden"
    proc = run("simulate", "--dir", str(golden))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = count_scenarios(golden)
    assert proc.stdout.splitlines()[-1] == f"{n} passed, 0 failed"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--prop", "deep=" + '{"a":' * 40 + "1" + "}" * 40], "nested deeper than 32 levels"),
        (["--value", str(2**70)], "value: integers must fit in 64 bits"),
    ],
    ids=["nested-prop", "2**70"],
)
def test_send_event_refuses_what_the_worker_would_dead_letter_before_sending(
    args: list[str], reason: str
) -> None:
    # No broker is reachable at this address: the refusal comes first.
    env = {**os.environ, "LEMONGRAPH_KAFKA_URL": "kafka://127.0.0.1:9"}
    done = subprocess.run(
        [str(LEMONGRAPH), "send-event", "job-1", "noted", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert "not sent: " in done.stderr
    assert reason in done.stderr
