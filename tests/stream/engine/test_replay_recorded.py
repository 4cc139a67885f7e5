"""Replaying a decision log recorded by an older core (docs/decisions.md,
"Replaying an older log"). tests/recorded/early-evidence-7696b61.jsonl was
written by the engine of commit 7696b61, before effects described only the work
that remains: its last decision opened and closed `second`'s task in one step.
Today's core reaches the same states and transitions; replay reports that one
decision's effects as a mismatch, naming the rule that changed."""

from __future__ import annotations

from pathlib import Path

import orjson

from compiler import load_playbook
from stream.cli.replay import replay_decisions
from stream.engine.registry import Registry

RECORDED = Path(__file__).resolve().parents[2] / "recorded"


def test_an_older_log_differs_only_in_the_effects_of_the_changed_rule() -> None:
    records = [
        orjson.loads(line)
        for line in (RECORDED / "early-evidence-7696b61.jsonl").read_bytes().splitlines()
    ]
    playbook = load_playbook((RECORDED / "early-evidence.yaml").read_text())
    report = replay_decisions(records, Registry([playbook]))
    assert report.decisions == 3
    [job] = report.jobs.values()
    [mismatch] = job.mismatches
    assert mismatch.startswith("decision seq 3 ")
    assert ": effects: recorded " in mismatch
    assert mismatch.endswith(
        "(recorded by a core that emitted tasks opened and closed in one step; "
        "effects now describe only the work that remains: docs/decisions.md)"
    )
    # Everything else of that decision is reproduced: the same state hash.
    assert job.state is not None
    assert job.state.hash == records[-1]["state_hash"]
    assert job.state.status == "done"
