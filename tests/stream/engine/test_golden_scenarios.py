"""Golden scenarios: one file per rule of docs/playbooks.md and docs/decisions.md under
tests/golden, each scenario's expectation written out by hand from those pages. Every scenario must
pass, and every file must be found and run (a silently skipped file fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import TaskClosed, TaskOpened
from stream.cli.simulate import SimulationRun, simulate_files
from stream.runtime.files import scenario_files

GOLDEN = Path(__file__).resolve().parents[2] / "golden"

#: file name → how many scenarios it holds (keep in step with the files).
EXPECTED: dict[str, int] = {
    "agent-claims-move-nothing.scenario.yaml": 5,
    "all-merge-waits-for-every-need.scenario.yaml": 3,
    "any-merge-drops-losing-branch.scenario.yaml": 4,
    "any-merge-drops-pending-chain.scenario.yaml": 1,
    "complete-when-any-two-goals.scenario.yaml": 4,
    "count-upper-bound-knocks-early.scenario.yaml": 4,
    "deadline-fires-before-later-event.scenario.yaml": 3,
    "due-delays-the-task.scenario.yaml": 5,
    "due-orders-tasks-by-time.scenario.yaml": 1,
    "duplicate-idempotency-key-applied-once.scenario.yaml": 4,
    "early-evidence-counts.scenario.yaml": 2,
    "failing-job-opens-no-task.scenario.yaml": 2,
    "any-merge-loser-opens-no-task.scenario.yaml": 2,
    "not-within-completes-at-window-close.scenario.yaml": 4,
    "override-ends-completed-with-override.scenario.yaml": 4,
    "unreachable-when-no-path-survives.scenario.yaml": 2,
    "until-stops-the-clock.scenario.yaml": 3,
    "within-default-30d.scenario.yaml": 4,
}


def _describe(run: SimulationRun) -> str:
    lines = [f"unusable: {e}" for e in run.errors]
    for r in run.results:
        if not r.passed:
            lines.append(f"FAIL {r.source} :: {r.scenario}")
            lines.extend(f"    {f}" for f in r.failures)
    return "\n".join(lines)


def test_every_golden_file_is_listed() -> None:
    found = {p.name for p in scenario_files(GOLDEN)}
    assert found == set(EXPECTED), (
        f"unlisted: {sorted(found - set(EXPECTED))}, missing: {sorted(set(EXPECTED) - found)}"
    )


def test_all_golden_scenarios_are_found() -> None:
    run = simulate_files(scenario_files(GOLDEN))
    assert run.errors == [], _describe(run)
    assert len(run.results) == sum(EXPECTED.values()) == 57


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_file(name: str) -> None:
    path = GOLDEN / name
    run = simulate_files([path])
    assert run.errors == [], _describe(run)
    assert len(run.results) == EXPECTED[name], [r.scenario for r in run.results]
    failures = _describe(run)
    print(failures)
    assert run.passed, failures
    assert all(r.passed for r in run.results), failures
    # A task is only for work that remains: never with an empty frontier, and
    # never opened and closed in one step.
    for result in run.results:
        for step in result.steps:
            opened = {e.task_id for e in step.effects if isinstance(e, TaskOpened)}
            closed = {e.task_id for e in step.effects if isinstance(e, TaskClosed)}
            assert not opened & closed, (result.scenario, opened & closed)
            for effect in step.effects:
                if isinstance(effect, TaskOpened):
                    assert effect.milestone in effect.frontier, (result.scenario, effect)


def test_a_wrong_expectation_is_reported(tmp_path: Path) -> None:
    """A control: the runner must not pass a scenario whose expectation is wrong,
    or every golden file above would pass vacuously."""
    text = (GOLDEN / "until-stops-the-clock.scenario.yaml").read_text(encoding="utf-8")
    wrong = tmp_path / "wrong.scenario.yaml"
    wrong.write_text(
        text.replace(
            "    until: 12h\n    expect:\n      status: running",
            "    until: 12h\n    expect:\n      status: failed",
        ),
        encoding="utf-8",
    )
    run = simulate_files([wrong])
    assert run.errors == []
    failed = [r for r in run.results if not r.passed]
    assert [r.scenario for r in failed] == ["until-before-the-deadline-leaves-the-job-running"]
    assert failed[0].failures == ("status: expected failed, got running",)
