"""Instants as the core writes them: aware UTC datetimes, ISO-8601 with ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

__all__ = ["from_iso", "require_aware", "to_iso"]


def require_aware(now: datetime, what: str = "now") -> datetime:
    """``now`` in UTC; a naive datetime is refused (it names no instant)."""
    if type(now) is datetime and now.tzinfo is UTC:
        return now  # already so (the stream's instants are): no copy
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {now!r}")
    return now.astimezone(UTC)


#: Two-digit texts of 0-59: an instant's hour, minute and second.
_TWO: Final[tuple[str, ...]] = tuple(f"{i:02d}" for i in range(60))
#: The fraction and ``Z`` of an instant on a whole millisecond (not 0):
#: ``.250000Z``, without formatting the number each time.
_MILLIS: Final[tuple[str, ...]] = tuple(f".{i:03d}000Z" for i in range(1000))
#: How many days' texts :func:`to_iso` keeps (all are forgotten at once when
#: it is full: a value, so forgetting changes nothing but the cost).
DAYS_KEPT: Final = 4096
#: Proleptic ordinal of a day → its text and the ``T``: ``2026-01-05T``.
_DAYS: Final[dict[int, str]] = {}


class _Last:
    """The two instants :func:`to_iso` formatted last, with their texts: one
    tuple, set in one assignment, so that a thread never reads one's instant
    with another's text."""

    def __init__(self) -> None:
        self.pairs: tuple[datetime | None, str, datetime | None, str] = (None, "", None, "")


_LAST: Final = _Last()


def to_iso(instant: datetime) -> str:
    """``2026-01-05T09:00:00Z`` (microseconds only when present): what
    ``isoformat()`` writes for the instant in UTC, with ``Z`` for ``+00:00``.
    One decision writes the same few instants dozens of times, alternating
    between the step's ``now`` and a deadline or a timer's instant: the last two
    are found by identity (a second one took the onboarding mix from 7.9 to 5.0
    formats per event; benchmarks/README.md, "Issue 35"). The rest are
    formatted from their fields with the day's text remembered, about four times
    faster than ``isoformat()`` (which formats the offset through ``utcoffset()``
    every time), and faster than a cache by value, which hashes an aware datetime
    by building two more."""
    pairs = _LAST.pairs
    if pairs[0] is instant:
        return pairs[1]
    if pairs[2] is instant:
        return pairs[3]
    text = _format_iso(instant)
    _LAST.pairs = (instant, text, pairs[0], pairs[1])
    return text


def _format_iso(instant: datetime) -> str:
    if instant.tzinfo is not UTC:
        instant = instant.astimezone(UTC)
    ordinal = instant.toordinal()
    day = _DAYS.get(ordinal)
    if day is None:
        if len(_DAYS) >= DAYS_KEPT:
            _DAYS.clear()
        day = instant.date().isoformat() + "T"
        _DAYS[ordinal] = day
    micro = instant.microsecond
    if not micro:
        tail = "Z"
    elif micro % 1000 == 0:
        tail = _MILLIS[micro // 1000]  # a record's timestamp is in milliseconds
    else:
        tail = f".{micro:06d}Z"
    two = _TWO
    # One f-string of str parts is built in one allocation (mypyc), where each
    # "+" made a new string (benchmarks/README.md, "Issue 35").
    return f"{day}{two[instant.hour]}:{two[instant.minute]}:{two[instant.second]}{tail}"


def from_iso(text: str) -> datetime:
    """The inverse of :func:`to_iso`; accepts any ISO-8601 instant with an offset."""
    return require_aware(datetime.fromisoformat(text), "timestamp")
