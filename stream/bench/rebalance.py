"""What a scale-out run's records say (``stream/bench/scaleout.py``): nothing lost,
nothing decided two ways, the re-deliveries, each rebalance's pause and the
event→decision latency. Pure: the records as read back and the instants of the
kills and restarts in, figures out; no broker, no clock.

"Decided twice" is read as docs/kafka.md ("Duplicates") defines a decision: a
record re-decided after a crash comes out byte for byte the same under the same
identity (the job and the ``origin`` it was decided from), so a second *equal*
copy is a re-delivery (a figure of its own, not a failure) and a second
*different* decision for one inbox record is a failure. Tasks alike, by
(``task_id``, ``type``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = [
    "Copies",
    "Decided",
    "Delivery",
    "Rebalance",
    "RebalancePause",
    "Sent",
    "check_decisions",
    "check_tasks",
    "latencies_ms",
    "pauses",
    "percentile",
]


K = TypeVar("K")


@dataclass(frozen=True)
class Sent:
    """An inbox record as produced: where the broker put it, its job, its
    timestamp, and whether it is to make a decision (a retried idempotency key
    makes none: stream/engine/jobs.py, ``decided``)."""

    partition: int
    offset: int
    key: str
    at_ms: int
    decides: bool = True


@dataclass(frozen=True)
class Decided:
    """A decision record read back from ``decisions``: the inbox record it
    decided (``origin``'s partition and offset; ``forwarded``, where the worker's
    copy was read, when it was forwarded), its broker timestamp and its bytes."""

    job_key: str
    partition: int
    offset: int
    at_ms: int
    value: bytes
    forwarded: tuple[int, int] | None = None


@dataclass(frozen=True)
class Copies:
    """Records read back under one identity: how many, how many distinct."""

    records: int = 0
    #: Identities with two or more different records (a failure).
    differing: list[str] = field(default_factory=list)
    #: Copies beyond the first of identities whose copies are all equal.
    redelivered: int = 0
    #: Distinct identities.
    distinct: int = 0


@dataclass(frozen=True)
class Delivery:
    """Every inbox record against the decisions read back."""

    #: Records that were to make a decision and have none ("p<partition>@<offset> <key>").
    lost: list[str]
    copies: Copies
    #: Decisions of the inbox records sent (first copies), for the latency.
    first_ms: dict[tuple[int, int], int]


def _copies(groups: Mapping[K, list[bytes]], name: Callable[[K], str]) -> Copies:
    """The copies of each identity in ``groups`` (``name``: how a failure names it)."""
    differing = [name(k) for k, values in groups.items() if len(set(values)) > 1]
    redelivered = sum(len(v) - 1 for v in groups.values() if len(set(v)) == 1)
    records = sum(len(v) for v in groups.values())
    return Copies(records, sorted(differing), redelivered, len(groups))


def check_decisions(sent: Sequence[Sent], decided: Iterable[Decided]) -> Delivery:
    """Which sent records have no decision, and which have two different ones.

    A decision is matched to the inbox record by its ``origin`` (where the
    producer put it); its identity is that with the job key and the
    ``forwarded`` part (``DecisionRecord.identity``). Decisions of records not
    sent here (another origin) are not counted."""
    keys = {(s.partition, s.offset): s.key for s in sent}
    groups: dict[tuple[str, int, int, tuple[int, int] | None], list[bytes]] = {}
    first: dict[tuple[int, int], int] = {}
    for d in decided:
        where = (d.partition, d.offset)
        if keys.get(where) != d.job_key:
            continue
        groups.setdefault((d.job_key, d.partition, d.offset, d.forwarded), []).append(d.value)
        first[where] = min(first.get(where, d.at_ms), d.at_ms)
    # Two identities for one origin (forwarded twice, both decided) would be two
    # decisions of one inbox record: compared as one group.
    by_origin: dict[tuple[str, int, int], list[bytes]] = {}
    for (key, partition, offset, _fwd), values in groups.items():
        by_origin.setdefault((key, partition, offset), []).extend(values)
    copies = _copies(by_origin, _origin_name)
    lost = [
        f"p{s.partition}@{s.offset} {s.key}"
        for s in sent
        if s.decides and (s.partition, s.offset) not in first
    ]
    return Delivery(lost, copies, first)


def _origin_name(origin: tuple[str, int, int]) -> str:
    return f"p{origin[1]}@{origin[2]} {origin[0]}"


def _task_name(task: tuple[str, str]) -> str:
    return f"{task[1]} {task[0]}"


def check_tasks(tasks: Iterable[tuple[str, str, bytes]]) -> Copies:
    """``(task_id, type, value)`` of the ``task.opened`` and ``task.closed``
    records read back: each (task id, type) once, re-deliveries equal."""
    groups: dict[tuple[str, str], list[bytes]] = {}
    for task_id, kind, value in tasks:
        groups.setdefault((task_id, kind), []).append(value)
    return _copies(groups, _task_name)


def latencies_ms(sent: Sequence[Sent], first_ms: dict[tuple[int, int], int]) -> list[float]:
    """Each decided record's event→decision latency (its timestamp to its first
    decision's broker timestamp), sorted."""
    return sorted(
        float(first_ms[(s.partition, s.offset)] - s.at_ms)
        for s in sent
        if (s.partition, s.offset) in first_ms
    )


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of sorted values, nearest rank below (0.0 when empty)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@dataclass(frozen=True)
class Rebalance:
    """A change of the group's members: a worker killed or started, at ``at_ms``."""

    what: str
    at_ms: int


