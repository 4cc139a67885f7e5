"""Instants as the core writes them: aware UTC datetimes, ISO-8601 with ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

__all__ = ["from_iso", "require_aware", "to_iso"]


def require_aware(now: datetime, what: str = "now") -> datetime:
    """``now`` in UTC; a naive datetime is refused (it names no instant)."""
    if type(now) is datetime and now.tzinfo is UTC:
        return now  # already so (the stream's instants are): no copy
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {now!r}")
    return now.astimezone(UTC)


@lru_cache(maxsize=4096)
def to_iso(instant: datetime) -> str:
    """``2026-01-05T09:00:00Z`` (microseconds only when present). Cached: one
    decision writes the same few instants dozens of times."""
    if instant.tzinfo is not UTC:
        instant = instant.astimezone(UTC)
    return instant.isoformat().replace("+00:00", "Z")


def from_iso(text: str) -> datetime:
    """The inverse of :func:`to_iso`; accepts any ISO-8601 instant with an offset."""
    return require_aware(datetime.fromisoformat(text), "timestamp")
