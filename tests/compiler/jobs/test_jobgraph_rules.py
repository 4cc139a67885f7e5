"""``JobGraph.next`` rule by rule (docs/playbooks.md, 'How a job moves';
docs/decisions.md): exact effect lists, transitions, idempotency, refusals, the clock,
and the state's JSON and hash.

Every expected effect is written out by hand from those pages and the playbooks here."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from compiler import (
    MAX_REMEMBERED_KEYS,
    Event,
    GraphMismatch,
    JobFinished,
    JobGraph,
    JobState,
    Playbook,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    Tick,
    Timer,
    TimerCancelled,
    TimerSet,
    compile_playbook,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
JOB = "job-1"


def at(**delta: float) -> datetime:
    return T0 + timedelta(**delta)


def playbook(*milestones: dict[str, Any], **top: Any) -> Playbook:
    return compile_playbook(
        {"key": "pb", "version": 1, "instructions": "PB", "milestones": list(milestones), **top}
    )


def started(graph: JobGraph, now: datetime = T0) -> tuple[JobState, Step]:
    step = graph.next(None, now, Start(JOB, graph.playbook.key))
    assert step.state is not None
    assert step.refused is None
    return step.state, step


def apply(graph: JobGraph, state: JobState, now: datetime, input: Event | Tick) -> JobState:
    step = graph.next(state, now, input)
    assert step.state is not None
    return step.state


def opened(
    milestone: str,
    now: datetime,
    deadline: datetime,
    frontier: tuple[str, ...],
    *,
    instructions: str = "",
    integrations: tuple[str, ...] = (),
) -> TaskOpened:
    return TaskOpened(JOB, milestone, now, instructions, "PB", integrations, deadline, frontier)


def closed(milestone: str, now: datetime, outcome: Any) -> TaskClosed:
    return TaskClosed(JOB, milestone, now, outcome)


def settle(milestone: str, when: datetime) -> Timer:
    return Timer(when, "settle", milestone)


def statuses(state: JobState) -> dict[str, str]:
    return {k: v.status for k, v in state.milestones.items()}


CHAIN = playbook(
    {
        "id": "first",
        "instructions": "do the first thing",
        "condition": "a WITHIN 1d",
        "integrations": ["email", "crm"],
    },
    {"id": "second", "needs": ["first"], "condition": "b WITHIN 2d"},
)

DIAMOND_ANY = playbook(
    {"id": "start", "condition": "s WITHIN 1d"},
    {"id": "left", "needs": ["start"], "condition": "l WITHIN 5d"},
    {"id": "right", "needs": ["start"], "condition": "r WITHIN 5d"},
    {"id": "finish", "needs": ["left", "right"], "merge": "any", "condition": "f WITHIN 5d"},
)


# -- start ------------------------------------------------------------------------


def test_start_opens_the_roots_with_a_timer_and_a_task() -> None:
    state, step = started(JobGraph(CHAIN))
    assert step.effects == (
        TimerSet(settle("first", at(days=1))),
        opened(
            "first",
            T0,
            at(days=1),
            ("first",),
            instructions="do the first thing",
            integrations=("email", "crm"),
        ),
    )
    assert [(t.milestone, t.before, t.after) for t in step.transitions] == [
        ("first", "pending", "open")
    ]
    assert statuses(state) == {"first": "open", "second": "pending"}
    assert state.status == "running"
    assert state.timers == (settle("first", at(days=1)),)
    assert step.frontier == ("first",)
    assert state.milestones["first"].opened_at == T0
    assert state.milestones["first"].deadline == at(days=1)


def test_task_ids_are_job_slash_milestone() -> None:
    graph = JobGraph(CHAIN)
    state, step = started(graph)
    task = step.effects[1]
    assert isinstance(task, TaskOpened)
    assert task.task_id == "job-1/first"
    assert task.to_json()["task_id"] == "job-1/first"
    assert task.to_json()["type"] == "task.opened"
    done = graph.next(state, at(hours=1), Event("a"))
    closes = [e for e in done.effects if isinstance(e, TaskClosed)]
    assert [c.task_id for c in closes] == ["job-1/first"]
    assert closes[0].to_json()["task_id"] == "job-1/first"


# -- open -> done / knocked / timed_out ---------------------------------------------------


def test_done_closes_the_task_cancels_the_timer_and_opens_the_next() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(hours=2), Event("a", id="ev1"))
    # The step's difference: tasks closed, timers cancelled and set, tasks opened.
    assert step.effects == (
        closed("first", at(hours=2), "done"),
        TimerCancelled(settle("first", at(days=1))),
        TimerSet(settle("second", at(days=2, hours=2))),
        opened("second", at(hours=2), at(days=2, hours=2), ("second",)),
    )
    assert step.state is not None
    assert statuses(step.state) == {"first": "done", "second": "open"}
    assert step.state.milestones["first"].outcome == "done"
    assert step.state.milestones["first"].settled_at == at(hours=2)


def test_the_last_goal_done_finishes_the_job() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=2), Event("a"))
    step = graph.next(state, at(hours=3), Event("b"))
    assert step.effects == (
        closed("second", at(hours=3), "done"),
        TimerCancelled(settle("second", at(days=2, hours=2))),
        JobFinished(JOB, "done", at(hours=3)),
    )
    assert step.state is not None
    assert step.state.status == "done"
    assert step.state.ended_at == at(hours=3)
    assert step.state.timers == ()
    assert step.frontier == ()


def test_false_in_an_open_world_is_knocked() -> None:
    graph = JobGraph(playbook({"id": "quiet", "condition": "NOT complaint WITHIN 1d"}))
    state, _ = started(graph)
    step = graph.next(state, at(hours=5), Event("complaint"))
    assert step.effects == (
        closed("quiet", at(hours=5), "knocked"),
        TimerCancelled(settle("quiet", at(days=1))),
        JobFinished(JOB, "failed", at(hours=5)),
    )
    assert step.state is not None
    assert step.state.milestones["quiet"].status == "knocked"
    assert step.state.milestones["quiet"].outcome == "knocked"


def test_a_closed_window_that_settles_false_is_timed_out() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(days=1), Tick())
    assert step.fired == (settle("first", at(days=1)),)
    assert step.effects == (
        closed("first", at(days=1), "timed_out"),
        JobFinished(JOB, "failed", at(days=1)),
    )
    assert step.state is not None
    assert statuses(step.state) == {"first": "knocked", "second": "unreachable"}
    assert step.state.milestones["first"].outcome == "timed_out"
    assert [(t.milestone, t.after) for t in step.transitions] == [
        ("first", "knocked"),
        ("second", "unreachable"),
    ]


def test_not_within_completes_at_the_close() -> None:
    graph = JobGraph(playbook({"id": "quiet", "condition": "NOT complaint WITHIN 1d"}))
    state, _ = started(graph)
    assert graph.next(state, at(hours=23, minutes=59), Tick()).noop
    step = graph.next(state, at(days=1), Tick())
    assert step.effects == (
        closed("quiet", at(days=1), "done"),
        JobFinished(JOB, "done", at(days=1)),
    )


def test_count_upper_bound_knocks_as_soon_as_exceeded() -> None:
    graph = JobGraph(playbook({"id": "chase", "condition": "COUNT(reminder) <= 2 WITHIN 10d"}))
    state, _ = started(graph)
    state = apply(graph, state, at(days=1), Event("reminder"))
    state = apply(graph, state, at(days=2), Event("reminder"))
    assert state.milestones["chase"].status == "open"
    step = graph.next(state, at(days=3), Event("reminder"))
    assert step.effects == (
        closed("chase", at(days=3), "knocked"),
        TimerCancelled(settle("chase", at(days=10))),
        JobFinished(JOB, "failed", at(days=3)),
    )


def test_the_default_window_is_30_days() -> None:
    graph = JobGraph(playbook({"id": "x", "condition": "a"}))
    state, step = started(graph)
    assert step.effects[0] == TimerSet(settle("x", at(days=30)))
    assert state.milestones["x"].deadline == at(days=30)


# -- merges and pruning ------------------------------------------------------------------


def test_any_merge_drops_the_losing_branch() -> None:
    graph = JobGraph(DIAMOND_ANY)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("s"))
    assert statuses(state) == {
        "start": "done",
        "left": "open",
        "right": "open",
        "finish": "pending",
    }
    step = graph.next(state, at(hours=2), Event("l"))
    assert step.effects == (
        closed("left", at(hours=2), "done"),
        closed("right", at(hours=2), "dropped"),
        TimerCancelled(settle("left", at(days=5, hours=1))),
        TimerCancelled(settle("right", at(days=5, hours=1))),
        TimerSet(settle("finish", at(days=5, hours=2))),
        opened("finish", at(hours=2), at(days=5, hours=2), ("finish",)),
    )
    assert step.state is not None
    assert statuses(step.state) == {
        "start": "done",
        "left": "done",
        "right": "dropped",
        "finish": "open",
    }
    assert step.state.milestones["right"].outcome == "dropped"
    assert step.state.timers == (settle("finish", at(days=5, hours=2)),)
    assert step.state.status == "running"


def test_any_merge_unreachable_only_when_every_need_is_lost() -> None:
    graph = JobGraph(
        playbook(
            {"id": "left", "condition": "NOT lveto WITHIN 5d"},
            {"id": "right", "condition": "NOT rveto WITHIN 5d"},
            {"id": "finish", "needs": ["left", "right"], "merge": "any", "condition": "f"},
        )
    )
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("lveto"))
    assert statuses(state) == {"left": "knocked", "right": "open", "finish": "pending"}
    assert state.status == "running"
    step = graph.next(state, at(hours=2), Event("rveto"))
    assert step.state is not None
    assert statuses(step.state) == {"left": "knocked", "right": "knocked", "finish": "unreachable"}
    assert step.effects[-1] == JobFinished(JOB, "failed", at(hours=2))


def test_all_merge_waits_for_every_need_and_fails_on_one_lost() -> None:
    graph = JobGraph(
        playbook(
            {"id": "left", "condition": "l AND NOT lveto WITHIN 5d"},
            {"id": "right", "condition": "r WITHIN 5d"},
            {"id": "finish", "needs": ["left", "right"], "condition": "f WITHIN 1d"},
        )
    )
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("l"))
    assert state.milestones["left"].status == "open"  # NOT lveto is UNKNOWN while open
    state = apply(graph, state, at(hours=2), Event("lveto"))
    assert statuses(state) == {"left": "knocked", "right": "dropped", "finish": "unreachable"}
    assert state.status == "failed"


def test_all_merge_opens_when_the_last_need_is_done() -> None:
    graph = JobGraph(
        playbook(
            {"id": "left", "condition": "l WITHIN 5d"},
            {"id": "right", "condition": "r WITHIN 5d"},
            {"id": "finish", "needs": ["left", "right"], "condition": "f WITHIN 1d"},
        )
    )
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("l"))
    assert statuses(state)["finish"] == "pending"
    step = graph.next(state, at(hours=2), Event("r"))
    assert step.effects[-2:] == (
        TimerSet(settle("finish", at(days=1, hours=2))),
        opened("finish", at(hours=2), at(days=1, hours=2), ("finish",)),
    )


def test_job_end_drops_what_is_open_or_pending() -> None:
    graph = JobGraph(
        playbook(
            {"id": "email", "condition": "e WITHIN 5d"},
            {"id": "phone", "condition": "p WITHIN 5d"},
            {"id": "followup", "needs": ["phone"], "condition": "x WITHIN 5d"},
            complete_when="any",
            goals=["email", "followup"],
        )
    )
    state, _ = started(graph)
    step = graph.next(state, at(hours=1), Event("e"))
    assert step.effects == (
        closed("email", at(hours=1), "done"),
        closed("phone", at(hours=1), "dropped"),
        TimerCancelled(settle("email", at(days=5))),
        TimerCancelled(settle("phone", at(days=5))),
        JobFinished(JOB, "done", at(hours=1)),
    )
    assert step.state is not None
    assert statuses(step.state) == {"email": "done", "phone": "dropped", "followup": "dropped"}


def test_early_evidence_counts_when_the_milestone_opens() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("b"))
    assert statuses(state) == {"first": "open", "second": "pending"}
    step = graph.next(state, at(hours=2), Event("a"))
    assert step.state is not None
    assert statuses(step.state) == {"first": "done", "second": "done"}
    assert step.state.status == "done"
    # second opened and completed in one step: there is no work left for it, so
    # it emits no task (its transitions are in the record all the same).
    tasks = [(type(e).__name__, e.milestone) for e in step.effects if hasattr(e, "milestone")]
    assert tasks == [("TaskClosed", "first")]
    assert [(t.milestone, t.before, t.after) for t in step.transitions] == [
        ("first", "open", "done"),
        ("second", "pending", "open"),
        ("second", "open", "done"),
    ]


def test_frontier_is_in_rank_order_depth_then_playbook_order() -> None:
    graph = JobGraph(
        playbook(
            {"id": "deep", "needs": ["rootB"], "condition": "d WITHIN 5d"},
            {"id": "rootA", "condition": "a WITHIN 5d"},
            {"id": "rootB", "condition": "b WITHIN 1d"},
            goals=["deep", "rootA"],
        )
    )
    state, step = started(graph)
    assert step.frontier == ("rootA", "rootB")
    assert [e.frontier for e in step.effects if isinstance(e, TaskOpened)] == [
        ("rootA", "rootB"),
        ("rootA", "rootB"),
    ]
    step = graph.next(state, at(hours=1), Event("b"))
    assert step.frontier == ("rootA", "deep")
    assert step.state is not None
    assert graph.frontier(step.state) == ("rootA", "deep")


# -- agent claims ---------------------------------------------------------------------------


def test_an_agent_claim_is_recorded_but_moves_nothing() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(hours=1), Event("a", source="agent"))
    assert step.applied
    assert step.effects == ()
    assert step.transitions == ()
    assert step.state is not None
    assert step.state.events == 1
    assert statuses(step.state) == {"first": "open", "second": "pending"}
    assert step.state.tallies == state.tallies


@pytest.mark.parametrize("source", ["world", "tool"])
def test_the_same_fact_from_world_or_tool_counts(source: Any) -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(hours=1), Event("a", source=source))
    assert step.state is not None
    assert step.state.milestones["first"].status == "done"


# -- due ---------------------------------------------------------------------------------------


DUE = playbook(
    {"id": "first", "condition": "a WITHIN 1d"},
    {"id": "second", "needs": ["first"], "condition": "b WITHIN 1d", "due": "2h"},
)


def test_due_sets_a_timer_instead_of_emitting_the_task() -> None:
    graph = JobGraph(DUE)
    state, _ = started(graph)
    step = graph.next(state, at(hours=1), Event("a"))
    assert step.effects == (
        closed("first", at(hours=1), "done"),
        TimerCancelled(settle("first", at(days=1))),
        TimerSet(Timer(at(hours=3), "due", "second")),  # timers in time order
        TimerSet(settle("second", at(days=1, hours=1))),
    )
    assert step.state is not None
    later = graph.next(step.state, at(hours=3), Tick())
    assert later.fired == (Timer(at(hours=3), "due", "second"),)
    assert later.effects == (opened("second", at(hours=3), at(days=1, hours=1), ("second",)),)
    assert later.state is not None
    assert later.state.milestones["second"].task_open


def test_done_before_due_cancels_both_timers_and_emits_no_task() -> None:
    graph = JobGraph(DUE)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("a"))
    step = graph.next(state, at(hours=2), Event("b"))
    # Both timers are cancelled (in time order); no task was opened, so none closes.
    assert step.effects == (
        TimerCancelled(Timer(at(hours=3), "due", "second")),
        TimerCancelled(settle("second", at(days=1, hours=1))),
        JobFinished(JOB, "done", at(hours=2)),
    )


def test_an_event_at_the_due_instant_settles_it_before_its_task_goes_out() -> None:
    graph = JobGraph(DUE)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("a"))
    step = graph.next(state, at(hours=3), Event("b"))
    # The due timer fires first (timers before the input), then b completes the
    # milestone: within one step, so its task never goes out.
    assert step.fired == (Timer(at(hours=3), "due", "second"),)
    assert step.effects == (
        TimerCancelled(settle("second", at(days=1, hours=1))),
        JobFinished(JOB, "done", at(hours=3)),
    )
    # A tick at the due instant first (a worker's ticker) emits it; b closes it.
    ticked = graph.next(state, at(hours=3), Tick())
    assert ticked.effects == (opened("second", at(hours=3), at(days=1, hours=1), ("second",)),)
    assert ticked.state is not None
    after = graph.next(ticked.state, at(hours=3), Event("b"))
    assert after.effects == (
        closed("second", at(hours=3), "done"),
        TimerCancelled(settle("second", at(days=1, hours=1))),
        JobFinished(JOB, "done", at(hours=3)),
    )


# -- time ------------------------------------------------------------------------------------


def test_a_deadline_between_two_events_fires_before_the_later_event() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(days=1, hours=1), Event("a"))
    assert step.fired == (settle("first", at(days=1)),)
    assert step.effects == (
        closed("first", at(days=1), "timed_out"),
        JobFinished(JOB, "failed", at(days=1)),
    )
    assert step.state is not None
    assert step.state.ended_at == at(days=1)
    assert step.state.events == 1  # the late event is still recorded


def test_an_event_at_the_deadline_instant_is_too_late() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(days=1), Event("a"))
    assert step.state is not None
    assert step.state.milestones["first"].outcome == "timed_out"


def test_timers_fire_in_time_order_each_at_its_instant() -> None:
    graph = JobGraph(
        playbook(
            {"id": "q1", "condition": "NOT x WITHIN 1d"},
            {"id": "q2", "needs": ["q1"], "condition": "NOT y WITHIN 1d"},
        )
    )
    state, _ = started(graph)
    step = graph.next(state, at(days=3), Tick())
    assert step.fired == (settle("q1", at(days=1)), settle("q2", at(days=2)))
    assert [(t.milestone, t.after, t.at) for t in step.transitions] == [
        ("q1", "done", at(days=1)),
        ("q2", "open", at(days=1)),
        ("q2", "done", at(days=2)),
    ]
    # q2 opened at 1d and settled at 2d within this one step: no task, and its
    # timer was set and fired in it, so neither appears.
    assert step.effects == (
        closed("q1", at(days=1), "done"),
        JobFinished(JOB, "done", at(days=2)),
    )
    assert step.state is not None
    assert step.state.ended_at == at(days=2)
    assert step.state.updated_at == at(days=3)


def test_timers_at_one_instant_fire_together_before_the_job_is_decided() -> None:
    # q_done settles TRUE and r_late settles FALSE at the same instant; the job
    # (complete_when: any) is decided after both, so r_late is knocked, not dropped.
    graph = JobGraph(
        playbook(
            {"id": "q_done", "condition": "NOT x WITHIN 1d"},
            {"id": "r_late", "condition": "y WITHIN 1d"},
            complete_when="any",
        )
    )
    state, _ = started(graph)
    step = graph.next(state, at(days=1), Tick())
    assert step.fired == (settle("q_done", at(days=1)), settle("r_late", at(days=1)))
    assert step.effects == (
        closed("q_done", at(days=1), "done"),
        closed("r_late", at(days=1), "timed_out"),
        JobFinished(JOB, "done", at(days=1)),
    )


def test_every_open_monitor_sees_an_event_before_the_job_is_decided() -> None:
    graph = JobGraph(
        playbook(
            {"id": "yes", "condition": "e WITHIN 1d"},
            {"id": "no", "condition": "NOT e WITHIN 1d"},
            complete_when="any",
        )
    )
    state, _ = started(graph)
    step = graph.next(state, at(hours=1), Event("e"))
    assert step.state is not None
    assert statuses(step.state) == {"yes": "done", "no": "knocked"}
    assert step.state.status == "done"


def test_a_tick_with_nothing_due_is_a_noop() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(hours=23), Tick())
    assert step.noop
    assert step.outcome == "noop"
    assert step.state is state
    assert step.effects == ()
    assert step.transitions == ()
    assert step.fired == ()


def test_a_tick_after_the_job_ended_is_a_noop() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(days=1), Tick())
    assert state.status == "failed"
    step = graph.next(state, at(days=9), Tick())
    assert step.noop
    assert step.state is state


def test_a_naive_datetime_is_refused() -> None:
    graph = JobGraph(CHAIN)
    with pytest.raises(ValueError, match="timezone-aware"):
        graph.next(None, datetime(2026, 1, 5, 9), Start(JOB, "pb"))
    state, _ = started(graph)
    with pytest.raises(ValueError, match="timezone-aware"):
        graph.next(state, datetime(2026, 1, 5, 10), Event("a"))


def test_an_aware_non_utc_now_is_the_same_instant() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    # 15:00 at UTC+2 is 13:00 UTC, four hours after T0.
    other = datetime(2026, 1, 5, 15, 0, tzinfo=timezone(timedelta(hours=2)))
    step_utc = graph.next(state, at(hours=4), Event("a"))
    step_other = graph.next(state, other, Event("a"))
    assert step_other.now == at(hours=4)
    assert step_other.state is not None
    assert step_utc.state is not None
    assert step_other.state.to_bytes() == step_utc.state.to_bytes()


def test_the_clock_never_runs_backwards_for_a_job() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=5), Event("noise"))
    step = graph.next(state, at(hours=1), Event("a"))
    assert step.now == at(hours=5)
    assert step.state is not None
    assert step.state.updated_at == at(hours=5)
    assert step.state.milestones["first"].settled_at == at(hours=5)
    assert closed("first", at(hours=5), "done") in step.effects


def test_a_late_record_never_fires_a_timer_twice() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("a"))  # second's window closes at 2d1h
    state = apply(graph, state, at(days=3), Tick())
    assert state.status == "failed"
    step = graph.next(state, at(days=2), Tick())
    assert step.noop
    assert step.fired == ()


# -- idempotency and refusals ------------------------------------------------------------


def test_a_duplicate_idempotency_key_is_applied_once() -> None:
    graph = JobGraph(playbook({"id": "twice", "condition": "COUNT(ping) >= 2 WITHIN 1d"}))
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("ping", idempotency_key="k1"))
    step = graph.next(state, at(hours=2), Event("ping", idempotency_key="k1"))
    assert step.duplicate
    assert step.outcome == "duplicate"
    assert not step.applied
    assert step.state is state
    assert step.effects == ()
    assert step.transitions == ()
    assert step.frontier == ("twice",)
    step = graph.next(state, at(hours=2), Event("ping", idempotency_key="k2"))
    assert step.state is not None
    assert step.state.milestones["twice"].status == "done"


def test_a_retried_agent_event_is_a_duplicate() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("a", source="agent", idempotency_key="k"))
    assert len(state.recent_keys) == 1
    step = graph.next(state, at(hours=2), Event("a", source="agent", idempotency_key="k"))
    assert step.duplicate
    assert step.state is state


def test_an_agent_key_never_blocks_the_worlds_evidence() -> None:
    """docs/conditions.md, 'Evidence': an agent event never counts toward a condition,
    so an agent that (re)uses a key must not be able to swallow the world's event with
    that key."""
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("a", source="agent", idempotency_key="k"))
    step = graph.next(state, at(hours=2), Event("a", idempotency_key="k"))
    assert not step.duplicate
    assert step.state is not None
    assert step.state.milestones["first"].status == "done"


def test_only_the_last_max_remembered_keys_are_kept() -> None:
    assert MAX_REMEMBERED_KEYS == 1000
    graph = JobGraph(playbook({"id": "never", "condition": "nope WITHIN 180d"}))
    state, _ = started(graph)
    for i in range(MAX_REMEMBERED_KEYS + 1):
        state = apply(graph, state, at(seconds=i + 1), Event("noise", idempotency_key=f"k{i}"))
    assert len(state.recent_keys) == MAX_REMEMBERED_KEYS
    assert state.events == MAX_REMEMBERED_KEYS + 1
    now = at(hours=2)
    # k1 .. k1000 are remembered; k0, the oldest, is forgotten and applies again.
    assert graph.next(state, now, Event("noise", idempotency_key="k1")).duplicate
    assert graph.next(state, now, Event("noise", idempotency_key="k500")).duplicate
    assert graph.next(state, now, Event("noise", idempotency_key="k1000")).duplicate
    oldest = graph.next(state, now, Event("noise", idempotency_key="k0"))
    assert not oldest.duplicate
    assert oldest.applied
    assert oldest.state is not None
    assert oldest.state.events == MAX_REMEMBERED_KEYS + 2
    # Remembering k0 again forgets k1 in turn.
    assert not graph.next(oldest.state, now, Event("noise", idempotency_key="k1")).duplicate
    assert graph.next(oldest.state, now, Event("noise", idempotency_key="k2")).duplicate


def test_starting_a_job_twice_is_refused() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    step = graph.next(state, at(hours=1), Start(JOB, "pb"))
    assert step.refused
    assert step.outcome == "refused"
    assert step.state is state
    assert step.effects == ()


def test_an_event_before_start_is_refused() -> None:
    step = JobGraph(CHAIN).next(None, T0, Event("a"))
    assert step.refused
    assert step.state is None
    assert step.effects == ()


def test_a_tick_before_start_is_refused() -> None:
    step = JobGraph(CHAIN).next(None, T0, Tick())
    assert step.refused
    assert step.state is None


def test_starting_on_another_playbook_is_refused() -> None:
    step = JobGraph(CHAIN).next(None, T0, Start(JOB, "other"))
    assert step.refused
    assert "other" in step.refused
    assert step.state is None
    assert step.effects == ()


def test_a_state_pinned_to_another_version_is_an_error() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    v2 = compile_playbook({**CHAIN.to_json(), "version": 2})
    with pytest.raises(ValueError, match="v1"):
        JobGraph(v2).next(state, at(hours=1), Event("a"))


def test_events_after_the_job_ended_change_nothing_but_the_count() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    state = apply(graph, state, at(days=1), Tick())
    step = graph.next(state, at(days=2), Event("a"))
    assert step.effects == ()
    assert step.transitions == ()
    assert step.state is not None
    assert statuses(step.state) == statuses(state)
    assert step.state.status == "failed"


# -- state: JSON, bytes, hash, determinism ----------------------------------------------


def run_script(graph: JobGraph) -> tuple[list[Step], JobState]:
    state, first = started(graph)
    steps = [first]
    script: list[tuple[datetime, Event | Tick]] = [
        (at(hours=1), Event("s", properties={"k": 1}, id="e1")),
        (at(hours=2), Event("l", idempotency_key="key-l")),
        (at(hours=3), Event("r", source="agent")),
        (at(days=9), Tick()),
    ]
    for now, item in script:
        step = graph.next(state, now, item)
        steps.append(step)
        state = step.state or state
    return steps, state


def test_same_inputs_give_byte_identical_states_and_effects() -> None:
    steps1, state1 = run_script(JobGraph(DIAMOND_ANY))
    steps2, state2 = run_script(JobGraph(DIAMOND_ANY))
    assert state1.to_bytes() == state2.to_bytes()
    assert state1.hash == state2.hash
    for a, b in zip(steps1, steps2, strict=True):
        assert orjson.dumps(a.to_json()) == orjson.dumps(b.to_json())


def test_state_round_trips_through_json_and_bytes() -> None:
    steps, _ = run_script(JobGraph(DIAMOND_ANY))
    for step in steps:
        state = step.state
        assert state is not None
        again = JobState.from_json(orjson.loads(orjson.dumps(state.to_json())))
        assert again == state
        assert again.to_bytes() == state.to_bytes()
        assert again.hash == state.hash
        assert JobState.from_bytes(state.to_bytes()) == state


def test_a_restored_state_decides_the_same() -> None:
    graph = JobGraph(DIAMOND_ANY)
    state, _ = started(graph)
    state = apply(graph, state, at(hours=1), Event("s"))
    restored = JobState.from_bytes(state.to_bytes())
    a = graph.next(state, at(hours=2), Event("l"))
    b = graph.next(restored, at(hours=2), Event("l"))
    assert orjson.dumps(a.to_json()) == orjson.dumps(b.to_json())


def test_the_hash_is_sha256_of_sorted_compact_json() -> None:
    _, state = run_script(JobGraph(DIAMOND_ANY))
    raw = state.to_bytes()
    independent = orjson.dumps(orjson.loads(raw), option=orjson.OPT_SORT_KEYS)
    assert raw == independent
    assert state.hash == hashlib.sha256(raw).hexdigest()
    assert len(state.hash) == 64


def test_the_hash_is_stable_across_processes() -> None:
    """No per-process randomness (str hash seeds, set order) leaks into the hash."""
    _, state = run_script(JobGraph(DIAMOND_ANY))
    code = (
        "from tests.compiler.jobs.test_jobgraph_rules import DIAMOND_ANY, JobGraph, run_script; "
        "print(run_script(JobGraph(DIAMOND_ANY))[1].hash)"
    )
    root = Path(__file__).resolve().parents[3]
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert out.stdout.strip() == state.hash


def test_the_hash_ignores_dict_insertion_order_and_sees_every_change() -> None:
    _, state = run_script(JobGraph(DIAMOND_ANY))
    reordered = dataclasses.replace(
        state, milestones=dict(reversed(list(state.milestones.items())))
    )
    assert list(reordered.milestones) != list(state.milestones)
    assert reordered.hash == state.hash
    assert dataclasses.replace(state, seq=state.seq + 1).hash != state.hash
    assert dataclasses.replace(state, recent_keys=()).hash != state.hash


def test_seq_counts_applied_decisions_only() -> None:
    graph = JobGraph(CHAIN)
    state, _ = started(graph)
    assert state.seq == 1
    state = apply(graph, state, at(hours=1), Event("noise", idempotency_key="k"))
    assert state.seq == 2
    state = apply(graph, state, at(hours=2), Event("noise", idempotency_key="k"))  # duplicate
    state = apply(graph, state, at(hours=3), Tick())  # noop
    assert state.seq == 2


def test_a_job_given_to_another_versions_graph_is_an_error_naming_both() -> None:
    v1 = JobGraph(playbook({"id": "a", "condition": "x"}))
    v2 = JobGraph(playbook({"id": "a", "condition": "x"}, version=2))
    state, _ = started(v1)
    with pytest.raises(GraphMismatch) as caught:
        v2.next(state, at(hours=1), Event("x"))
    error = caught.value
    assert (error.job, error.job_playbook, error.graph_playbook) == (JOB, ("pb", 1), ("pb", 2))
    assert error.code == "playbook_mismatch"
    assert "pb v1" in str(error)
    assert "pb v2" in str(error)
