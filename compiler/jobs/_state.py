"""Job state: everything the decision core remembers about one job.

State is a value. It serialises to canonical JSON (sorted keys, no spaces) and
its hash is the SHA-256 of those bytes, so two runs that agree byte for byte
agree on the hash. Its size is bounded by the playbook, not by the job's
history: per atom a count and a few evidence ids, per milestone one record, and
at most ``MAX_REMEMBERED_KEYS`` idempotency keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson
from topics import JobStatus, MilestoneStatus, TaskOutcome, TimerKind
from topics.build import timer

from compiler._time import from_iso, to_iso
from compiler.conditions._condition import Tally

__all__ = [
    "MAX_REMEMBERED_KEYS",
    "JobState",
    "JobStatus",
    "MilestoneState",
    "MilestoneStatus",
    "Timer",
    "canonical_json",
]

#: How many idempotency keys a job remembers (oldest forgotten first). A retry
#: of an event older than the last this-many keyed events would apply again.
MAX_REMEMBERED_KEYS = 1000

#: The members the core compares with, as module constants: a compiled module
#: reads a constant directly, where ``MilestoneStatus.OPEN`` is two lookups.
PENDING: Final = MilestoneStatus.PENDING
OPEN: Final = MilestoneStatus.OPEN
DONE: Final = MilestoneStatus.DONE
KNOCKED: Final = MilestoneStatus.KNOCKED
DROPPED: Final = MilestoneStatus.DROPPED
UNREACHABLE: Final = MilestoneStatus.UNREACHABLE
RUNNING: Final = JobStatus.RUNNING

#: Statuses a milestone never leaves.
SETTLED: Final[frozenset[MilestoneStatus]] = frozenset({DONE, KNOCKED, DROPPED, UNREACHABLE})
#: Statuses that count as a lost need.
LOST: Final[frozenset[MilestoneStatus]] = frozenset({KNOCKED, DROPPED, UNREACHABLE})

#: Wire string → member, for reading state back (a dict lookup, not an enum call).
_MILESTONE_STATUS: Final = {m.value: m for m in MilestoneStatus}
_JOB_STATUS: Final = {m.value: m for m in JobStatus}
_OUTCOME: Final = {m.value: m for m in TaskOutcome}


#: An empty SHA-256 hasher that each state's hash starts from (a copy).
_SHA256: Final = hashlib.sha256()


def canonical_json(data: Any) -> bytes:
    """Sorted keys, no whitespace: the bytes that hashes and comparisons use."""
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


def _opt_iso(instant: datetime | None) -> str | None:
    return to_iso(instant) if instant is not None else None


def _opt_dt(text: str | None) -> datetime | None:
    return from_iso(text) if text is not None else None


@dataclass(frozen=True, slots=True)
class Timer:
    """A durable timer: ``settle`` closes a milestone's window, ``due`` emits its task."""

    at: datetime
    kind: TimerKind
    milestone: str

    def __init__(self, at: datetime, kind: TimerKind, milestone: str) -> None:
        # Written out (see compiler/__init__.py, "Compiled"), as in the other
        # value classes a decision makes many of.
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "milestone", milestone)

    @property
    def order(self) -> tuple[datetime, int, str]:
        """Time order; at one instant settlements before due tasks."""
        return (self.at, 0 if self.kind == "settle" else 1, self.milestone)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return timer(to_iso(self.at), self.kind, self.milestone)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Timer:
        """The inverse of :meth:`to_json`."""
        return cls(from_iso(data["at"]), data["kind"], data["milestone"])


class _Keep:
    """The "leave as it is" default of :meth:`MilestoneState.with_` (None is a value)."""


_KEEP = _Keep()


