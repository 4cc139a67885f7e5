"""Where a schedule delivers by default (docs/schedules.md, "Delivery"): a prompt
or command schedule created from a job's conversation (``job_key``) delivers to
that conversation, an operator's (no ``job_key``) nowhere, ``start_job`` and
``send_event`` never; an explicit ``deliver_to`` always wins. (A change of owner
through the API: tests/stream/gateway/test_schedules_api.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import (
    Define,
    Deliver,
    Report,
    ScheduleError,
    ScheduleTick,
    schedule_step,
    slot_id,
    validate_schedule,
)
from tests.compiler.schedules.test_schedule_step import PROMPT, START, T0, at

ACTIONS: dict[str, dict[str, Any]] = {
    "prompt": PROMPT,
    "command": {"type": "command", "tool": "run_tests", "args": {}},
    "start_job": START,
    "send_event": {"type": "send_event", "job_key": "job-7", "event": {"action": "nudge"}},
}
DELIVERS = ("prompt", "command")


def spec(kind: str, **fields: Any) -> dict[str, Any]:
    return {"id": "s", "name": "S", "schedule": "every 30m", "action": ACTIONS[kind], **fields}


JOB_KEYS = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(sorted(ACTIONS)),
    st.one_of(st.none(), JOB_KEYS),
    st.sampled_from([None, "", "auto", "none", "email:ops@example.com", "web:ops-desk"]),
)
def test_the_default_target_is_the_owners_and_an_explicit_one_wins(
    kind: str, job_key: str | None, given_target: str | None
) -> None:
    fields: dict[str, Any] = {}
    if job_key is not None:
        fields["job_key"] = job_key
    if given_target is not None:
        fields["deliver_to"] = given_target
    schedule = validate_schedule(spec(kind, **fields))
    if given_target not in (None, "", "auto"):
        assert schedule.deliver_to == given_target
    elif job_key is not None and kind in DELIVERS:
        assert schedule.deliver_to == f"web:{job_key}"
    else:
        assert schedule.deliver_to == "none"
    assert schedule.job_key == job_key
    # Normalised, the target is written out, and reads back as the same schedule.
    stored = schedule.to_json()
    assert stored["deliver_to"] == schedule.deliver_to
    assert ("job_key" in stored) is (job_key is not None)
    assert validate_schedule(stored) == schedule


def test_a_run_of_a_jobs_schedule_is_delivered_to_its_conversation() -> None:
    state = schedule_step(None, T0, Define(validate_schedule(spec("prompt", job_key="job-7"))))
    assert state.state is not None
    running = schedule_step(state.state, at(30), ScheduleTick()).state
    assert running is not None
    run = slot_id("s", at(30))
    step = schedule_step(running, at(31), Report(run, "completed", "3 waiting."))
    assert [e for e in step.effects if isinstance(e, Deliver)] == [
        Deliver(run, "web:job-7", "S: 3 waiting.")
    ]


@pytest.mark.parametrize("job_key", ["", " padded", "a\nb", 7, "x" * 300])
def test_a_job_key_that_is_no_job_key_is_refused(job_key: object) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(spec("prompt", job_key=job_key))
    assert caught.value.field == "job_key"
