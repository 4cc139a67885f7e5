"""Durations as playbooks and scenarios write them: ``90s``, ``15m``, ``2h``,
``7d`` and compounds such as ``1d2h30m`` (largest unit first)."""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["format_offset", "parse_duration"]

_PART = re.compile(r"(\d+)([dhms])")
_WHOLE = re.compile(r"(?:\d+[dhms])+")
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_ORDER = "dhms"


def parse_duration(text: str) -> timedelta:
    """``1d2h30m`` → timedelta. Raises ValueError with a readable reason."""
    raw = text.strip() if isinstance(text, str) else ""
    if not raw or not _WHOLE.fullmatch(raw):
        raise ValueError(
            f"{text!r} is not a duration: write a number and a unit (s, m, h, d), "
            "e.g. 90s, 15m, 2h, 7d or 1d2h30m"
        )
    parts = _PART.findall(raw)
    units = [u for _, u in parts]
    if len(set(units)) != len(units) or units != sorted(units, key=_ORDER.index):
        raise ValueError(f"{text!r}: give each unit once, largest first (like 1d2h30m)")
    return timedelta(seconds=sum(int(n) * _SECONDS[u] for n, u in parts))


def format_offset(delta: timedelta) -> str:
    """The compound text of a non-negative timedelta: 1d2h30m, 0s."""
    seconds = int(delta.total_seconds())
    if seconds == 0:
        return "0s"
    out = []
    for unit in _ORDER:
        size = _SECONDS[unit]
        if seconds >= size:
            out.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(out)
