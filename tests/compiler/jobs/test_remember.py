"""A playbook's ``remember`` (docs/playbooks.md, "Remembering"; docs/memory.md,
"What is remembered"): an applied world or tool event of a remembered action is
a ``fact.remembered`` effect for the job's subject, in the decision record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from compiler import (
    Event,
    FactRemembered,
    JobGraph,
    JobState,
    PlaybookError,
    Start,
    Step,
    TaskOpened,
    compile_playbook,
    load_playbook,
)
from topics import DecisionRecord

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
JOB = "job-1"
ADA = {"name": "Ada", "email": "Ada@Example.com"}


def graph(**top: Any) -> JobGraph:
    spec = {
        "key": "pb",
        "version": 1,
        "milestones": [{"id": "close", "condition": "account_closed WITHIN 30d"}],
        **top,
    }
    return JobGraph(compile_playbook(spec))


def started(
    g: JobGraph, subject: dict[str, Any] | None = None, contacts: tuple[Any, ...] = (ADA,)
) -> JobState:
    step = g.next(None, T0, Start(JOB, "pb", subject or {}, contacts))
    assert step.state is not None
    return step.state


def facts(step: Step) -> list[FactRemembered]:
    return [e for e in step.effects if isinstance(e, FactRemembered)]


REMEMBERS = graph(remember=["plan_chosen", "account_activated"])


def test_a_world_event_it_remembers_is_a_fact_of_the_subject() -> None:
    state = started(REMEMBERS)
    now = T0 + timedelta(hours=1)
    step = REMEMBERS.next(state, now, Event("plan_chosen", "pro", {"seats": 3}, "world", "evt-1"))
    assert step.applied
    assert [e.to_json() for e in facts(step)] == [
        {
            "type": "fact.remembered",
            "subject": "ada@example.com",  # the first contact's address, in lower case
            "name": "plan_chosen",
            "value": "pro",
            "properties": {"seats": 3},
            "source": "world",
            "event_id": "evt-1",  # its idempotency key, as verdicts cite it
            "job_key": JOB,
            "at": "2026-01-05T10:00:00Z",
        }
    ]
    # The first effect: what the input said comes before what the rules made of it.
    assert step.effects[0] == facts(step)[0]


def test_a_tool_event_is_remembered_an_agent_event_never() -> None:
    state = started(REMEMBERS, subject={"id": "cust-7"})
    tool = REMEMBERS.next(state, T0, Event("account_activated", source="tool", id="p2@40"))
    assert [(f.subject, f.source, f.event_id) for f in facts(tool)] == [
        ("cust-7", "tool", "p2@40")  # the subject's id wins; no key: the inbox position
    ]
    assert tool.state is not None
    claim = REMEMBERS.next(tool.state, T0, Event("plan_chosen", "enterprise", source="agent"))
    assert claim.applied
    assert facts(claim) == []


def test_an_action_it_does_not_remember_is_not_a_fact() -> None:
    state = started(REMEMBERS)
    step = REMEMBERS.next(state, T0, Event("newsletter_signup", "yes"))
    assert step.applied
    assert facts(step) == []


def test_a_job_without_a_subject_remembers_nothing() -> None:
    state = started(REMEMBERS, subject={}, contacts=())
    step = REMEMBERS.next(state, T0, Event("plan_chosen", "pro"))
    assert step.applied
    assert facts(step) == []


def test_a_duplicate_is_not_remembered_twice() -> None:
    state = started(REMEMBERS)
    first = REMEMBERS.next(state, T0, Event("plan_chosen", "pro", idempotency_key="k"))
    assert first.state is not None
    again = REMEMBERS.next(first.state, T0, Event("plan_chosen", "pro", idempotency_key="k"))
    assert again.duplicate
    assert facts(first)
    assert not facts(again)


def test_a_playbook_without_remember_decides_as_before() -> None:
    plain = graph()
    assert plain.playbook.remembers == frozenset()
    assert "remember" not in plain.playbook.to_json()  # its registered spec is unchanged
    state = started(plain)
    step = plain.next(state, T0, Event("plan_chosen", "pro"))
    assert facts(step) == []


def test_the_fact_is_in_the_decision_record_and_replays_byte_for_byte() -> None:
    state = started(REMEMBERS)
    event = Event("plan_chosen", "pro", None, "world", None, "p1@7")
    one = REMEMBERS.next(state, T0 + timedelta(minutes=5), event)
    two = REMEMBERS.next(state, T0 + timedelta(minutes=5), event)
    assert orjson.dumps(one.to_json()) == orjson.dumps(two.to_json())
    record = {
        "type": "decision",
        "job_key": JOB,
        "playbook_key": "pb",
        "playbook_version": 1,
        "origin": None,
        "prev_state_hash": state.hash,
        **one.to_json(),
    }
    parsed = DecisionRecord.model_validate_json(orjson.dumps(record))
    assert parsed.effects[0].type == "fact.remembered"


def test_an_event_that_settles_a_milestone_is_remembered_with_its_effects() -> None:
    g = graph(remember=["account_closed"])
    state = started(g)
    step = g.next(state, T0, Event("account_closed", source="tool", idempotency_key="c1"))
    types = [e.to_json()["type"] for e in step.effects]
    assert types[0] == "fact.remembered"
    assert "task.closed" in types
    assert "job.finished" in types
    assert not any(isinstance(e, TaskOpened) for e in step.effects)


@pytest.mark.parametrize(
    ("remember", "message"),
    [
        (["plan_chosen", "plan_chosen"], "remember: 'plan_chosen' is named twice (first as #1)"),
        (["  "], "remember: '  ' is not an event action"),
        ([""], "remember: '' is not an event action"),
        (["x" * 201], "is not an event action (1 to 200 characters"),
    ],
)
def test_check_refuses_a_remember_that_is_not_unique_action_names(
    remember: list[str], message: str
) -> None:
    with pytest.raises(PlaybookError) as caught:
        graph(remember=remember)
    assert message in str(caught.value)


def test_check_names_the_line_of_a_bad_remember() -> None:
    text = (
        "key: pb\nversion: 1\nremember:\n  - plan_chosen\n  - plan_chosen\n"
        "milestones:\n  - id: close\n    condition: account_closed\n"
    )
    with pytest.raises(PlaybookError) as caught:
        load_playbook(text, "pb.yaml")
    assert str(caught.value).startswith("pb.yaml:5:5: remember: 'plan_chosen' is named twice")


def test_remember_must_be_a_list_of_strings() -> None:
    with pytest.raises(PlaybookError) as caught:
        graph(remember="plan_chosen")
    assert "remember" in str(caught.value)
    with pytest.raises(PlaybookError):
        graph(remember=[3])
