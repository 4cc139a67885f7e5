"""Schedule definitions: validation, defaults, normalisation, ids, jitter and
key templates (docs/schedules.md, "A schedule's fields", "Exactly once: slot ids")."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import (
    Schedule,
    ScheduleError,
    jitter_ms,
    render_key,
    request_run_id,
    retry_id,
    slot_id,
    validate_schedule,
)

PROMPT = {"type": "prompt", "agent": "watcher", "prompt": "Check the queue."}


def definition(**fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "Lead review", "schedule": "weekdays at 09:30"}
    out["action"] = {"type": "start_job", "playbook_key": "lead-qualification"}
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def test_defaults_and_normalised_spec() -> None:
    schedule = validate_schedule(definition())
    assert schedule.id == "lead-review"
    assert schedule.cron.expr == "30 9 * * 1-5"
    assert (schedule.timezone, schedule.enabled, schedule.overlap) == ("UTC", True, "skip")
    assert (schedule.jitter_ms, schedule.timeout_ms) == (0, 300_000)
    assert (schedule.max_retries, schedule.retry_backoff_ms) == (0, 30_000)
    assert schedule.catchup_window_ms is None
    assert schedule.deliver_to == "none"
    assert not schedule.heartbeat
    assert schedule.to_json() == {
        "id": "lead-review",
        "name": "Lead review",
        "schedule": "weekdays at 09:30",
        "timezone": "UTC",
        "action": {"type": "start_job", "playbook_key": "lead-qualification"},
        "enabled": True,
        "jitter": "0s",
        "timeout": "5m",
        "max_retries": 0,
        "retry_backoff": "30s",
        "overlap": "skip",
        "deliver_to": "none",
        "meta": {},
    }


def test_every_field_round_trips() -> None:
    given = {
        "id": "beat.1",
        "name": "Queue heartbeat",
        "schedule": "*/30 * * * *",
        "timezone": "America/New_York",
        "action": PROMPT,
        "enabled": False,
        "jitter": "90s",
        "timeout": "2m",
        "max_retries": 2,
        "retry_backoff": "1m",
        "overlap": "buffer_one",
        "catchup_window": "1h",
        "deliver_to": "email:ops@example.com",
        "meta": {"heartbeat": True, "owner": "ops"},
    }
    schedule = validate_schedule(given)
    assert schedule.heartbeat
    assert (schedule.jitter_ms, schedule.catchup_window_ms) == (90_000, 3_600_000)
    assert schedule.to_json() == {**given, "jitter": "1m30s"}
    assert validate_schedule(schedule.to_json()) == schedule
    send = validate_schedule(
        definition(
            action={
                "type": "send_event",
                "job_key": "job-1",
                "event": {"action": "reminder_due", "value": 3, "properties": {"a": 1}},
            }
        )
    )
    assert validate_schedule(send.to_json()) == send
    keyed = validate_schedule(
        definition(
            action={
                "type": "start_job",
                "playbook_key": "p",
                "subject": {"x": 1},
                "key": "review-{date}-{time}",
            }
        )
    )
    assert validate_schedule(keyed.to_json()) == keyed


ERRORS = [
    (definition(cron="* * * * *"), "cron", "cron: unknown field 'cron' (did you mean 'schedule'?)"),
    (
        definition(timezon="UTC"),
        "timezon",
        "timezon: unknown field 'timezon' (did you mean 'timezone'?)",
    ),
    (definition(name=None), "name", "name: this field is required"),
    (definition(name=""), "name", "name: must be a non-empty string"),
    (definition(name="!!!"), "id", "id: cannot be derived from the name '!!!': give an id"),
    (
        definition(id="-x"),
        "id",
        "id: '-x' is not a schedule id: 1-64 characters of letters, "
        "digits, '.', '_' and '-', starting with a letter or digit",
    ),
    (definition(id="a" * 65), "id", None),
    (
        definition(schedule=None),
        "schedule",
        "schedule: this field is required (or at: an instant, for a one-shot)",
    ),
    (
        definition(schedule="61 * * * *"),
        "schedule",
        'schedule: "61 * * * *": minute field (position 1): 61 is out of range 0-59',
    ),
    (definition(timezone="Mars/Olympus"), "timezone", None),
    (definition(action=None), "action", "action: this field is required"),
    (
        definition(action={"type": "email"}),
        "action.type",
        "action.type: must be one of start_job, send_event, prompt, command, got 'email'",
    ),
    (
        definition(action={"type": "start_job"}),
        "action.playbook_key",
        "action.playbook_key: this field is required",
    ),
    (
        definition(action={"type": "start_job", "playbook": "p"}),
        "action.playbook",
        "action.playbook: unknown field 'playbook' (did you mean 'playbook_key'?)",
    ),
    (
        definition(action={"type": "start_job", "playbook_key": "p", "key": "r-{day}"}),
        "action.key",
        "action.key: unknown placeholder '{day}' at position 3 (known: {slot}, "
        "{schedule}, {date}, {time}, {instant})",
    ),
    (
        definition(action={"type": "start_job", "playbook_key": "p", "key": "a/{date}"}),
        "action.key",
        "action.key: the rendered key has '/' at position 1: a key is one URL path segment",
    ),
    (
        definition(action={"type": "send_event", "job_key": "j"}),
        "action.event",
        "action.event: must be an object with an action",
    ),
    (
        definition(action={"type": "send_event", "job_key": "j", "event": {"name": "x"}}),
        "action.event.name",
        "action.event.name: unknown field 'name'",
    ),
    (
        definition(action={"type": "prompt", "agent": "a"}),
        "action.prompt",
        "action.prompt: this field is required",
    ),
    (definition(enabled="yes"), "enabled", "enabled: must be true or false, got 'yes'"),
    (definition(jitter="soon"), "jitter", None),
    (
        definition(timeout=30),
        "timeout",
        "timeout: must be a duration such as 30s, 5m or 2h, got 30",
    ),
    (definition(timeout="0s"), "timeout", "timeout: must be at least 1s, got '0s'"),
    (
        definition(catchup_window="30s"),
        "catchup_window",
        "catchup_window: must be at least 1m, got '30s'",
    ),
    # Past a year, instants leave what a datetime holds: refused, not a crash.
    (definition(jitter="1000000d"), "jitter", "jitter: must be at most 366d, got '1000000d'"),
    (
        definition(catchup_window="367d"),
        "catchup_window",
        "catchup_window: must be at most 366d, got '367d'",
    ),
    (definition(timeout="10000000d"), "timeout", "timeout: must be at most 366d, got '10000000d'"),
    (
        definition(retry_backoff="99999999999999999d"),
        "retry_backoff",
        "retry_backoff: must be at most 366d, got '99999999999999999d'",
    ),
    (
        definition(max_retries=-1),
        "max_retries",
        "max_retries: must be a whole number 0-100, got -1",
    ),
    (definition(max_retries=True), "max_retries", None),
    (
        definition(overlap="queue"),
        "overlap",
        "overlap: must be one of skip, buffer_one, allow_all, got 'queue'",
    ),
    (
        definition(deliver_to="slack:#ops"),
        "deliver_to",
        "deliver_to: must be none, auto, web:<job key> or email:<address>, got 'slack:#ops'",
    ),
    (definition(deliver_to="email:nobody"), "deliver_to", None),
    (
        definition(meta={"heartbeat": True}),
        "meta.heartbeat",
        "meta.heartbeat: a heartbeat is a prompt schedule: action.type must be prompt",
    ),
    (definition(meta=[1]), "meta", "meta: must be an object"),
    ([1, 2], "schedule", "schedule: a schedule definition must be an object"),
]


@pytest.mark.parametrize(("data", "field", "message"), ERRORS)
def test_invalid_definitions_name_the_field(data: object, field: str, message: str | None) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(data, "schedules.yaml")
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    if message is not None:
        assert str(caught.value) == message
    assert caught.value.source == "schedules.yaml"  # type: ignore[attr-defined]


def test_the_schedule_field_error_carries_the_position() -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(definition(schedule="0 0 * * 1 2"))
    assert (caught.value.field, caught.value.position) == ("schedule", 11)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_ids_follow_their_formula() -> None:
    nominal = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
    assert slot_id("lead-review", nominal) == "sl-" + _sha("lead-review\n2026-01-05T09:30:00Z")[:20]
    assert retry_id("sl-abc", 2) == "rt-" + _sha("sl-abc\n2")[:20]
    assert request_run_id("beat", "req-1") == "wk-" + _sha("beat\nreq-1")[:20]
    assert slot_id("a", nominal) != slot_id("b", nominal)
    assert len(slot_id("a", nominal)) == 23


def test_jitter_is_a_hash_of_the_slot() -> None:
    assert jitter_ms("sl-x", 0) == 0
    assert jitter_ms("sl-x", 60_000) == int(_sha("sl-x")[:8], 16) % 60_001
    values = {jitter_ms(f"sl-{i}", 1000) for i in range(200)}
    assert values <= set(range(1001))
    assert len(values) > 50


def test_render_key_fills_placeholders_in_the_schedule_zone() -> None:
    schedule: Schedule = validate_schedule(definition(timezone="America/New_York"))
    nominal = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 03:00 EDT
    key = render_key("{schedule}-{date}-{time}-{instant}-{slot}", schedule, nominal)
    assert key == f"lead-review-2026-03-08-0300-20260308T0700Z-{slot_id('lead-review', nominal)}"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_FIELD_VALUES = {
    "id": st.sampled_from(["a", "-x", "ok.id", 5]),
    "name": st.sampled_from(["Lead review", "", None, "!!"]),
    "schedule": st.sampled_from(["every 30m", "61 * * * *", "weekly", 3]),
    "timezone": st.sampled_from(["UTC", "Mars/Base", ["x"], None]),
    "action": st.sampled_from(
        [
            PROMPT,
            {"type": "start_job", "playbook_key": "k", "key": "{x}"},
            {"type": "send_event", "job_key": "j", "event": {}},
            "x",
        ]
    ),
    "jitter": st.sampled_from(["0s", "1m", "x", 5]),
    "overlap": st.sampled_from(["skip", "queue", ["skip"]]),
    "deliver_to": st.sampled_from(["none", "web:j", "email:a@b.co", "web:", {"a": 1}]),
    "meta": st.sampled_from([{}, {"heartbeat": True}, {"heartbeat": "yes"}, []]),
}


@settings(max_examples=300, deadline=None)
@given(
    fields=st.fixed_dictionaries({}, optional=_FIELD_VALUES),
    extra=st.dictionaries(st.text(max_size=6), _JSON, max_size=2),
)
def test_any_definition_is_a_schedule_or_a_schedule_error(
    fields: dict[str, Any], extra: dict[str, Any]
) -> None:
    data = {**extra, **fields}
    try:
        schedule = validate_schedule(data)
    except ScheduleError as error:
        assert str(error).startswith(f"{error.field}: ")  # noqa: PT017
        return
    assert validate_schedule(schedule.to_json()) == schedule
