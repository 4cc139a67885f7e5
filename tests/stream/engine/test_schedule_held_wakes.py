"""A wake read before its schedule's definition (docs/schedules.md, "Wake"):
held in the engine's table until the definition is read, then decided once,
in order; dead-lettered with its own bytes if no definition comes within 5
minutes, or if too many wait already. Without a broker: the harness commits
each batch as the Faust layer does (tests/stream/engine/engine_harness.py)."""

from __future__ import annotations

from datetime import timedelta

import orjson

from stream.engine.held import HELD_MAX
from stream.engine.timers import DUE_VALUE, due_key
from tests.stream.engine.engine_harness import letters, ms, on
from tests.stream.engine.test_schedules_engine import (
    PARTITIONS,
    T0,
    Lane,
    every_5m,
    home,
    runs,
    starts,
    wake_run,
)

HELD_ROW = "\x00schedule-held/"


def held_rows(lane: Lane) -> list[tuple[str, int]]:
    return sorted(key for key in lane.store if key[0].startswith(HELD_ROW))


def held_index(lane: Lane) -> list[tuple[int, str]]:
    return [
        (due, name)
        for p in range(PARTITIONS)
        for due, kind, name in lane.h.due_rows(p)
        if kind == "h"
    ]


def test_a_wake_before_its_definition_is_held_then_decided_once_with_it() -> None:
    lane = Lane()
    first = lane.wake("review", T0, request_id="r-1", context={"n": 1})
    second = lane.wake("review", T0 + timedelta(seconds=1), request_id="r-2")
    retry = lane.wake("review", T0 + timedelta(seconds=2), request_id="r-1")
    batch = lane.run(first, second, retry)
    assert batch.outputs == []  # neither dead-lettered nor decided
    assert batch.duplicates == 1
    assert held_rows(lane) == [(HELD_ROW + "review", home("review"))]
    assert held_index(lane) == [(ms(T0 + timedelta(minutes=5)), "review")]

    defined = lane.run(lane.define(every_5m(), at=T0 + timedelta(minutes=1)))
    want = [wake_run("review", "r-1"), wake_run("review", "r-2")]
    assert [(r.run_id, r.triggered_by) for r in runs(defined)] == [(w, "wake") for w in want]
    assert [s.key for _o, s in starts(defined)] == want
    assert [r.context for r in runs(defined)] == [{"n": 1}, None]
    assert letters(defined) == []
    assert held_rows(lane) == []
    assert held_index(lane) == []
    # the expiry's tick finds nothing left to dead-letter
    assert letters(lane.run(lane.tick(T0 + timedelta(minutes=5), home("review")))) == []


def test_held_wakes_survive_a_restart_and_run_once() -> None:
    lane = Lane()
    lane.run(lane.wake("review", T0, request_id="r-1"))
    lane = lane.restart()
    assert lane.run(lane.wake("review", T0, request_id="r-1")).duplicates == 1
    defined = lane.run(lane.define(every_5m(), at=T0 + timedelta(minutes=1)))
    assert [r.run_id for r in runs(defined)] == [wake_run("review", "r-1")]
    lane = lane.restart()
    again = lane.run(lane.wake("review", T0 + timedelta(minutes=2), request_id="r-1"))
    assert runs(again) == []
    assert starts(again) == []


def test_a_wake_without_a_definition_within_5m_is_dead_lettered_with_its_bytes() -> None:
    lane = Lane()
    p = home("ghost")
    wake = lane.wake("ghost", T0, request_id="x")
    lane.run(wake)
    assert lane.run(lane.tick(T0 + timedelta(minutes=5) - timedelta(seconds=1), p)).outputs == []
    [letter] = letters(lane.run(lane.tick(T0 + timedelta(minutes=5), p)))
    assert letter.reason == "no schedule 'ghost' was defined within 5m of the wake"
    assert (letter.key, letter.value) == (wake.key, wake.value)
    assert (letter.partition, letter.offset) == (wake.partition, wake.offset)
    assert held_rows(lane) == []
    assert held_index(lane) == []
    defined = lane.run(lane.define(every_5m("ghost"), at=T0 + timedelta(minutes=6)))
    assert runs(defined) == []


def test_at_most_held_max_wakes_wait_for_one_schedule() -> None:
    lane = Lane()
    wakes = [lane.wake("busy", T0, request_id=f"r-{n}") for n in range(HELD_MAX + 1)]
    batch = lane.run(*wakes)
    [letter] = letters(batch)
    assert letter.reason == (
        f"schedule.wake: no schedule 'busy', and {HELD_MAX} wakes already wait for its definition"
    )
    assert letter.value == wakes[-1].value
    defined = lane.run(lane.define(every_5m("busy"), at=T0 + timedelta(minutes=1)))
    assert len(runs(defined)) == HELD_MAX


def test_a_forwarded_wake_without_a_request_id_is_held_once_by_its_inbox_position() -> None:
    lane = Lane()
    p = home("review")
    elsewhere = (p + 1) % PARTITIONS
    original = lane.h.inbox(
        orjson.dumps({"type": "schedule.wake", "schedule_id": "review"}),
        at=T0,
        key=b"review",
        partition=elsewhere,
    )
    [copy] = lane.run(original).outputs
    for _ in range(2):  # the forward produced twice
        again = lane.h.inbox(copy.value, at=T0, key=b"review", headers=copy.headers)
        assert on(lane.run(again), "deadletter") == []
    defined = lane.run(lane.define(every_5m(), at=T0 + timedelta(minutes=1)))
    request = f"p{elsewhere}@{original.offset}"
    assert [r.run_id for r in runs(defined)] == [wake_run("review", request)]


def test_a_table_indexed_afresh_indexes_its_held_wakes() -> None:
    lane = Lane()
    p = home("review")
    lane.run(lane.wake("review", T0, request_id="r-1"))
    key = HELD_ROW + "review"
    stored = [(key, lane.store[(key, p)]), (HELD_ROW + "bad", b"not json")]
    assert lane.h.engine.index_rows(p, stored, mark=False) == [
        (due_key("h", ms(T0 + timedelta(minutes=5)), "review"), p, DUE_VALUE)
    ]
