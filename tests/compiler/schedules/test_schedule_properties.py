"""Properties of the schedule state machine over random histories (hypothesis):
every nominal slot is accounted for exactly once (fired, skipped, missed, or
waiting in the buffer), no run id fires twice, and re-deciding from the stored
state gives the same effects (docs/schedules.md, "Downtime and catch-up")."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import (
    Define,
    Dispatch,
    Report,
    RunRecorded,
    ScheduleState,
    ScheduleTick,
    Wake,
    schedule_step,
    slots_between,
    validate_schedule,
)

BASES = [
    datetime(2026, 1, 5, 0, 0, tzinfo=UTC),
    datetime(2026, 3, 8, 4, 0, tzinfo=UTC),  # New York springs forward at 07:00Z
    datetime(2026, 11, 1, 3, 0, tzinfo=UTC),  # New York falls back at 06:00Z
    datetime(2026, 10, 3, 12, 0, tzinfo=UTC),  # Lord Howe shifts 30 minutes at 15:30Z
]

schedules = st.fixed_dictionaries(
    {
        "id": st.just("p"),
        "name": st.just("P"),
        "schedule": st.sampled_from(
            [
                "*/5 * * * *",
                "*/15 * * * *",
                "0 * * * *",
                "*/7 * * * *",
                "30 1,2 * * *",
                "*/30 * * * *",
                "0,10 * * * *",
            ]
        ),
        "timezone": st.sampled_from(["UTC", "America/New_York", "Australia/Lord_Howe"]),
        "action": st.sampled_from(
            [
                {"type": "prompt", "agent": "a", "prompt": "go"},
                {"type": "start_job", "playbook_key": "k"},
            ]
        ),
        "overlap": st.sampled_from(["skip", "buffer_one", "allow_all"]),
        "jitter": st.sampled_from(["0s", "90s", "20m"]),
        "timeout": st.sampled_from(["10m", "2h"]),
        "max_retries": st.integers(0, 2),
    },
    optional={"catchup_window": st.sampled_from(["1m", "10m", "1h", "3h"])},
)

steps = st.lists(
    st.tuples(
        st.integers(0, 300),  # minutes since the previous step
        st.sampled_from(["tick", "tick", "tick", "completed", "failed", "wake", "update"]),
        st.integers(0, 5),  # which active run a report is for
    ),
    max_size=25,
)


def _expand(record: dict[str, Any], schedule: Any) -> list[str]:
    first = datetime.fromisoformat(record["slot"].replace("Z", "+00:00"))
    last = datetime.fromisoformat(record["slot_last"].replace("Z", "+00:00"))
    span = slots_between(
        schedule.cron, schedule.timezone, first - timedelta(microseconds=1), last, 10**6
    )
    assert len(span) == record["missed_count"]
    return [s.isoformat().replace("+00:00", "Z") for s in span]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=schedules,
    base=st.sampled_from(BASES),
    history=steps,
)
def test_every_slot_is_accounted_for_exactly_once(
    data: dict[str, Any], base: datetime, history: list[tuple[int, str, int]]
) -> None:
    schedule = validate_schedule(data)
    first = schedule_step(None, base, Define(schedule))
    state = first.state
    assert state is not None
    now = base
    effects: list[Any] = []
    for gap, kind, pick in history:
        now = now + timedelta(minutes=gap)
        item: Any
        if kind == "tick":
            item = ScheduleTick()
        elif kind == "wake":
            item = Wake(f"w{len(effects)}")
        elif kind == "update":
            # the same clock, other settings: the slots go on being accounted for
            changed = {**data, "overlap": ["skip", "buffer_one", "allow_all"][pick % 3]}
            changed["jitter"] = ["0s", "90s", "20m"][(pick + gap) % 3]
            item = Define(validate_schedule(changed))
        elif state.active:
            run = state.active[pick % len(state.active)]
            item = Report(run.run_id, kind, "out", None if kind == "completed" else "e")  # type: ignore[arg-type]
        else:
            item = ScheduleTick()
        step = schedule_step(state, now, item)
        # re-deciding from the stored state gives the very same effects
        stored = ScheduleState.from_json(json.loads(json.dumps(state.to_json())))
        assert repr(schedule_step(stored, now, item)) == repr(step)
        assert step.state is not None
        state = step.state
        effects.extend(step.effects)

    fired = [e.run_id for e in effects if isinstance(e, Dispatch)]
    assert len(fired) == len(set(fired)), "a run id fired twice"

    accounted: Counter[str] = Counter()
    seen: set[str] = set()
    for effect in effects:
        if not isinstance(effect, RunRecorded):
            continue
        record = dict(effect.run)
        if record["triggered_by"] != "schedule":
            continue
        if record["missed_count"] is not None:
            accounted.update(_expand(record, schedule))
            continue
        if record["run_id"] in seen:
            continue  # a later record of the same run (its end)
        seen.add(record["run_id"])
        accounted[record["slot"]] += 1
    if state.buffered is not None:
        pending = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=state.buffered.slot_ms)
        accounted[pending.isoformat().replace("+00:00", "Z")] += 1

    if state.last_slot_ms is None:
        assert not accounted
        return
    last = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=state.last_slot_ms)
    expected = slots_between(schedule.cron, schedule.timezone, base, last, 10**6)
    names = [s.isoformat().replace("+00:00", "Z") for s in expected]
    assert dict(accounted) == dict.fromkeys(names, 1)
    assert state.next_slot_ms is not None
    after_last = slots_between(schedule.cron, schedule.timezone, last, last + timedelta(days=2), 1)
    assert state.next_slot_ms == int(after_last[0].timestamp() * 1000)
