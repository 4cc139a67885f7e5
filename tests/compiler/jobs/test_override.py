"""Ending with an override (docs/playbooks.md, "Ending with an override"): a job whose
goals are met while a milestone marked ``ends: completed_with_override`` is done ends
``completed_with_override``, never ``done``; the decision record says so; a scenario
expects it; the field is checked like any other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from compiler import (
    Event,
    JobFinished,
    JobGraph,
    JobState,
    PlaybookError,
    Start,
    Step,
    Tick,
    compile_playbook,
    load_playbook,
    parse_scenarios,
    run_scenario,
)
from topics import DecisionRecord, JobStatus
from topics.build import decision_record

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

#: The coding workflow's shape: the checks pass, or a person accepts the failure.
FIX_OR_ACCEPT: dict[str, Any] = {
    "key": "fix-or-accept",
    "version": 1,
    "complete_when": "any",
    "goals": ["validated", "acceptedAsIs"],
    "milestones": [
        {"id": "validated", "condition": "validation_passed WITHIN 7d"},
        {
            "id": "acceptedAsIs",
            "condition": "failed_validation_accepted WITHIN 7d",
            "ends": "completed_with_override",
        },
    ],
}


def run(spec: dict[str, Any], *events: tuple[float, str]) -> tuple[JobState, list[Step]]:
    """Start a job on ``spec`` and apply each (hours after the start, action)."""
    graph = JobGraph(compile_playbook(spec))
    steps = [graph.next(None, T0, Start("job-1", spec["key"]))]
    for hours, action in events:
        state = steps[-1].state
        at = T0 + timedelta(hours=hours)
        steps.append(graph.next(state, at, Event(action, source="tool")))
    state = steps[-1].state
    assert state is not None
    return state, steps


def finished(steps: list[Step]) -> list[JobFinished]:
    return [e for step in steps for e in step.effects if isinstance(e, JobFinished)]


def test_the_override_path_ends_completed_with_override_and_the_record_says_so() -> None:
    state, steps = run(FIX_OR_ACCEPT, (1, "validation_failed"), (2, "failed_validation_accepted"))
    assert state.status is JobStatus.COMPLETED_WITH_OVERRIDE
    assert str(state.status) == "completed_with_override"  # its wire string
    assert state.ended_at == T0 + timedelta(hours=2)
    assert [(f.status, f.at) for f in finished(steps)] == [
        ("completed_with_override", T0 + timedelta(hours=2))
    ]
    last = steps[-1]
    assert [(t.milestone, t.after, t.reason) for t in last.transitions] == [
        ("acceptedAsIs", "done", "condition TRUE"),
        ("validated", "dropped", "job completed_with_override"),
    ]
    # The decision record as the worker writes it (topics.build) validates and
    # carries the status twice: the job's, and its job.finished effect's.
    record = DecisionRecord.model_validate(
        decision_record("job-1", "fix-or-accept", 1, None, None, last.to_json(), 0, None)
    )
    assert record.status == "completed_with_override"
    assert [e.status for e in record.effects if e.type == "job.finished"] == [
        "completed_with_override"
    ]


def test_the_ordinary_path_ends_done() -> None:
    state, steps = run(FIX_OR_ACCEPT, (1, "validation_failed"), (2, "validation_passed"))
    assert state.status is JobStatus.DONE
    assert [f.status for f in finished(steps)] == ["done"]
    assert state.milestones["acceptedAsIs"].status == "dropped"


def test_an_override_on_the_way_to_the_goal_makes_the_goal_an_override_too() -> None:
    spec = {
        "key": "on-the-way",
        "version": 1,
        "goals": ["applied"],
        "milestones": [
            {"id": "validated", "condition": "validation_passed"},
            {"id": "accepted", "condition": "failure_accepted", "ends": "completed_with_override"},
            {
                "id": "applied",
                "needs": ["validated", "accepted"],
                "merge": "any",
                "condition": "patch_applied",
            },
        ],
    }
    state, _ = run(spec, (1, "failure_accepted"))
    assert state.status is JobStatus.RUNNING  # accepted, the goal still open
    state, _ = run(spec, (1, "failure_accepted"), (2, "patch_applied"))
    assert state.status is JobStatus.COMPLETED_WITH_OVERRIDE
    state, _ = run(spec, (1, "validation_passed"), (2, "patch_applied"))
    assert state.status is JobStatus.DONE


def test_a_failed_job_is_failed_whatever_was_accepted() -> None:
    spec = {
        "key": "fails",
        "version": 1,
        "goals": ["applied"],
        "milestones": [
            {"id": "accepted", "condition": "failure_accepted", "ends": "completed_with_override"},
            {"id": "applied", "needs": ["accepted"], "condition": "patch_applied WITHIN 1d"},
        ],
    }
    state, _ = run(spec, (1, "failure_accepted"))
    graph = JobGraph(compile_playbook(spec))
    step = graph.next(state, T0 + timedelta(days=2), Tick())
    assert step.state is not None
    assert step.state.status is JobStatus.FAILED


def test_an_ended_job_takes_nothing_more() -> None:
    state, _ = run(FIX_OR_ACCEPT, (2, "failed_validation_accepted"))
    graph = JobGraph(compile_playbook(FIX_OR_ACCEPT))
    later = graph.next(state, T0 + timedelta(hours=3), Event("validation_passed", source="tool"))
    assert later.state is not None
    assert later.state.status is JobStatus.COMPLETED_WITH_OVERRIDE
    assert later.transitions == ()
    assert later.effects == ()
    assert later.state.timers == ()  # nothing left to tick


def test_a_playbook_without_ends_registers_the_same_spec() -> None:
    """No existing playbook changes: ``ends`` is left out of the registered JSON."""
    only = [FIX_OR_ACCEPT["milestones"][0]]
    plain = compile_playbook({**FIX_OR_ACCEPT, "goals": ["validated"], "milestones": only})
    assert "ends" not in plain.to_json()["milestones"][0]
    assert plain.overrides == ()
    marked = compile_playbook(FIX_OR_ACCEPT)
    assert marked.to_json()["milestones"][1]["ends"] == "completed_with_override"
    assert marked.overrides == ("acceptedAsIs",)


def test_an_unknown_ends_is_refused_with_a_reason() -> None:
    text = "key: k\nversion: 1\nmilestones:\n  - id: a\n    condition: x\n    ends: success\n"
    with pytest.raises(PlaybookError) as caught:
        load_playbook(text, "k.yaml")
    [problem] = caught.value.problems
    assert (problem.line, problem.column, problem.milestone) == (6, 11, "a")
    assert "'success' is not a way for a job to end: write completed_with_override" in str(problem)


def test_ends_only_on_a_milestone() -> None:
    text = (
        "key: k\nversion: 1\nends: completed_with_override\n"
        "milestones:\n  - id: a\n    condition: x\n"
    )
    with pytest.raises(PlaybookError) as caught:
        load_playbook(text, "k.yaml")
    [problem] = caught.value.problems
    assert str(problem).startswith("k.yaml:3:7: ends: unknown field 'ends'")
    milestones = [{"id": "a", "condition": "x", "ends": 1}]
    with pytest.raises(PlaybookError):  # not a string
        compile_playbook({"key": "k", "version": 1, "milestones": milestones})


SCENARIOS = """\
playbook: fix-or-accept.yaml
scenarios:
  - name: accepted
    base: 2026-03-02T09:00:00Z
    events:
      - {at: 2h, action: failed_validation_accepted}
    expect: {status: completed_with_override, done: [acceptedAsIs], dropped: [validated]}
  - name: wrongly-expected-done
    base: 2026-03-02T09:00:00Z
    events:
      - {at: 2h, action: failed_validation_accepted}
    expect: {status: done}
"""


def test_a_scenario_expects_the_status() -> None:
    playbook = load_playbook(yaml.safe_dump(FIX_OR_ACCEPT), "fix-or-accept.yaml")
    parsed = parse_scenarios(SCENARIOS, "s.scenario.yaml")
    first, second = (run_scenario(playbook, s, "s.scenario.yaml") for s in parsed.scenarios)
    assert first.failures == ()
    assert first.state.status == "completed_with_override"
    assert second.failures == ("status: expected done, got completed_with_override",)
