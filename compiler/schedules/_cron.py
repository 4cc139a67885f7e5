"""Cron expressions of schedules, their shorthands, time zones and slot math
(docs/schedules.md, "Cron expressions",
"Time zones and daylight saving").

Pure: no clock (every function takes the instant it works from), no I/O beyond
the time zone database that :mod:`zoneinfo` reads.

Syntax. Five fields, ``minute hour day-of-month month day-of-week``, each a
comma-separated list of items; an item is ``*``, ``N``, ``N-M``, ``*/S``,
``N-M/S`` or ``N/S`` (from N to the field's maximum, every S). Months may be
named ``jan``..``dec`` and days ``sun``..``sat`` (any case); day of week 0 and 7
are both Sunday. When either the day-of-month or the day-of-week field starts
with ``*`` a day must match both, otherwise either (Debian cron's rule).
``L``, ``W``, ``#`` and ``?`` are not supported. Shorthands (any case):
``every Nm`` (N divides 60), ``every Nh`` (N divides 24), the same without
``every`` (``15 minutes``, LemonAutomation's form), ``hourly``, ``daily``,
``daily at T`` (or ``every day at T``), ``weekdays at T``, ``weekends at T``,
``weekly DAY at T`` (or ``DAYs at T``, ``DAY at T``, ``every DAY at T``:
``fridays at 18:15``), ``weekly``, ``monthly``, and ``@hourly``, ``@daily``,
``@midnight``, ``@weekly``, ``@monthly``, ``@yearly``, ``@annually``; T is
``9am``, ``9:30am``, ``09:30`` or ``21:00``. Everything is normalised to a
5-field expression (:attr:`Cron.expr`).

Daylight saving (evaluated by ``cronsim``, which follows Debian cron): a
schedule at a fixed wall time (neither minute nor hour field starts with ``*``)
whose time does not exist that day fires just after the jump (``30 2 * * *`` in
New York on 2026-03-08 fires at 03:00 EDT); one whose time occurs twice fires
once, the first time. A schedule whose minute or hour field starts with ``*``
follows elapsed time: ``*/30 * * * *`` fires every 30 minutes through a
fall-back (01:00 and 01:30 twice, once in each offset) and ``0 * * * *`` fires
every elapsed hour. Its slots stay on the wall clock's marks, so across a shift
that is not a whole interval (Lord Howe's 30 minutes) hourly slots are 90
minutes apart once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim

from compiler._errors import LemongraphError
from compiler._source import did_you_mean

__all__ = [
    "SHORTHANDS",
    "Cron",
    "ScheduleError",
    "count_slots",
    "next_slot",
    "parse_cron",
    "period_ms",
    "previous_slot",
    "slots_between",
    "zone",
]


class ScheduleError(LemongraphError):
    """A schedule definition, cron expression or time zone that is not valid.

    ``field`` is the definition's field path (``schedule``, ``timezone``,
    ``action.playbook_key``); ``position`` the 1-based character position in the
    ``schedule`` text when the problem is there (else None); ``cron_field`` the
    cron field at fault (``minute``, ``hour``, ``day of month``, ``month``,
    ``day of week``) or None; ``reason`` the message without its prefix.
    """

    code = "invalid_schedule"

    def __init__(
        self,
        field: str,
        reason: str,
        position: int | None = None,
        cron_field: str | None = None,
        message: str | None = None,
    ) -> None:
        self.field = field
        self.reason = reason
        self.position = position
        self.cron_field = cron_field
        super().__init__(message if message is not None else f"{field}: {reason}")


@dataclass(frozen=True)
class Cron:
    """A parsed schedule expression: ``expr`` the normalised 5-field cron that is
    evaluated, ``source`` what the user wrote (without surrounding white space)."""

    expr: str
    source: str


FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

#: the shorthands, as an error lists them
SHORTHANDS = (
    "every Nm",
    "every Nh",
    "N minutes",
    "N hours",
    "hourly",
    "daily",
    "daily at T",
    "every day at T",
    "weekdays at T",
    "weekends at T",
    "weekly DAY at T",
    "DAYs at T",
    "every DAY at T",
    "weekly",
    "monthly",
    "@hourly",
    "@daily",
    "@midnight",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
)
_FIXED = {
    "hourly": "0 * * * *",
    "daily": "0 0 * * *",
    "weekly": "0 0 * * 0",
    "monthly": "0 0 1 * *",
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_WEEKDAY_NAMES = {
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
    "sunday": 0,
    **{name: i for i, name in enumerate(_DAYS)},
}
_TIME_HINT = "write a time as 9am, 9:30am, 09:30 or 21:00"


def _fail(text: str, reason: str, position: int | None, cron_field: str | None = None) -> None:
    where = ""
    if cron_field is not None:
        where = f"{cron_field} field (position {position}): "
    elif position is not None:
        where = f"position {position}: "
    raise ScheduleError(
        "schedule",
        reason,
        position=position,
        cron_field=cron_field,
        message=f"schedule: {_quote(text)}: {where}{reason}",
    )


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_cron(text: str) -> Cron:
    """``text`` (5-field cron or a shorthand) → :class:`Cron`, or
    :class:`ScheduleError` naming the field, the 1-based position and the reason:
    ``schedule: "61 * * * *": minute field (position 1): 61 is out of range 0-59``."""
    if not isinstance(text, str):
        raise ScheduleError("schedule", f"must be a string, got {type(text).__name__}")
    if not text.strip():
        # No text to quote ("schedule: is empty: ..."); position 1, where it would start.
        raise ScheduleError(
            "schedule", "is empty: write a 5-field cron expression or a shorthand", position=1
        )
    first = text.strip()[0]
    if first.isalpha() or first == "@" or _INTERVAL.fullmatch(text.strip()):
        return Cron(_shorthand(text), text.strip())
    return Cron(_cron(text), text.strip())


#: An interval without ``every``: ``15 minutes``, ``2h`` (LemonAutomation's
#: ``"15 minutes"``; docs/schedules.md, "Shorthands").
_INTERVAL = re.compile(r"(?i)\d+\s*(m|min|mins|minutes?|h|hours?)")


def _tokens(text: str) -> list[tuple[str, int]]:
    """Whitespace-separated tokens with their 1-based positions."""
    return [(m.group(), m.start() + 1) for m in re.finditer(r"\S+", text)]


def _cron(text: str) -> str:
    tokens = _tokens(text)
    if len(tokens) != 5:
        # Too many: the sixth field; too few: the end of the text, where the
        # missing field would start.
        position = tokens[5][1] if len(tokens) > 5 else len(text.rstrip()) + 1
        _fail(
            text,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(tokens)}",
            position,
        )
    out: list[str] = []
    values: list[set[int]] = []
    for index, (token, position) in enumerate(tokens):
        normalised, members = _field(text, index, token, position)
        out.append(normalised)
        values.append(members)
    day_and = tokens[2][0].startswith("*") or tokens[4][0].startswith("*")
    days, months = values[2], values[3]
    if day_and and min(days) > max(_DAYS_IN_MONTH[m - 1] for m in months):
        _fail(
            text,
            f"day {min(days)} never occurs in "
            + ("that month" if len(months) == 1 else "those months"),
            tokens[2][1],
            FIELDS[2],
        )
    return " ".join(out)


def _field(text: str, index: int, token: str, position: int) -> tuple[str, set[int]]:
    """Validate one field; its normalised text (names → numbers) and its values."""
    name = FIELDS[index]
    low, high = _RANGES[index]
    parts: list[str] = []
    members: set[int] = set()
    offset = 0
    for item in token.split(","):
        at = position + offset
        offset += len(item) + 1
        if not item:
            _fail(text, "an empty item in a list", at, name)
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            step_at = at + len(base) + 1
            if not step_text.isdigit():
                _fail(
                    text,
                    f"step {step_text!r} is not a number" if step_text else "a step is missing",
                    step_at,
                    name,
                )
            step = int(step_text)
            if step < 1:
                _fail(text, "a step must be at least 1", step_at, name)
        if base == "*":
            start, end = low, high
            norm = "*"
        elif "-" in base:
            left, _, right = base.partition("-")
            start = _value(text, index, left, at)
            end = _value(text, index, right, at + len(left) + 1)
            if end < start:
                _fail(text, f"the range {left}-{right} runs backwards", at, name)
            norm = f"{start}-{end}"
        else:
            start = _value(text, index, base, at)
            end = high if slash else start
            norm = str(start)
        if slash:
            norm += f"/{step}"
        parts.append(norm)
        members.update(range(start, end + 1, step))
    if index == 4:
        members = {d % 7 for d in members}
    return ",".join(parts), members


def _value(text: str, index: int, word: str, at: int) -> int:
    name = FIELDS[index]
    low, high = _RANGES[index]
    if not word:
        _fail(text, "a number is missing", at, name)
    if word.isdigit():
        number = int(word)
        if not low <= number <= high:
            _fail(text, f"{number} is out of range {low}-{high}", at, name)
        return number
    lowered = word.lower()
    if index == 3 and lowered in _MONTHS:
        return _MONTHS.index(lowered) + 1
    if index == 4 and lowered in _DAYS:
        return _DAYS.index(lowered)
    if word.upper() in ("L", "W", "LW", "?") or "#" in word or word.upper().endswith("L"):
        _fail(text, f"{word!r} is not supported (write *, N, N-M, */S, N-M/S or lists)", at, name)
    hint = {3: " (or a month name, jan-dec)", 4: " (or a day name, sun-sat)"}.get(index, "")
    _fail(text, f"{word!r} is not a number{hint}", at, name)
    raise AssertionError  # pragma: no cover


def _shorthand(text: str) -> str:
    words = [(word.lower(), at) for word, at in _tokens(text)]
    head = words[0][0]
    fixed = _FIXED.get(" ".join(w for w, _ in words))
    if fixed is not None:
        return fixed
    if _INTERVAL.fullmatch(text.strip()):
        return _every(text, words)
    if head == "every" and len(words) >= 2:
        day = words[1][0]
        if day in _EVERY and len(words) >= 3:  # every day at T = daily at T
            return _at_time(text, [(_EVERY[day], words[1][1]), *words[2:]])
        if _day_of(day) is not None:  # every friday at T
            return _weekly_at(text, [("weekly", words[0][1]), *words[1:]], "every DAY at T")
        return _every(text, words[1:])
    if _day_of(head) is not None:  # fridays at T, friday at T
        return _weekly_at(text, [("weekly", words[0][1]), *words], "DAYs at T")
    return _at_time(text, words)


#: ``every day at T``, ``every weekday at T``, ``every weekend at T``.
_EVERY = {"day": "daily", "weekday": "weekdays", "weekend": "weekends"}


def _day_of(word: str) -> int | None:
    """A day of the week by its name, singular or plural (``friday``,
    ``fridays``, ``fri``); None otherwise."""
    if word in _WEEKDAY_NAMES:
        return _WEEKDAY_NAMES[word]
    if word.endswith("s") and len(word) > 4:
        return _WEEKDAY_NAMES.get(word[:-1])
    return None


def _every(text: str, words: list[tuple[str, int]]) -> str:
    """``every Nm`` or ``every Nh``: ``words`` are those after ``every``."""
    word, at = "".join(w for w, _ in words), words[0][1]
    match = re.fullmatch(r"(\d+)\s*(m|min|mins|minutes?|h|hours?)", word)
    if match is None:
        _fail(text, f"{word!r} is not an interval: write every Nm or every Nh", at)
    assert match is not None
    number, unit = int(match.group(1)), match.group(2)[0]
    if unit == "m":
        if not 1 <= number <= 59 or 60 % number:
            _fail(
                text,
                f"{number} minutes do not divide an hour evenly (1, 2, 3, 4, 5, 6, 10, "
                "12, 15, 20, 30); for other intervals write a 5-field cron expression",
                at,
            )
        return "* * * * *" if number == 1 else f"*/{number} * * * *"
    if not 1 <= number <= 23 or 24 % number:
        _fail(
            text,
            f"{number} hours do not divide a day evenly (1, 2, 3, 4, 6, 8, 12); "
            "for other intervals write a 5-field cron expression",
            at,
        )
    return "0 * * * *" if number == 1 else f"0 */{number} * * *"


#: The day-of-week field of ``daily at T``, ``weekdays at T`` and ``weekends at T``.
_DAILY = {"daily": "*", "weekdays": "1-5", "weekends": "0,6"}


def _at_time(text: str, words: list[tuple[str, int]]) -> str:
    """``daily at T``, ``weekdays at T``, ``weekends at T`` or ``weekly DAY at
    T``; anything else is not a shorthand."""
    head = words[0][0]
    if head in _DAILY and len(words) >= 2 and words[1][0] == "at":
        hour, minute = _time_of_day(text, words[2:], words[1][1] + 2)
        return f"{minute} {hour} * * {_DAILY[head]}"
    if head == "weekly" and len(words) >= 3 and words[2][0] == "at":
        return _weekly_at(text, words, "weekly DAY at T")
    if head in _DAILY and len(words) >= 2:
        _fail(text, 'expected "at" and a time', words[1][1])
    if head == "weekly" and len(words) >= 3:
        _fail(text, 'expected "at" and a time', words[2][1])
    at = words[0][1]
    _fail(
        text,
        "not a 5-field cron expression nor a known shorthand ("
        + ", ".join(SHORTHANDS)
        + "; T is a time such as 9am, 9:30am, 09:30 or 21:00)",
        at,
    )
    raise AssertionError  # pragma: no cover


def _weekly_at(text: str, words: list[tuple[str, int]], form: str) -> str:
    """``weekly DAY at T`` (``words`` in that form, whatever ``form`` the text
    was written in: ``fridays at T`` comes as ``weekly fridays at T``)."""
    day_word, day_at = words[1]
    day = _day_of(day_word)
    if day is None:
        _fail(text, f"{day_word!r} is not a day of the week (monday..sunday)", day_at)
    assert day is not None
    if len(words) < 3 or words[2][0] != "at":
        at = words[2][1] if len(words) >= 3 else len(text.rstrip()) + 1
        _fail(text, f'expected "at" and a time ({form})', at)
    hour, minute = _time_of_day(text, words[3:], words[2][1] + 2)
    return f"{minute} {hour} * * {day}"


def _time_of_day(text: str, words: list[tuple[str, int]], missing_at: int) -> tuple[int, int]:
    if not words:
        _fail(text, f"a time is missing: {_TIME_HINT}", missing_at)
    joined = "".join(w for w, _ in words)
    at = words[0][1]
    match = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?(am|pm)", joined) or re.fullmatch(
        r"(\d{1,2}):(\d{2})()", joined
    )
    if match is None:
        _fail(text, f"{joined!r} is not a time: {_TIME_HINT}", at)
    assert match is not None
    hour, minute, half = int(match.group(1)), int(match.group(2) or 0), match.group(3)
    if half:
        if not 1 <= hour <= 12:
            _fail(text, f"{joined!r}: the hour of a 12-hour time is 1-12", at)
        hour = hour % 12 + (12 if half == "pm" else 0)
    elif hour > 23:
        _fail(text, f"{joined!r}: the hour is out of range 0-23", at)
    if minute > 59:
        _fail(text, f"{joined!r}: the minute is out of range 0-59", at)
    return hour, minute


#: Names the zone database may hold that are not IANA zones but this
#: machine's settings (``localtime`` links to /etc/localtime on Debian): a
#: schedule read in one would fire at other instants on another worker.
_MACHINE_ZONES = frozenset({"localtime", "posixrules"})


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones()) - _MACHINE_ZONES


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or :class:`ScheduleError` on field
    ``timezone`` with the closest known name."""
    try:
        if not isinstance(name, str) or not name or name != name.strip():
            raise ValueError(name)
        if name in _MACHINE_ZONES:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        names = _zone_names()
        near = None
        if isinstance(name, str):
            lowered = {n.lower(): n for n in names}
            near = lowered.get(name.strip().lower()) or did_you_mean(name, names)
        raise ScheduleError(
            "timezone",
            f"{name!r} is not an IANA time zone"
            + (f" (did you mean {near!r}?)" if near else " (e.g. UTC, Europe/Paris)"),
        ) from None