@dataclass(frozen=True)
class RebalancePause:
    """How long each partition made no decision after a rebalance's instant."""

    what: str
    #: Seconds from the run's start to the instant.
    at_s: float
    #: Partition → its longest stretch without a decision, in seconds, from the
    #: instant (or its last decision before it, whichever is later) to the next
    #: decision, among the stretches that end before the next rebalance.
    by_partition: dict[int, float]
    #: The partitions that paused at least the floor (the ones that moved, or
    #: were stopped while the group re-joined).
    paused: list[int]
    max_s: float
    #: The partitions that made no decision at all until the next rebalance:
    #: their pause lasted at least its ``by_partition`` figure, maybe longer.
    silent: list[int] = field(default_factory=list)


def _longest_gap(stamps: Sequence[int], start: int, end: int) -> float:
    """The longest stretch of ``[start, end)`` without a stamp that ends in a
    stamp (or at ``end`` when no stamp falls in it), in seconds."""
    i = bisect.bisect_left(stamps, start)
    inside = stamps[i : bisect.bisect_left(stamps, end)]
    if not inside:
        return (end - start) / 1000
    longest = inside[0] - start
    for before, after in itertools.pairwise(inside):
        longest = max(longest, after - before)
    return longest / 1000


def _any_in(stamps: Sequence[int], start: int, end: int) -> bool:
    """Whether a stamp falls in ``[start, end)``."""
    i = bisect.bisect_left(stamps, start)
    return i < len(stamps) and stamps[i] < end


def pauses(
    rebalances: Sequence[Rebalance],
    stamps: Mapping[int, Sequence[int]],
    started_ms: int,
    end_ms: int,
    floor_s: float = 1.0,
) -> list[RebalancePause]:
    """Each rebalance's pause per partition, from the decisions' broker
    timestamps by partition (``stamps``, sorted): the longest stretch without a
    decision between its instant and the next rebalance's (``end_ms`` for the
    last). A partition with no decision in that span paused all of it."""
    ordered = sorted(rebalances, key=lambda r: r.at_ms)
    out: list[RebalancePause] = []
    for n, r in enumerate(ordered):
        until = ordered[n + 1].at_ms if n + 1 < len(ordered) else end_ms
        by = {p: _longest_gap(s, r.at_ms, until) for p, s in sorted(stamps.items())}
        paused = [p for p, s in by.items() if s >= floor_s]
        silent = [p for p, s in sorted(stamps.items()) if not _any_in(s, r.at_ms, until)]
        top = max(by.values(), default=0.0)
        at = (r.at_ms - started_ms) / 1000
        out.append(RebalancePause(r.what, at, by, paused, top, silent))
    return out