@dataclass(frozen=True, slots=True)
class MilestoneState:
    """Where one milestone stands."""

    status: MilestoneStatus = MilestoneStatus.PENDING
    opened_at: datetime | None = None
    deadline: datetime | None = None  # the window closes here
    task_at: datetime | None = None  # task.opened is (or was) emitted here
    task_open: bool = False
    settled_at: datetime | None = None
    outcome: TaskOutcome | None = None  # how it settled (none: unreachable)
    #: The verdict explanation when it settled (or last evaluated while open).
    explanation: Mapping[str, Any] | None = None

    def __init__(
        self,
        status: MilestoneStatus = PENDING,
        opened_at: datetime | None = None,
        deadline: datetime | None = None,
        task_at: datetime | None = None,
        task_open: bool = False,
        settled_at: datetime | None = None,
        outcome: TaskOutcome | None = None,
        explanation: Mapping[str, Any] | None = None,
    ) -> None:
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "opened_at", opened_at)
        object.__setattr__(self, "deadline", deadline)
        object.__setattr__(self, "task_at", task_at)
        object.__setattr__(self, "task_open", task_open)
        object.__setattr__(self, "settled_at", settled_at)
        object.__setattr__(self, "outcome", outcome)
        object.__setattr__(self, "explanation", explanation)

    def with_(
        self,
        *,
        status: MilestoneStatus | None = None,
        opened_at: datetime | _Keep | None = _KEEP,
        deadline: datetime | _Keep | None = _KEEP,
        task_at: datetime | _Keep | None = _KEEP,
        task_open: bool | None = None,
        settled_at: datetime | _Keep | None = _KEEP,
        outcome: TaskOutcome | _Keep | None = _KEEP,
        explanation: Mapping[str, Any] | _Keep | None = _KEEP,
    ) -> MilestoneState:
        """A copy with the given fields changed (``dataclasses.replace`` without
        its generic overhead: the decision core makes several per decision)."""
        return MilestoneState(
            self.status if status is None else status,
            self.opened_at if isinstance(opened_at, _Keep) else opened_at,
            self.deadline if isinstance(deadline, _Keep) else deadline,
            self.task_at if isinstance(task_at, _Keep) else task_at,
            self.task_open if task_open is None else task_open,
            self.settled_at if isinstance(settled_at, _Keep) else settled_at,
            self.outcome if isinstance(outcome, _Keep) else outcome,
            self.explanation if isinstance(explanation, _Keep) else explanation,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready; absent values are left out."""
        return self.json_from(None, None)

    def json_from(
        self, base: MilestoneState | None, prev: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """:meth:`to_json`, with the text of every instant this state shares with
        ``base`` (the same object) taken from ``prev``, ``base``'s JSON: a
        milestone changes a field or two at a time, and formatting an instant
        costs more than the rest of its JSON."""
        old, texts = (base, prev) if base is not None and prev is not None else (_BLANK, {})
        out: dict[str, Any] = {"status": self.status}
        opened, deadline, task_at, ended = (
            self.opened_at,
            self.deadline,
            self.task_at,
            self.settled_at,
        )
        if opened is not None:
            out["opened_at"] = texts["opened_at"] if opened is old.opened_at else to_iso(opened)
        if deadline is not None:
            out["deadline"] = texts["deadline"] if deadline is old.deadline else to_iso(deadline)
        if task_at is not None:
            out["task_at"] = texts["task_at"] if task_at is old.task_at else to_iso(task_at)
        if ended is not None:
            out["settled_at"] = texts["settled_at"] if ended is old.settled_at else to_iso(ended)
        if self.task_open:
            out["task_open"] = True
        if self.outcome is not None:
            out["outcome"] = self.outcome
        if self.explanation is not None:
            out["explanation"] = self.explanation
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MilestoneState:
        """The inverse of :meth:`to_json`."""
        return cls(
            status=_MILESTONE_STATUS[data["status"]],
            opened_at=_opt_dt(data.get("opened_at")),
            deadline=_opt_dt(data.get("deadline")),
            task_at=_opt_dt(data.get("task_at")),
            task_open=bool(data.get("task_open", False)),
            settled_at=_opt_dt(data.get("settled_at")),
            outcome=_OUTCOME[data["outcome"]] if data.get("outcome") is not None else None,
            explanation=data.get("explanation"),
        )


#: A milestone with no instants: what a milestone without a base is compared with.
_BLANK = MilestoneState()


@dataclass(frozen=True)
class JobState:
    """One job. Build it through ``JobGraph.next`` with a ``Start`` input."""

    key: str
    playbook_key: str
    playbook_version: int
    started_at: datetime
    status: JobStatus = JobStatus.RUNNING
    seq: int = 0  # decisions applied so far
    updated_at: datetime | None = None
    ended_at: datetime | None = None
    events: int = 0  # events recorded, of every source
    subject: Mapping[str, Any] = field(default_factory=dict)
    contacts: tuple[Any, ...] = ()
    milestones: Mapping[str, MilestoneState] = field(default_factory=dict)
    #: One tally per distinct atom of the playbook, keyed by the atom's canonical text.
    tallies: Mapping[str, Tally] = field(default_factory=dict)
    timers: tuple[Timer, ...] = ()  # sorted by Timer.order
    recent_keys: tuple[str, ...] = ()  # idempotency keys, oldest first
    #: The JSON form and canonical bytes, computed once: a state is a value and
    #: never changes.
    _json: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    _bytes: bytes | None = field(default=None, init=False, repr=False, compare=False)
    _hash: str | None = field(default=None, init=False, repr=False, compare=False)
    #: The state this one was derived from, until this one's JSON is built: the
    #: parts it shares with it (the same objects) share their JSON too.
    _base: JobState | None = field(default=None, init=False, repr=False, compare=False)

    def __init__(
        self,
        key: str,
        playbook_key: str,
        playbook_version: int,
        started_at: datetime,
        status: JobStatus = RUNNING,
        seq: int = 0,
        updated_at: datetime | None = None,
        ended_at: datetime | None = None,
        events: int = 0,
        subject: Mapping[str, Any] | None = None,
        contacts: tuple[Any, ...] = (),
        milestones: Mapping[str, MilestoneState] | None = None,
        tallies: Mapping[str, Tally] | None = None,
        timers: tuple[Timer, ...] = (),
        recent_keys: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "playbook_key", playbook_key)
        object.__setattr__(self, "playbook_version", playbook_version)
        object.__setattr__(self, "started_at", started_at)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "updated_at", updated_at)
        object.__setattr__(self, "ended_at", ended_at)
        object.__setattr__(self, "events", events)
        object.__setattr__(self, "subject", {} if subject is None else subject)
        object.__setattr__(self, "contacts", contacts)
        object.__setattr__(self, "milestones", {} if milestones is None else milestones)
        object.__setattr__(self, "tallies", {} if tallies is None else tallies)
        object.__setattr__(self, "timers", timers)
        object.__setattr__(self, "recent_keys", recent_keys)
        # The caches start empty.
        object.__setattr__(self, "_json", None)
        object.__setattr__(self, "_bytes", None)
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_base", None)

    def to_json(self) -> dict[str, Any]:
        """Canonical JSON-ready data (built afresh: nothing shared)."""
        return self._json_from(None)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobState:
        """The inverse of :meth:`to_json`."""
        return cls(
            key=data["key"],
            playbook_key=data["playbook_key"],
            playbook_version=int(data["playbook_version"]),
            started_at=from_iso(data["started_at"]),
            status=_JOB_STATUS[data["status"]],
            seq=int(data["seq"]),
            updated_at=_opt_dt(data.get("updated_at")),
            ended_at=_opt_dt(data.get("ended_at")),
            events=int(data.get("events", 0)),
            subject=dict(data.get("subject") or {}),
            contacts=tuple(data.get("contacts") or ()),
            milestones={k: MilestoneState.from_json(v) for k, v in data["milestones"].items()},
            tallies={k: Tally.from_json(v) for k, v in data.get("tallies", {}).items()},
            timers=tuple(Timer.from_json(t) for t in data.get("timers", ())),
            recent_keys=tuple(data.get("recent_keys", ())),
        )

    def derived_from(self, base: JobState) -> JobState:
        """Note that this state was made from ``base`` (which it shares unchanged
        milestones, tallies and keys with), so that :meth:`json` reuses their
        JSON. Returns this state. (Only a base whose JSON exists is kept, so no
        chain of earlier states is ever held.)"""
        if base._json is not None:
            object.__setattr__(self, "_base", base)
        return self

    def json(self) -> Mapping[str, Any]:
        """:meth:`to_json`, computed once per state and shared: read, never modify."""
        if self._json is None:
            data = self._json_from(self._base)
            object.__setattr__(self, "_json", data)
            object.__setattr__(self, "_base", None)
        assert self._json is not None
        return self._json

    def _json_from(self, base: JobState | None) -> dict[str, Any]:
        """The JSON form. Every part this state shares with ``base`` (the same
        object) reuses ``base``'s JSON, when ``base`` has it; the rest is built.
        (Written out field by field, without closures or lookups by name: this
        runs once per decision.)"""
        prev = base._json if base is not None else None
        if base is None or prev is None:
            return {
                "key": self.key,
                "playbook_key": self.playbook_key,
                "playbook_version": self.playbook_version,
                "started_at": to_iso(self.started_at),
                "status": self.status,
                "seq": self.seq,
                "updated_at": _opt_iso(self.updated_at),
                "ended_at": _opt_iso(self.ended_at),
                "events": self.events,
                "subject": dict(self.subject),
                "contacts": list(self.contacts),
                "milestones": {k: v.json_from(None, None) for k, v in self.milestones.items()},
                "tallies": {k: v.to_json() for k, v in self.tallies.items()},
                "timers": [t.to_json() for t in self.timers],
                "recent_keys": list(self.recent_keys),
            }
        old_milestones = base.milestones
        prev_milestones: Mapping[str, Any] = prev["milestones"]
        milestones: dict[str, Any] = {}
        for k, v in self.milestones.items():
            old = old_milestones.get(k)
            if old is v:
                milestones[k] = prev_milestones[k]
            else:
                milestones[k] = v.json_from(old, prev_milestones.get(k))
        old_tallies = base.tallies
        prev_tallies: Mapping[str, Any] = prev["tallies"]
        tallies: dict[str, Any] = {}
        for k, t in self.tallies.items():
            tallies[k] = prev_tallies[k] if old_tallies.get(k) is t else t.to_json()
        # A timer is a value too: the same object has the same JSON.
        old_timers: dict[int, Any] = {
            id(t): data for t, data in zip(base.timers, prev["timers"], strict=True)
        }
        timers: list[Any] = []
        for entry in self.timers:
            data = old_timers.get(id(entry))
            timers.append(data if data is not None else entry.to_json())
        return {
            "key": self.key,
            "playbook_key": self.playbook_key,
            "playbook_version": self.playbook_version,
            "started_at": prev["started_at"]
            if self.started_at is base.started_at
            else to_iso(self.started_at),
            "status": self.status,
            "seq": self.seq,
            "updated_at": _opt_iso(self.updated_at),
            "ended_at": _opt_iso(self.ended_at),
            "events": self.events,
            "subject": prev["subject"] if self.subject is base.subject else dict(self.subject),
            "contacts": prev["contacts"] if self.contacts is base.contacts else list(self.contacts),
            "milestones": milestones,
            "tallies": tallies,
            "timers": timers,
            "recent_keys": prev["recent_keys"]
            if self.recent_keys is base.recent_keys
            else list(self.recent_keys),
        }

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes (computed once per state)."""
        if self._bytes is None:
            object.__setattr__(self, "_bytes", canonical_json(self.json()))
        assert self._bytes is not None
        return self._bytes

    @classmethod
    def from_bytes(cls, raw: bytes) -> JobState:
        """The inverse of :meth:`to_bytes`."""
        data = orjson.loads(raw)
        state = cls.from_json(data)
        # Bytes this code wrote are canonical already; anything else is re-encoded.
        if canonical_json(data) == raw:
            object.__setattr__(state, "_json", data)
            object.__setattr__(state, "_bytes", bytes(raw))
        return state

    @property
    def hash(self) -> str:
        """SHA-256 of the canonical JSON, hex (computed once per state)."""
        if self._hash is None:
            # A copy of an empty hasher: hashlib.sha256() looks the digest up in
            # OpenSSL by name each time, a quarter of hashing a state's 1.7 KB
            # (benchmarks/README.md, issue 35, third pass).
            digest = _SHA256.copy()
            digest.update(self.to_bytes())
            object.__setattr__(self, "_hash", digest.hexdigest())
        assert self._hash is not None
        return self._hash