def _utc(instant: datetime) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"a timezone-aware datetime is needed, got {instant!r}")
    return instant.astimezone(UTC)


def next_slot(cron: Cron, tz: str, after: datetime) -> datetime:
    """The first slot strictly after ``after`` (aware; UTC out). A cron that
    never matches again within 50 years raises ValueError."""
    start = _utc(after)
    local = start.astimezone(zone(tz))
    sim = CronSim(cron.expr, local)
    for _ in range(4):
        try:
            found = next(sim).astimezone(UTC)
        except StopIteration:
            raise ValueError(f"{cron.source!r} has no slot after {start.isoformat()}") from None
        # cronsim evaluates fixed wall times on the naive clock: from inside a
        # repeated hour it can name the first occurrence, which is before `after`.
        if found > start:
            return found
    raise AssertionError(f"no slot after {start} for {cron.expr}")  # pragma: no cover


def slots_between(
    cron: Cron, tz: str, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """The slots in ``(after, until]``, oldest first, at most ``limit``."""
    out: list[datetime] = []
    end = _utc(until)
    current = _utc(after)
    while len(out) < limit:
        try:
            current = next_slot(cron, tz, current)
        except ValueError:
            break
        if current > end:
            break
        out.append(current)
    return out


def period_ms(cron: Cron, tz: str, at: datetime) -> int:
    """The gap in milliseconds between the slot after ``at`` and the one after it."""
    first = next_slot(cron, tz, at)
    second = next_slot(cron, tz, first)
    return _ms(second - first)


def _ms(delta: timedelta) -> int:
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def previous_slot(cron: Cron, tz: str, at: datetime) -> datetime | None:
    """The newest slot at or before ``at`` (within 50 years), else None. Bounded:
    probes back by doubling spans, then walks forward through the last span."""
    end = _utc(at)
    span = timedelta(minutes=1)
    limit = timedelta(days=366 * 50)
    while span <= limit:
        probe = end - span
        try:
            found = next_slot(cron, tz, probe)
        except ValueError:
            return None
        if found <= end:
            while True:
                try:
                    following = next_slot(cron, tz, found)
                except ValueError:
                    return found
                if following > end:
                    return found
                found = following
        span *= 2
    return None


def count_slots(cron: Cron, tz: str, after: datetime, until: datetime) -> int:
    """How many slots lie in ``(after, until]``, exactly, in time bounded by the
    number of local days (not slots): a day with no offset change holds
    ``hours × minutes`` slots when it matches; the first and last day and days
    of an offset change are walked slot by slot (at most ~1500 each)."""
    start, end = _utc(after), _utc(until)
    if end <= start:
        return 0
    zinfo = zone(tz)
    fields = cron.expr.split()
    minutes = _members(fields[0], 0)
    hours = _members(fields[1], 1)
    doms = _members(fields[2], 2)
    months = _members(fields[3], 3)
    dows = {d % 7 for d in _members(fields[4], 4)}
    day_and = fields[2].startswith("*") or fields[4].startswith("*")
    per_day = len(hours) * len(minutes)

    def boundary(day: date) -> datetime:
        return datetime.combine(day, time(), tzinfo=zinfo).astimezone(UTC)

    def walk(lo: datetime, hi: datetime) -> int:
        return len(slots_between(cron, tz, lo, hi, 2000))

    first_day = start.astimezone(zinfo).date()
    last_day = end.astimezone(zinfo).date()
    if last_day <= first_day + timedelta(days=1):
        return walk(start, end)
    total = walk(start, boundary(first_day + timedelta(days=1)) - timedelta(microseconds=1))
    day = first_day + timedelta(days=1)
    lo = boundary(day)
    while day < last_day:
        following = day + timedelta(days=1)
        hi = boundary(following)
        if _ms(hi - lo) != 86_400_000:
            total += walk(lo - timedelta(microseconds=1), hi - timedelta(microseconds=1))
        elif day.month in months:
            dom = day.day in doms
            dow = (day.weekday() + 1) % 7 in dows
            if (dom and dow) if day_and else (dom or dow):
                total += per_day
        day, lo = following, hi
    total += walk(lo - timedelta(microseconds=1), end)
    return total


def _members(token: str, index: int) -> set[int]:
    low, high = _RANGES[index]
    out: set[int] = set()
    for item in token.split(","):
        base, slash, step_text = item.partition("/")
        step = int(step_text) if slash else 1
        if base == "*":
            start, end = low, high
        elif "-" in base:
            left, _, right = base.partition("-")
            start, end = int(left), int(right)
        else:
            start = int(base)
            end = high if slash else start
        out.update(range(start, end + 1, step))
    return out
