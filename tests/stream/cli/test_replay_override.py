"""``lemongraph replay`` re-derives ``completed_with_override`` (docs/playbooks.md,
"Ending with an override"): a recorded history that ends so replays with no
mismatch, and one whose record says ``done`` instead is caught."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from compiler import Event, Input, JobGraph, JobState, Start, compile_playbook
from stream.cli.replay import replay_decisions
from stream.engine.registry import Registry
from tests.compiler.jobs.test_override import FIX_OR_ACCEPT
from topics.build import decision_record

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def history() -> list[dict[str, Any]]:
    """The decision records of a job a person's override ended, as the worker
    writes them (topics.build), each chained to the previous state's hash."""
    graph = JobGraph(compile_playbook(FIX_OR_ACCEPT))
    inputs: list[Input] = [Start("job-1", "fix-or-accept"), Event("failed_validation_accepted")]
    records: list[dict[str, Any]] = []
    state: JobState | None = None
    for hours, given in enumerate(inputs):
        step = graph.next(state, T0 + timedelta(hours=hours), given)
        prev = state.hash if state is not None else None
        body = step.to_json()
        records.append(decision_record("job-1", "fix-or-accept", 1, None, prev, body, 0, None))
        state = step.state
    return records


def test_a_history_that_ends_with_an_override_replays() -> None:
    registry = Registry([compile_playbook(FIX_OR_ACCEPT)])
    records = history()
    assert records[-1]["status"] == "completed_with_override"
    report = replay_decisions(records, registry)
    assert report.ok, report.jobs["job-1"].mismatches
    final = report.jobs["job-1"].state
    assert final is not None
    assert final.status == "completed_with_override"
    # A record that says done where the core says completed_with_override is caught.
    forged = [*records[:-1], {**records[-1], "status": "done"}]
    mismatches = replay_decisions(forged, registry).jobs["job-1"].mismatches
    assert any("status" in m for m in mismatches), mismatches
