"""Cron expressions, shorthands, time zones and the DST rules of schedules
(docs/schedules.md, "Cron expressions"), against cronsim's evaluation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import (
    Cron,
    ScheduleError,
    count_slots,
    next_slot,
    parse_cron,
    period_ms,
    previous_slot,
    slots_between,
)
from compiler.schedules._cron import zone


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def slots(expr: str, tz: str, after: str, until: str) -> list[str]:
    return [iso(s) for s in slots_between(parse_cron(expr), tz, utc(after), utc(until), 500)]


VALID = [
    ("* * * * *", "* * * * *"),
    ("30 9 * * 1-5", "30 9 * * 1-5"),
    ("  0   12 * *  *  ", "0 12 * * *"),
    ("*/15 9-17 * * mon-fri", "*/15 9-17 * * 1-5"),
    ("0 0 1 jan,Jul *", "0 0 1 1,7 *"),
    ("0-30/10 * * * *", "0-30/10 * * * *"),
    ("5/20 * * * *", "5/20 * * * *"),
    ("0 0 * * 7", "0 0 * * 7"),
    ("0 0 * * SUN", "0 0 * * 0"),
    ("1,2,3 4 5 6 0-6", "1,2,3 4 5 6 0-6"),
    ("0 0 29 2 *", "0 0 29 2 *"),
    ("every 30m", "*/30 * * * *"),
    ("Every 1m", "* * * * *"),
    ("every 15 minutes", "*/15 * * * *"),
    ("every 2h", "0 */2 * * *"),
    ("every 1h", "0 * * * *"),
    ("hourly", "0 * * * *"),
    ("daily", "0 0 * * *"),
    ("daily at 9am", "0 9 * * *"),
    ("daily at 9:30am", "30 9 * * *"),
    ("daily at 12am", "0 0 * * *"),
    ("daily at 12pm", "0 12 * * *"),
    ("daily at 09:30", "30 9 * * *"),
    ("daily at 21:00", "0 21 * * *"),
    ("DAILY AT 9 PM", "0 21 * * *"),
    ("weekdays at 09:30", "30 9 * * 1-5"),
    ("weekends at 10am", "0 10 * * 0,6"),
    ("weekly monday at 8am", "0 8 * * 1"),
    ("weekly sun at 18:45", "45 18 * * 0"),
    ("monthly", "0 0 1 * *"),
    ("weekly", "0 0 * * 0"),
    ("@hourly", "0 * * * *"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"),
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    # LemonAutomation's shorthands (docs/schedules.md, "Shorthands")
    ("15 minutes", "*/15 * * * *"),
    ("30m", "*/30 * * * *"),
    ("2 hours", "0 */2 * * *"),
    ("every day at 17:45", "45 17 * * *"),
    ("every weekday at 9am", "0 9 * * 1-5"),
    ("fridays at 18:15", "15 18 * * 5"),
    ("Friday at 6pm", "0 18 * * 5"),
    ("every monday at 8am", "0 8 * * 1"),
    ("every sundays at 07:05", "5 7 * * 0"),
    ("sat at 10am", "0 10 * * 6"),
]


_DAY_NAMES = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]


@settings(max_examples=60, deadline=None)
@given(
    day=st.integers(0, 6),
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    form=st.sampled_from(["{d}s at {t}", "{d} at {t}", "every {d} at {t}", "every {d}s at {t}"]),
    upper=st.booleans(),
)
def test_every_form_of_a_weekly_shorthand_is_weekly_day_at_t(
    day: int, hour: int, minute: int, form: str, upper: bool
) -> None:
    """``fridays at 18:15``, ``friday at``, ``every friday at`` are all ``weekly
    friday at``; ``every day at T`` is ``daily at T``."""
    time_text = f"{hour:02d}:{minute:02d}"
    text = form.format(d=_DAY_NAMES[day], t=time_text)
    text = text.upper() if upper else text
    assert parse_cron(text).expr == parse_cron(f"weekly {_DAY_NAMES[day]} at {time_text}").expr
    assert parse_cron(text).expr == f"{minute} {hour} * * {day}"
    assert parse_cron(f"every day at {time_text}").expr == f"{minute} {hour} * * *"


@pytest.mark.parametrize(("text", "expr"), VALID)
def test_valid_expressions_normalise_to_cron(text: str, expr: str) -> None:
    assert parse_cron(text) == Cron(expr, text.strip())
    # the normalised form is itself valid and a fixed point
    assert parse_cron(expr).expr == expr


SUPPORTED = "(write *, N, N-M, */S, N-M/S or lists)"
SHORTHAND_LIST = (
    "every Nm, every Nh, N minutes, N hours, hourly, daily, daily at T, every day at T, "
    "weekdays at T, weekends at T, weekly DAY at T, DAYs at T, every DAY at T, weekly, monthly, "
    "@hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually; "
    "T is a time such as 9am, 9:30am, 09:30 or 21:00"
)

INVALID = [
    ("61 * * * *", "minute", 1, "minute field (position 1): 61 is out of range 0-59"),
    ("0 24 * * *", "hour", 3, "hour field (position 3): 24 is out of range 0-23"),
    ("0 0 0 * *", "day of month", 5, "day of month field (position 5): 0 is out of range 1-31"),
    ("0 0 * 13 *", "month", 7, "month field (position 7): 13 is out of range 1-12"),
    ("0 0 * * 8", "day of week", 9, "day of week field (position 9): 8 is out of range 0-7"),
    ("0,61 * * * *", "minute", 3, "minute field (position 3): 61 is out of range 0-59"),
    ("5-1 * * * *", "minute", 1, "minute field (position 1): the range 5-1 runs backwards"),
    ("*/0 * * * *", "minute", 3, "minute field (position 3): a step must be at least 1"),
    ("*/x * * * *", "minute", 3, "minute field (position 3): step 'x' is not a number"),
    ("1,,2 * * * *", "minute", 3, "minute field (position 3): an empty item in a list"),
    (
        "0 0 L * *",
        "day of month",
        5,
        "day of month field (position 5): 'L' is not supported " + SUPPORTED,
    ),
    (
        "0 0 * * 1#2",
        "day of week",
        9,
        "day of week field (position 9): '1#2' is not supported " + SUPPORTED,
    ),
    (
        "0 0 * foo *",
        "month",
        7,
        "month field (position 7): 'foo' is not a number (or a month name, jan-dec)",
    ),
    (
        "0 0 * * funday",
        "day of week",
        9,
        "day of week field (position 9): 'funday' is not a number (or a day name, sun-sat)",
    ),
    (
        "0 0 30 2 *",
        "day of month",
        5,
        "day of month field (position 5): day 30 never occurs in that month",
    ),
    (
        "0 0 31 4,6 *",
        "day of month",
        5,
        "day of month field (position 5): day 31 never occurs in those months",
    ),
    (
        "1 2 3 4",
        None,
        8,
        "position 8: expected 5 fields (minute hour day-of-month month day-of-week), got 4",
    ),
    (
        "1 2 3 4 5 6",
        None,
        11,
        "position 11: expected 5 fields (minute hour day-of-month month day-of-week), got 6",
    ),
    (
        "fortnightly",
        None,
        1,
        "position 1: not a 5-field cron expression nor a known shorthand (" + SHORTHAND_LIST + ")",
    ),
    (
        "every 7m",
        None,
        7,
        "position 7: 7 minutes do not divide an hour evenly (1, 2, 3, 4, 5, "
        "6, 10, 12, 15, 20, 30); for other intervals write a 5-field cron expression",
    ),
    (
        "every 5h",
        None,
        7,
        "position 7: 5 hours do not divide a day evenly (1, 2, 3, 4, 6, 8, "
        "12); for other intervals write a 5-field cron expression",
    ),
    ("every day", None, 7, "position 7: 'day' is not an interval: write every Nm or every Nh"),
    ("daily at 25:00", None, 10, "position 10: '25:00': the hour is out of range 0-23"),
    ("daily at 9:75", None, 10, "position 10: '9:75': the minute is out of range 0-59"),
    ("daily at 13pm", None, 10, "position 10: '13pm': the hour of a 12-hour time is 1-12"),
    (
        "daily at noon",
        None,
        10,
        "position 10: 'noon' is not a time: write a time as 9am, 9:30am, 09:30 or 21:00",
    ),
    (
        "weekdays at",
        None,
        12,
        "position 12: a time is missing: write a time as 9am, 9:30am, 09:30 or 21:00",
    ),
    (
        "weekly funday at 9am",
        None,
        8,
        "position 8: 'funday' is not a day of the week (monday..sunday)",
    ),
    ("7 minutes", None, 1, "position 1: 7 minutes do not divide an hour evenly (1, 2, 3, 4, 5, "
     "6, 10, 12, 15, 20, 30); for other intervals write a 5-field cron expression"),
    ("fridays 9am", None, 9, 'position 9: expected "at" and a time (DAYs at T)'),
    ("every friday", None, 13, 'position 13: expected "at" and a time (every DAY at T)'),
    ("mondays at noon", None, 12,
     "position 12: 'noon' is not a time: write a time as 9am, 9:30am, 09:30 or 21:00"),
    ("1 2 3 4  ", None, 8, "position 8: expected 5 fields (minute hour day-of-month month "
     "day-of-week), got 4"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "cron_field", "position", "message"), INVALID)
def test_invalid_expressions_name_field_and_position(
    text: str, cron_field: str | None, position: int | None, message: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_cron(text)
    error = caught.value
    assert str(error) == f'schedule: "{text}": {message}'
    assert error.field == "schedule"
    assert error.cron_field == cron_field
    assert error.position == position


def test_an_empty_expression_is_said_empty_without_a_stray_quote() -> None:
    for text in ("", "   "):
        with pytest.raises(ScheduleError) as caught:
            parse_cron(text)
        assert str(caught.value) == (
            "schedule: is empty: write a 5-field cron expression or a shorthand"
        )
        assert caught.value.position == 1


def test_not_a_string() -> None:
    with pytest.raises(ScheduleError, match="schedule: must be a string, got int"):
        parse_cron(5)  # type: ignore[arg-type]


def test_unknown_timezone_suggests_a_known_one() -> None:
    with pytest.raises(ScheduleError) as caught:
        zone("America/New_Yrok")
    assert caught.value.field == "timezone"
    assert str(caught.value) == (
        "timezone: 'America/New_Yrok' is not an IANA time zone (did you mean 'America/New_York'?)"
    )
    with pytest.raises(ScheduleError, match="did you mean 'Europe/Paris'"):
        zone("europe/paris")
    with pytest.raises(ScheduleError, match=r"\(e\.g\. UTC, Europe/Paris\)"):
        zone("Nowhere/Atall")
    for bad in ("", " UTC", "../etc/passwd"):
        with pytest.raises(ScheduleError):
            zone(bad)


@pytest.mark.parametrize("name", ["localtime", "posixrules"])
def test_the_machines_own_zone_is_not_a_time_zone(name: str) -> None:
    # The zone database of Debian links localtime to /etc/localtime: each
    # worker would read the schedule on its own machine's clock.
    with pytest.raises(ScheduleError) as caught:
        zone(name)
    assert caught.value.field == "timezone"
    assert f"{name!r} is not an IANA time zone" in str(caught.value)
    assert "did you mean" not in str(caught.value)


def test_next_slot_is_strictly_after() -> None:
    cron = parse_cron("30 9 * * *")
    assert iso(next_slot(cron, "UTC", utc("2026-01-05T09:29:59Z"))) == "2026-01-05T09:30:00Z"
    assert iso(next_slot(cron, "UTC", utc("2026-01-05T09:30:00Z"))) == "2026-01-06T09:30:00Z"
    assert iso(next_slot(cron, "UTC", utc("2026-01-05T09:30:00.500Z"))) == "2026-01-06T09:30:00Z"
    local = next_slot(cron, "Europe/Paris", utc("2026-01-05T00:00:00Z"))
    assert iso(local) == "2026-01-05T08:30:00Z"
    assert local.tzinfo is UTC


def test_next_slot_needs_an_aware_instant() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_slot(parse_cron("* * * * *"), "UTC", datetime(2026, 1, 1))


def test_day_of_month_or_day_of_week_debian_rule() -> None:
    # neither field starts with '*': either matches (the 13th, and every Friday)
    either = slots("0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", "2026-02-28T00:00:00Z")
    assert either == [
        "2026-02-06T00:00:00Z",
        "2026-02-13T00:00:00Z",
        "2026-02-20T00:00:00Z",
        "2026-02-27T00:00:00Z",
    ]  # 2026-02-13 is a Friday: once
    # day of week starts with '*': both must match
    both = slots("0 0 */2 * 5", "UTC", "2026-02-01T00:00:00Z", "2026-02-28T00:00:00Z")
    assert both == ["2026-02-13T00:00:00Z", "2026-02-27T00:00:00Z"]


def test_slots_between_is_bounded_and_half_open() -> None:
    cron = parse_cron("* * * * *")
    got = slots_between(cron, "UTC", utc("2026-01-01T00:00:00Z"), utc("2027-01-01T00:00:00Z"), 5)
    assert [iso(s) for s in got] == [f"2026-01-01T00:0{i}:00Z" for i in range(1, 6)]
    assert slots("0 * * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z") == [
        "2026-01-01T01:00:00Z",
        "2026-01-01T02:00:00Z",
    ]


def test_period_ms() -> None:
    assert period_ms(parse_cron("every 30m"), "UTC", utc("2026-01-05T09:10:00Z")) == 1_800_000
    weekdays = parse_cron("weekdays at 09:30")
    # Friday 2026-01-09 after the slot: Monday then Tuesday
    assert period_ms(weekdays, "UTC", utc("2026-01-09T12:00:00Z")) == 86_400_000
    # Thursday evening: Friday, then Monday
    assert period_ms(weekdays, "UTC", utc("2026-01-08T12:00:00Z")) == 3 * 86_400_000
    # New York's fall-back day is 25 hours long
    assert period_ms(parse_cron("0 12 * * *"), "America/New_York", utc("2026-10-31T15:00:00Z")) == (
        25 * 3_600_000
    )


def test_previous_slot() -> None:
    cron = parse_cron("30 9 * * 1-5")
    assert iso(previous_slot(cron, "UTC", utc("2026-01-11T00:00:00Z"))) == "2026-01-09T09:30:00Z"
    assert iso(previous_slot(cron, "UTC", utc("2026-01-09T09:30:00Z"))) == "2026-01-09T09:30:00Z"
    fall = previous_slot(
        parse_cron("*/30 * * * *"), "America/New_York", utc("2026-11-01T06:10:00Z")
    )
    assert iso(fall) == "2026-11-01T06:00:00Z"


@pytest.mark.parametrize(
    ("expr", "tz", "after", "until"),
    [
        ("* * * * *", "UTC", "2025-12-30T10:17:00Z", "2026-01-04T03:00:30Z"),
        ("*/30 * * * *", "America/New_York", "2026-10-30T10:17:00Z", "2026-11-03T03:00:00Z"),
        ("0 * * * *", "America/New_York", "2026-03-06T00:00:00Z", "2026-03-10T00:00:00Z"),
        ("30 1,2 * * *", "America/New_York", "2026-03-01T00:00:00Z", "2026-11-05T00:00:00Z"),
        ("15 2 * * *", "Australia/Lord_Howe", "2026-03-30T00:00:00Z", "2026-10-10T00:00:00Z"),
        ("0 0 13 * 5", "Europe/Paris", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
        ("0 0 * * *", "America/Santiago", "2026-03-30T00:00:00Z", "2026-09-30T00:00:00Z"),
    ],
)
def test_count_slots_matches_enumeration(expr: str, tz: str, after: str, until: str) -> None:
    cron = parse_cron(expr)
    listed = slots_between(cron, tz, utc(after), utc(until), 1_000_000)
    assert count_slots(cron, tz, utc(after), utc(until)) == len(listed)


def test_count_slots_of_a_year_is_fast_and_exact() -> None:
    cron = parse_cron("* * * * *")
    count = count_slots(
        cron, "America/New_York", utc("2025-06-01T00:00:00Z"), utc("2026-06-01T00:00:00Z")
    )
    assert count == 365 * 1440


# -- daylight saving (docs/schedules.md, "Time zones and daylight saving") -----------------------


def test_new_york_spring_forward_fixed_time_fires_once_just_after_the_jump() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist
    assert slots(
        "30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"
    ) == [
        "2026-03-07T07:30:00Z",  # 02:30 EST
        "2026-03-08T07:00:00Z",  # 03:00 EDT, just after the jump
        "2026-03-09T06:30:00Z",  # 02:30 EDT
    ]


def test_new_york_fall_back_fixed_time_fires_once() -> None:
    # 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice
    assert slots(
        "30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z"
    ) == [
        "2026-10-31T05:30:00Z",
        "2026-11-01T05:30:00Z",  # the first 01:30 (EDT) only
        "2026-11-02T06:30:00Z",
    ]
    # asked from inside the repeated hour, the next is the next day's
    got = next_slot(parse_cron("30 1 * * *"), "America/New_York", utc("2026-11-01T06:15:00Z"))
    assert iso(got) == "2026-11-02T06:30:00Z"


def test_every_30_minutes_keeps_its_elapsed_interval_across_the_fall_back() -> None:
    got = slots_between(
        parse_cron("*/30 * * * *"),
        "America/New_York",
        utc("2026-11-01T04:00:00Z"),
        utc("2026-11-01T08:00:00Z"),
        100,
    )
    gaps = {b - a for a, b in pairwise(got)}
    assert gaps == {timedelta(minutes=30)}
    assert len(got) == 8  # 00:30, 01:00, 01:30 EDT, 01:00, 01:30 EST, 02:00, 02:30, 03:00
    local = [s.astimezone(zone("America/New_York")).strftime("%H:%M%z") for s in got]
    assert local[1:5] == ["01:00-0400", "01:30-0400", "01:00-0500", "01:30-0500"]


@pytest.mark.parametrize(
    ("after", "until", "count"),
    [
        ("2026-03-08T04:00:00Z", "2026-03-08T10:00:00Z", 6),  # spring: 23-hour day
        ("2026-11-01T03:00:00Z", "2026-11-01T09:00:00Z", 6),  # fall: 01:00 twice
    ],
)
def test_hourly_fires_every_elapsed_hour_across_both_transitions(
    after: str, until: str, count: int
) -> None:
    got = slots_between(parse_cron("0 * * * *"), "America/New_York", utc(after), utc(until), 100)
    assert len(got) == count
    assert {b - a for a, b in pairwise(got)} == {timedelta(hours=1)}


def test_lord_howe_half_hour_shift_forward() -> None:
    # 2026-10-04 02:00 +10:30 jumps to 02:30 +11:00
    tz = "Australia/Lord_Howe"
    assert slots("15 2 * * *", tz, "2026-10-02T00:00:00Z", "2026-10-05T00:00:00Z") == [
        "2026-10-02T15:45:00Z",  # 02:15 +10:30
        "2026-10-03T15:30:00Z",  # 02:30 +11:00, just after the jump
        "2026-10-04T15:15:00Z",  # 02:15 +11:00
    ]
    half = slots("*/30 * * * *", tz, "2026-10-03T14:00:00Z", "2026-10-03T16:00:00Z")
    assert half == [
        "2026-10-03T14:30:00Z",  # 01:00
        "2026-10-03T15:00:00Z",  # 01:30
        "2026-10-03T15:30:00Z",  # 02:30 (02:00 never happened)
        "2026-10-03T16:00:00Z",  # 03:00
    ]
    # hourly slots stay on the wall clock's :00, so once 90 minutes apart
    hourly = slots("0 * * * *", tz, "2026-10-03T14:00:00Z", "2026-10-03T17:00:00Z")
    assert hourly == ["2026-10-03T14:30:00Z", "2026-10-03T16:00:00Z", "2026-10-03T17:00:00Z"]


def test_lord_howe_half_hour_shift_back() -> None:
    # 2026-04-05 02:00 +11:00 falls back to 01:30 +10:30; 01:30-02:00 happens twice
    tz = "Australia/Lord_Howe"
    assert slots("45 1 * * *", tz, "2026-04-03T00:00:00Z", "2026-04-06T00:00:00Z") == [
        "2026-04-03T14:45:00Z",
        "2026-04-04T14:45:00Z",  # the first 01:45 (+11:00) only
        "2026-04-05T15:15:00Z",
    ]
    half = slots("*/30 * * * *", tz, "2026-04-04T13:30:00Z", "2026-04-04T16:00:00Z")
    assert half == [
        "2026-04-04T14:00:00Z",  # 01:00 +11
        "2026-04-04T14:30:00Z",  # 01:30 +11
        "2026-04-04T15:00:00Z",  # 01:30 +10:30, again
        "2026-04-04T15:30:00Z",  # 02:00
        "2026-04-04T16:00:00Z",
    ]


def test_a_utc_schedule_ignores_every_transition() -> None:
    for after in ("2026-03-07T00:00:00Z", "2026-10-31T00:00:00Z"):
        got = slots_between(
            parse_cron("30 1 * * *"), "UTC", utc(after), utc(after) + timedelta(days=3), 10
        )
        assert [s.strftime("%H:%M") for s in got] == ["01:30"] * 3
        assert {b - a for a, b in pairwise(got)} == {timedelta(days=1)}


# -- our validation agrees with cronsim's evaluation --------------------------------


def _parse(text: str) -> Cron | ScheduleError:
    try:
        return parse_cron(text)
    except ScheduleError as error:
        return error


_GOOD = st.one_of(
    st.just("*"),
    st.integers(1, 7).map(str),
    st.tuples(st.integers(1, 7), st.integers(1, 7)).map(lambda r: f"{min(r)}-{max(r)}"),
    st.tuples(st.sampled_from(["*", "1", "1-7", "5"]), st.integers(1, 13)).map(
        lambda r: f"{r[0]}/{r[1]}"
    ),
)
_BAD = st.one_of(
    st.integers(0, 70).map(str),
    st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda r: f"{r[0]}-{r[1]}"),
    st.sampled_from(["jan", "MON", "fri-sun", "L", "1#2", "?", "", "x", "-1", "3-", "*/0"]),
)
_ITEM = st.one_of(_GOOD, _GOOD, _GOOD, _GOOD, _GOOD, _GOOD, _GOOD, _GOOD, _BAD)
_FIELD = st.lists(_ITEM, min_size=1, max_size=3).map(",".join)
_FIELDS = st.one_of(
    st.lists(_FIELD, min_size=5, max_size=5),
    st.lists(_FIELD, min_size=5, max_size=5),
    st.lists(_FIELD, min_size=4, max_size=6),
)


@settings(max_examples=400, deadline=None)
@given(fields=_FIELDS)
def test_what_we_accept_cronsim_evaluates_and_what_we_refuse_is_an_error(
    fields: list[str],
) -> None:
    text = " ".join(fields)
    outcome = _parse(text)
    if isinstance(outcome, ScheduleError):
        assert outcome.field == "schedule"
        assert str(outcome).startswith(f'schedule: "{text}": ')
        if outcome.position is not None:
            assert 1 <= outcome.position <= len(text) + 2
        return
    cron = outcome
    # accepted: cronsim evaluates it (no "Bad minute"), and our own day count agrees
    cronsim = CronSim(cron.expr, datetime(2026, 1, 1, tzinfo=UTC))
    nxt = next_slot(cron, "UTC", utc("2026-01-01T00:00:00Z"))
    assert nxt == next(cronsim)
    after, until = utc("2026-01-01T00:00:00Z"), utc("2026-01-04T00:00:00Z")
    listed = slots_between(cron, "UTC", after, until, 10_000)
    assert count_slots(cron, "UTC", after, until) == len(listed)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_parses_or_is_a_schedule_error(text: str) -> None:
    outcome = _parse(text)
    assert isinstance(outcome, Cron) or outcome.field == "schedule"
