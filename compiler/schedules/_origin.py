"""Where a wake comes from (docs/schedules.md, "Wake loops"): the chain of
prompt runs that led to it, so that a schedule cannot wake itself, directly or
through others.

A prompt run's tool calls carry its **origin**: the runs that woke it (oldest
first) and then the run itself, each ``<schedule id>/<run id>``. The agents
service's executor sends it as the :data:`ORIGIN_HEADER` of every HTTP call the
run makes; the gateway's wake route puts it on the ``schedule.wake`` record
(``origin``); the worker refuses a wake whose origin names the schedule woken
(:func:`origin_refusal`), and hands the origin of a wake it fires to the prompt
task of its run, whose calls carry it one link longer.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from compiler._errors import LemongraphError

__all__ = [
    "MAX_WAKE_DEPTH",
    "ORIGIN_HEADER",
    "OriginError",
    "origin_link",
    "origin_refusal",
    "parse_origin",
    "show_origin",
]

#: The HTTP header a prompt run's tool calls carry (docs/schedules.md, "Wake loops").
ORIGIN_HEADER = "Lemongraph-Schedule-Origin"
#: The longest chain of runs a wake may come from: a wake from the end of a
#: chain this long (eight prompt runs, each woken by the one before) is refused.
MAX_WAKE_DEPTH = 8
#: One link: a schedule id (docs/schedules.md, "A schedule's fields"), ``/``, a run id.
_LINK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}/[A-Za-z0-9._:@-]{1,200}")


class OriginError(LemongraphError, ValueError):
    """An origin header that is not a chain of ``<schedule id>/<run id>`` links."""

    code = "invalid_origin"


def origin_link(schedule_id: str, run_id: str) -> str:
    """One link of an origin: the run ``run_id`` of the schedule ``schedule_id``."""
    return f"{schedule_id}/{run_id}"


def parse_origin(text: str) -> tuple[str, ...]:
    """The links of an origin header (comma-separated, spaces around them
    ignored); :class:`OriginError` when a link is malformed or there are more
    than :data:`MAX_WAKE_DEPTH` of them."""
    links = tuple(part.strip() for part in text.split(",") if part.strip())
    if len(links) > MAX_WAKE_DEPTH:
        raise OriginError(
            f"{ORIGIN_HEADER}: {len(links)} links, at most {MAX_WAKE_DEPTH} (a wake chain)"
        )
    for link in links:
        if _LINK.fullmatch(link) is None:
            raise OriginError(f"{ORIGIN_HEADER}: {link[:80]!r} is not '<schedule id>/<run id>'")
    return links


def show_origin(origin: Sequence[str]) -> str:
    """An origin as the header carries it."""
    return ", ".join(origin)


def origin_refusal(schedule_id: str, origin: Sequence[str]) -> str | None:
    """Why a wake of ``schedule_id`` coming from ``origin`` is refused, or None:
    the schedule is in its own chain (it woke itself, or a run it woke woke it
    back), or the chain is :data:`MAX_WAKE_DEPTH` runs long already."""
    for link in origin:
        if link.split("/", 1)[0] == schedule_id:
            return (
                f"wake loop: woken from inside its own run {link} (origin: {show_origin(origin)})"
            )
    if len(origin) >= MAX_WAKE_DEPTH:
        most = MAX_WAKE_DEPTH - 1
        return (
            f"wake chain too long: it comes from {len(origin)} runs, each woken by the "
            f"one before (at most {most}; origin: {show_origin(origin)})"
        )
    return None
