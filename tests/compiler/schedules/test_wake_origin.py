"""Wake loops (docs/schedules.md, "Wake loops"): a wake from inside a run of the
schedule it wakes, or of a chain of wakes through it, is refused; the origin of
a wake that fires travels on to its run's dispatch; the header's parser."""

from __future__ import annotations

import pytest

from compiler import (
    MAX_WAKE_DEPTH,
    OriginError,
    Wake,
    origin_link,
    origin_refusal,
    parse_origin,
    request_run_id,
    schedule_step,
    show_origin,
)
from tests.compiler.schedules.test_schedule_step import at, brief, define, dispatches, make


def test_a_wake_from_its_own_run_is_skipped_with_the_reason_and_remembered() -> None:
    state = define(make())
    step = schedule_step(state, at(1), Wake("r1", origin=("s/wk-1",)))
    assert dispatches(step) == []
    reason = "wake loop: woken from inside its own run s/wk-1 (origin: s/wk-1)"
    assert brief(step) == [("skipped", None, reason)]
    assert step.state is not None
    assert step.state.active == ()
    assert step.state.requests == ("r1",)  # the same request again does nothing
    assert schedule_step(step.state, at(2), Wake("r1", origin=("s/wk-1",))).effects == ()


def test_a_wake_whose_chain_passes_through_the_schedule_is_skipped() -> None:
    chain = ("s/wk-1", "other/wk-2", "third/sl-3")
    step = schedule_step(define(make()), at(1), Wake("r1", origin=chain))
    [(status, _, error)] = brief(step)
    assert status == "skipped"
    shown = show_origin(chain)
    assert error == f"wake loop: woken from inside its own run s/wk-1 (origin: {shown})"


def test_a_wake_from_another_schedules_run_fires_and_its_run_carries_the_origin() -> None:
    step = schedule_step(define(make()), at(1), Wake("r1", origin=("other/wk-2",)))
    [dispatch] = dispatches(step)
    assert dispatch.run_id == request_run_id("s", "r1")
    assert dispatch.origin == ("other/wk-2",)
    # a person's wake comes from no run
    [plain] = dispatches(schedule_step(define(make()), at(1), Wake("r2")))
    assert plain.origin == ()


def test_a_chain_of_distinct_schedules_is_bounded() -> None:
    longest = tuple(origin_link(f"s{n}", f"wk-{n}") for n in range(MAX_WAKE_DEPTH - 1))
    assert origin_refusal("s", longest) is None
    too_long = (*longest, "s99/wk-99")
    refusal = origin_refusal("s", too_long)
    assert refusal is not None
    assert refusal.startswith(f"wake chain too long: it comes from {MAX_WAKE_DEPTH} runs")
    step = schedule_step(define(make()), at(1), Wake("r1", origin=too_long))
    assert [s for s, _, _ in brief(step)] == ["skipped"]


def test_the_origin_header_parses_or_says_what_is_wrong() -> None:
    assert parse_origin("") == ()
    assert parse_origin(" a/wk-1 ,b.c/sl-2, ") == ("a/wk-1", "b.c/sl-2")
    assert show_origin(("a/wk-1", "b/sl-2")) == "a/wk-1, b/sl-2"
    for bad, why in (
        ("a b/wk-1", "is not '<schedule id>/<run id>'"),
        ("a", "is not '<schedule id>/<run id>'"),
        ("-a/wk-1", "is not '<schedule id>/<run id>'"),
        (",".join(["a/wk-1"] * (MAX_WAKE_DEPTH + 1)), f"at most {MAX_WAKE_DEPTH}"),
    ):
        with pytest.raises(OriginError, match="Lemongraph-Schedule-Origin") as caught:
            parse_origin(bad)
        assert why in str(caught.value)
