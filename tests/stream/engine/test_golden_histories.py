"""Golden histories (tests/golden/histories): decision logs recorded by the real
engine, replayed through ``stream/cli/replay.py`` without a broker. Every state hash
and effect must match; each history, recorded again today, must come out byte
for byte the same; and a tampered history must fail, naming the record.

When a change to the core or the engine alters a decision, these fail first.
If the change is meant to, rewrite them (``python -m tests.golden.histories.record``)
and say so in the commit."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stream.cli.replay import replay_decisions
from tests.golden.histories.record import HERE, HISTORIES, encode, registry

#: history → (decisions replayed, byte-identical re-emissions skipped)
EXPECTED = {
    "onboarding.jsonl": (169, 0),  # 174 until activateAccount lost its `due` (5 ticks)
    "crash-and-recover.jsonl": (6, 2),
    "refusals.jsonl": (6, 0),
}


def load(name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (HERE / name).read_bytes().splitlines()]


def test_every_history_is_checked() -> None:
    assert sorted(EXPECTED) == sorted(HISTORIES)
    assert sorted(p.name for p in HERE.glob("*.jsonl")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_recorded_history_replays_to_the_same_states_and_effects(name: str) -> None:
    report = replay_decisions(load(name), registry())
    problems = [m for job in report.jobs.values() for m in job.mismatches]
    assert problems == []
    assert report.ok
    decisions, duplicates = EXPECTED[name]
    assert report.decisions == decisions
    assert sum(job.duplicates for job in report.jobs.values()) == duplicates


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_engine_records_the_same_history_today(name: str) -> None:
    assert encode(HISTORIES[name]()) == (HERE / name).read_bytes()


def test_the_histories_hold_what_they_are_for() -> None:
    outcomes = {d["outcome"] for d in load("refusals.jsonl")}
    assert outcomes == {"applied", "refused"}
    refused = [d["refused"] for d in load("refusals.jsonl") if d["outcome"] == "refused"]
    assert refused == [
        "unknown job: no job.start was applied",
        "job 'r-1' already exists",
        "unknown playbook 'no-such-playbook'",
    ]
    onboarding = load("onboarding.jsonl")
    assert {d["status"] for d in onboarding} >= {"running", "done", "failed"}
    assert any(d["input"]["type"] == "tick" and d["fired"] for d in onboarding)


def test_a_tampered_history_fails_naming_the_record() -> None:
    records = load("onboarding.jsonl")
    index, victim = next(
        (i, d)
        for i, d in enumerate(records)
        if any(e["type"] == "task.opened" for e in d["effects"])
    )
    tampered = [dict(d) for d in records]
    effects = [dict(e) for e in victim["effects"]]
    for effect in effects:
        if effect["type"] == "task.opened":
            effect["deadline"] = "2000-01-01T00:00:00Z"
    tampered[index] = {**victim, "effects": effects}
    report = replay_decisions(tampered, registry())
    assert not report.ok
    [mismatch] = report.jobs[victim["job_key"]].mismatches
    origin = victim["origin"]
    assert mismatch.startswith(f"decision seq {victim['seq']} ({origin}): effects: recorded ")


def test_a_history_written_before_issue_35_still_verifies() -> None:
    # Its task.opened effects carried the task's asks and the frontier, which the
    # task record now carries alone (docs/kafka.md, "What a record no longer carries").
    older = []
    asks = {"instructions": "x", "playbook_instructions": "y", "integrations": [], "frontier": []}
    for d in load("onboarding.jsonl"):
        effects = [{**e, **asks} if e["type"] == "task.opened" else e for e in d["effects"]]
        older.append({**d, "effects": effects})
    assert any(e.get("frontier") == [] for d in older for e in d["effects"])
    report = replay_decisions(older, registry())
    assert report.ok, [m for j in report.jobs.values() for m in j.mismatches][:3]
