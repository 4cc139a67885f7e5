"""topics.build and the models agree on every field.

Each builder makes plain data for one model without validating it (the hot
path cannot afford to). These tests hold the two together: for arbitrary
arguments, the model accepts what the builder made, through JSON as a consumer
reads it, and dumps back exactly the same data; every field of the model is
either made by the builder or is an optional field left at its default. A field
added to a model and forgotten in its builder (or the reverse) fails here.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from topics import (
    DecisionRecord,
    EventInput,
    FactRememberedEffect,
    JobFinishedEffect,
    JobSnapshot,
    MemoryFact,
    MilestoneSnapshot,
    MilestoneStatus,
    RecordOrigin,
    StartInput,
    TaskClosedEffect,
    TaskClosedRecord,
    TaskOpenedEffect,
    TaskOpenedRecord,
    TaskOutcome,
    TickInput,
    TimerCancelledEffect,
    TimerRecord,
    TimerSetEffect,
    TransitionRecord,
    VerdictRecord,
    build,
)

SETTINGS = settings(max_examples=60, deadline=None)
HISTORIES = Path(__file__).resolve().parents[1] / "golden" / "histories"

texts = st.text(min_size=1, max_size=12)
instants = st.datetimes(timezones=st.just(UTC)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
objects = st.dictionaries(texts, json_values, max_size=3)
kinds = st.sampled_from(["settle", "due"])
verdicts = st.sampled_from(["TRUE", "FALSE", "UNKNOWN"])
statuses = st.sampled_from(list(MilestoneStatus))
outcomes = st.sampled_from(list(TaskOutcome))
atom_reports = st.fixed_dictionaries(
    {
        "atom": texts,
        "verdict": verdicts,
        "count": st.integers(0, 1000),
        "evidence": st.lists(texts, max_size=3),
    }
)
explanations = st.fixed_dictionaries(
    {
        "condition": texts,
        "verdict": verdicts,
        "closed": st.booleans(),
        "atoms": st.lists(atom_reports, max_size=3),
    }
)


def agrees(model: type[BaseModel], built: dict[str, Any]) -> BaseModel:
    """The model reads the built data (as JSON, as a consumer does) and dumps it
    back unchanged; any field the builder left out is optional and at its default."""
    parsed = model.model_validate_json(orjson.dumps(built))
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == built
    for name, field in model.model_fields.items():
        wire = field.alias or name
        if wire not in built:
            assert not field.is_required(), f"{model.__name__}.{wire} is required but not built"
            assert getattr(parsed, name) == field.get_default(call_default_factory=True)
    return parsed


@SETTINGS
@given(texts, texts, objects, st.lists(json_values, max_size=3))
def test_start_input(key: str, playbook: str, subject: dict[str, Any], contacts: list[Any]) -> None:
    agrees(StartInput, build.start_input(key, playbook, subject, contacts))


@SETTINGS
@given(
    texts,
    scalars,
    st.none() | objects,
    st.sampled_from(["world", "tool", "agent"]),
    st.none() | texts,
    st.none() | texts,
)
def test_event_input(
    action: str,
    value: Any,
    properties: dict[str, Any] | None,
    source: str,
    idempotency_key: str | None,
    id: str | None,
) -> None:
    built = build.event_input(action, value, properties, source, idempotency_key, id)
    agrees(EventInput, built)


def test_tick_input() -> None:
    agrees(TickInput, build.tick_input())


@SETTINGS
@given(instants, kinds, texts)
def test_timers(at: str, kind: str, milestone: str) -> None:
    agrees(TimerRecord, build.timer(at, kind, milestone))
    agrees(TimerSetEffect, build.timer_set(at, kind, milestone))
    agrees(TimerCancelledEffect, build.timer_cancelled(at, kind, milestone))


@SETTINGS
@given(texts, st.none() | instants, explanations)
def test_verdict(milestone: str, at: str | None, explanation: dict[str, Any]) -> None:
    agrees(VerdictRecord, build.verdict(milestone, at, explanation))


@SETTINGS
@given(texts, statuses, statuses, st.none() | instants, texts)
def test_transition(
    milestone: str, before: MilestoneStatus, after: MilestoneStatus, at: str | None, reason: str
) -> None:
    parsed = agrees(TransitionRecord, build.transition(milestone, before, after, at, reason))
    assert isinstance(parsed, TransitionRecord)
    assert (parsed.from_, parsed.to) == (before, after)


task_opened_args = st.tuples(texts, texts, texts, instants, instants)
#: What the task record adds: instructions, the playbook's, integrations, frontier.
task_asks = st.tuples(texts, texts, st.lists(texts, max_size=3), st.lists(texts, max_size=3))


@SETTINGS
@given(task_opened_args, task_asks, texts, objects, st.lists(json_values, max_size=3))
def test_task_opened(
    args: tuple[Any, ...],
    asks: tuple[Any, ...],
    playbook_key: str,
    subject: dict[str, Any],
    contacts: list[Any],
) -> None:
    effect = build.task_opened(*args)
    agrees(TaskOpenedEffect, effect)
    record = build.task_opened_record(effect, *asks, playbook_key, subject, contacts)
    agrees(TaskOpenedRecord, record)


def test_an_older_task_opened_effect_is_still_read() -> None:
    # Decisions written before issue 35 carried the task's asks in the effect.
    older = {
        **build.task_opened("j/m", "j", "m", "2026-01-05T09:00:00Z", "2026-01-06T09:00:00Z"),
        "instructions": "do it",
        "playbook_instructions": "be kind",
        "integrations": ["email"],
        "frontier": ["m"],
    }
    assert TaskOpenedEffect.model_validate(older).frontier == ["m"]


@SETTINGS
@given(texts, texts, texts, instants, outcomes)
def test_task_closed(task_id: str, job: str, milestone: str, at: str, outcome: TaskOutcome) -> None:
    effect = build.task_closed(task_id, job, milestone, at, outcome)
    agrees(TaskClosedEffect, effect)
    agrees(TaskClosedRecord, build.task_closed_record(effect))


@SETTINGS
@given(texts, st.sampled_from(["done", "failed"]), instants)
def test_job_finished(job: str, status: str, at: str) -> None:
    agrees(JobFinishedEffect, build.job_finished(job, status, at))


@SETTINGS
@given(
    texts,
    texts,
    scalars,
    st.none() | objects,
    st.sampled_from(["world", "tool"]),
    texts,
    texts,
    instants,
)
def test_fact_remembered(
    subject: str,
    name: str,
    value: Any,
    properties: dict[str, Any] | None,
    source: str,
    event_id: str,
    job: str,
    at: str,
) -> None:
    effect = build.fact_remembered(subject, name, value, properties, source, event_id, job, at)
    agrees(FactRememberedEffect, effect)
    agrees(MemoryFact, build.memory_fact_record(effect))


@SETTINGS
@given(texts, st.integers(0, 99), st.integers(0, 2**40), st.integers(0, 99), st.integers(0, 2**40))
def test_record_origin(topic: str, p: int, o: int, read_p: int, read_o: int) -> None:
    parsed = agrees(RecordOrigin, build.record_origin(topic, p, o, read_p, read_o))
    assert isinstance(parsed, RecordOrigin)
    assert (parsed.forwarded is None) == (read_p == p)


effects = st.one_of(
    task_opened_args.map(lambda a: build.task_opened(*a)),
    st.tuples(texts, texts, texts, instants, outcomes).map(lambda a: build.task_closed(*a)),
    st.tuples(instants, kinds, texts).map(lambda a: build.timer_set(*a)),
    st.tuples(instants, kinds, texts).map(lambda a: build.timer_cancelled(*a)),
    st.tuples(texts, st.sampled_from(["done", "failed"]), instants).map(
        lambda a: build.job_finished(*a)
    ),
)
TIMERS = st.tuples(instants, kinds, texts).map(lambda a: build.timer(*a))
VERDICTS = st.tuples(texts, st.none() | instants, explanations).map(lambda a: build.verdict(*a))
TRANSITIONS = st.tuples(texts, statuses, statuses, st.none() | instants, texts).map(
    lambda a: build.transition(*a)
)
inputs = st.one_of(
    st.just(build.tick_input()),
    st.tuples(texts, texts, objects, st.just([])).map(lambda a: build.start_input(*a)),
    st.tuples(texts, scalars, objects, st.just("world"), st.none() | texts, texts).map(
        lambda a: build.event_input(*a)
    ),
)


@SETTINGS
@given(
    body=st.tuples(
        instants,
        inputs,
        st.sampled_from(["applied", "duplicate", "refused", "noop"]),
        st.none() | texts,
        st.none() | st.integers(0, 10**6),
        st.lists(TIMERS, max_size=2),
        st.lists(VERDICTS, max_size=2),
        st.lists(TRANSITIONS, max_size=2),
        st.lists(effects, max_size=3),
        st.lists(texts, max_size=3),
        st.none() | st.sampled_from(["running", "done", "failed"]),
        st.none() | texts,
    ),
    head=st.tuples(texts, st.none() | texts, st.none() | st.integers(1, 99), st.none() | texts),
    origin=st.none() | st.tuples(texts, st.integers(0, 9), st.integers(0, 10**6)),
    clock=st.tuples(st.integers(-1, 2**45), st.none() | st.sampled_from(
        ["worker_clock", "job_clock", "no_timestamp"]
    )),
)  # fmt: skip
def test_decision_record(
    body: tuple[Any, ...],
    head: tuple[Any, ...],
    origin: tuple[str, int, int] | None,
    clock: tuple[int, str | None],
) -> None:
    job, playbook, version, prev = head
    where = build.record_origin(*origin, origin[1], origin[2]) if origin else None
    built = build.decision_record(
        job, playbook, version, where, prev, build.decision_body(*body), *clock
    )
    parsed = agrees(DecisionRecord, built)
    assert isinstance(parsed, DecisionRecord)
    assert (parsed.clock is None) == (clock[1] is None)


MILESTONE_STATE = st.fixed_dictionaries(
    {"status": statuses},
    optional={
        "opened_at": instants,
        "deadline": instants,
        "task_at": instants,
        "settled_at": instants,
        "task_open": st.just(True),
        "outcome": outcomes,
        "explanation": explanations,
    },
)


@SETTINGS
@given(
    st.fixed_dictionaries(
        {
            "key": texts,
            "playbook_key": texts,
            "playbook_version": st.integers(1, 99),
            "started_at": instants,
            "status": st.sampled_from(["running", "done", "failed"]),
            "seq": st.integers(0, 10**6),
            "updated_at": st.none() | instants,
            "ended_at": st.none() | instants,
            "events": st.integers(0, 10**6),
            "milestones": st.dictionaries(texts, MILESTONE_STATE, max_size=4),
            "timers": st.lists(TIMERS, max_size=3),
        }
    ),
    st.lists(texts, max_size=3),
)
def test_job_snapshot(state: dict[str, Any], frontier: list[str]) -> None:
    for part in state["milestones"].values():
        agrees(MilestoneSnapshot, build.milestone_snapshot(part))
    snapshot = agrees(JobSnapshot, build.job_snapshot(state, frontier))
    assert isinstance(snapshot, JobSnapshot)
    # Each milestone's state is read from its detail (docs/kafka.md).
    assert snapshot.milestones == {m: part["status"] for m, part in state["milestones"].items()}


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_every_recorded_decision_is_a_valid_record(path: Path) -> None:
    # What the engine really wrote, field by field through the typed model.
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    decisions = [line for line in lines if line.get("type") == "decision"]
    assert decisions
    for data in decisions:
        agrees(DecisionRecord, data)


def test_a_builder_that_leaves_out_a_field_disagrees() -> None:
    # The check itself can fail: a task.opened without its frontier, or with a
    # field the model does not have, is caught.
    effect = build.task_opened("j/m", "j", "m", "2026-01-05T09:00:00Z", "x")
    record = build.task_opened_record(effect, "", "", [], ["m"], "p", {}, [])
    del record["frontier"]
    with pytest.raises(ValueError, match="frontier"):
        agrees(TaskOpenedRecord, record)
    extra = {**build.timer("2026-01-05T09:00:00Z", "due", "m"), "colour": "red"}
    with pytest.raises(ValueError, match="colour"):
        agrees(TimerRecord, extra)


def test_a_snapshot_and_a_verdict_leave_out_what_others_say() -> None:
    """Issue 35 (docs/kafka.md, "What a record no longer carries"): a verdict and a
    snapshot's explanation without the condition's text, a snapshot without the
    milestones map and the state hash, and task_at only when a due held it back."""
    data = {"condition": "a WITHIN 1d", "verdict": "TRUE", "closed": False, "atoms": []}
    assert "condition" not in build.verdict("m", "2026-01-05T09:00:00Z", data)
    at = "2026-01-05T09:00:00Z"
    part = {"status": "open", "opened_at": at, "task_at": at, "explanation": data}
    assert build.milestone_snapshot(part) == {
        "state": "open",
        "opened_at": at,
        "explanation": {"verdict": "TRUE", "closed": False, "atoms": []},
    }
    later = "2026-01-06T09:00:00Z"
    assert build.milestone_snapshot({**part, "task_at": later})["task_at"] == later


def test_a_snapshot_written_before_issue_35_is_read() -> None:
    """A snapshot with the milestones map, the state hash and the condition texts."""
    older = {
        "type": "job.snapshot",
        "schema": 1,
        "key": "job-1",
        "status": "running",
        "playbook_key": "onboarding",
        "playbook_version": 1,
        "seq": 1,
        "started_at": "2026-01-05T09:00:00Z",
        "updated_at": "2026-01-05T09:00:00Z",
        "ended_at": None,
        "events": 0,
        "milestones": {"collect": "open"},
        "detail": {
            "collect": {
                "state": "open",
                "explanation": {
                    "condition": "a",
                    "verdict": "UNKNOWN",
                    "closed": False,
                    "atoms": [],
                },
            }
        },
        "frontier": ["collect"],
        "timers": [],
        "state_hash": "c" * 64,
    }
    snapshot = JobSnapshot.model_validate_json(orjson.dumps(older))
    assert snapshot.milestones == {"collect": "open"}
    assert snapshot.state_hash == "c" * 64
    explanation = snapshot.detail["collect"].explanation
    assert explanation is not None
    assert explanation.condition == "a"
