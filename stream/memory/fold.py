"""The memory processor's fold (docs/memory.md, "How it is built"): a subject's
``memory-facts`` records, in order, into its :class:`topics.SubjectProfile`.

Pure: data in, data out, no I/O and no clock; the processor
(stream/memory/processor.py) reads the records and stores what this returns.

* The versions of one fact name are ordered by (``valid_from``, ``event_id``,
  ``job_key``); each one's ``valid_to`` is the next one's ``valid_from`` (None
  for the newest): a newer fact closes the older one instead of replacing it,
  and a fact that arrives late takes its place in that order.
* A fact already kept (the same ``job_key`` and ``event_id``) changes nothing:
  a worker that re-decided a batch after a crash sends it again.
* Bounded (:class:`Bounds`): at most ``versions`` per name, the oldest closed
  ones dropped first, and at most ``names`` per subject, the names whose newest
  version is the oldest dropped first. A name dropped raises the profile's
  *floor* to its newest version: a fact at or before the floor is ignored, so a
  fact sent again after its name was dropped stays out even if the name came
  back since. A version dropped from a kept name is dropped again if sent again
  (everything kept of its name is newer). So redelivery never changes a
  profile.
* An erasure removes the profile, and a fact decided at or before the erasure,
  or at or before the newest fact of the profile it removed, that arrives later
  is ignored (the processor keeps that instant, under a hash of the subject).
* A note (``memory.note``: a job's rolling summary, a model's words) is kept
  beside the facts, never among them: the newest per job (the latest written,
  then the most turns covered), at most ``notes`` jobs per subject, the jobs whose note is oldest
  dropped first (raising the notes' floor, so a dropped note sent again stays
  out). Erased with the subject, like the facts (docs/memory.md, "Summaries
  are claims").
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from topics import SCHEMA

__all__ = [
    "NOTE_FIELDS",
    "Bounds",
    "Profile",
    "as_of",
    "fold_record",
    "instant",
    "note_key",
    "sort_key",
]

#: A version's place among its name's: (valid_from, event_id, job_key).
SortKey = tuple[datetime, str, str]


@dataclass(frozen=True)
class Bounds:
    """How much of a subject the profile keeps (docs/memory.md, "Bounds"):
    ``LEMONGRAPH_MEMORY_VERSIONS`` versions per name and
    ``LEMONGRAPH_MEMORY_NAMES`` names per subject."""

    versions: int = 10
    names: int = 100
    #: Jobs per subject whose conversation's summary is kept
    #: (``LEMONGRAPH_MEMORY_NOTES``).
    notes: int = 20

    def __post_init__(self) -> None:
        if self.versions < 1 or self.names < 1 or self.notes < 1:
            raise ValueError("a profile keeps at least one version of one name")


def instant(text: str) -> datetime:
    """An ISO-8601 instant as the records carry it (``...Z``, microseconds only
    when present): compared as instants, never as text."""
    return datetime.fromisoformat(text)


def sort_key(version: Mapping[str, Any]) -> SortKey:
    """Where a version goes among its name's."""
    return (instant(version["valid_from"]), version["event_id"], version["job_key"])


#: The fields of a note as a profile keeps it (``topics.ProfileNote``), in order.
NOTE_FIELDS = ("kind", "source", "job_key", "note_id", "text", "turn_from", "turn_to", "at")


def note_key(note: Mapping[str, Any]) -> tuple[datetime, int, str]:
    """Which of a job's notes is newest: the latest written, then the most turns
    covered. By instant first, as the ``notes`` bound drops and its floor
    ignores: ordered by turns first, a job's note set aside for one of more
    turns came back once that one was dropped for the bound, later than the
    floor, when the batch was sent again (hypothesis found it)."""
    return (instant(note["at"]), note["turn_to"], note["note_id"])


class Profile:
    """One subject's profile while it is folded: per name, its kept versions
    (``ProfileFact`` fields, as data) in order, with their sort keys."""

    def __init__(self, subject: str, floor: SortKey | None = None) -> None:
        self.subject = subject
        self.names: dict[str, list[dict[str, Any]]] = {}
        self._keys: dict[str, list[SortKey]] = {}
        self.updated_at: str | None = None
        #: The newest version of any name dropped for staler ones: a fact at or
        #: before it is ignored (None: no name was dropped).
        self.floor = floor
        #: Per job key, its newest note (``NOTE_FIELDS``), and the instant of the
        #: newest note dropped for the ``notes`` bound: a note at or before it
        #: is ignored (None: none was dropped).
        self.notes: dict[str, dict[str, Any]] = {}
        self.note_floor: str | None = None

    def add_note(self, note: Mapping[str, Any], bounds: Bounds) -> bool:
        """Fold one ``MemoryNote`` (as data) in; True when the profile or its
        notes' floor changed."""
        kept = {f: note[f] for f in NOTE_FIELDS}
        at = instant(kept["at"])
        if self.note_floor is not None and at <= instant(self.note_floor):
            return False
        job = kept["job_key"]
        earlier = self.notes.get(job)
        if earlier is not None and note_key(kept) <= note_key(earlier):
            return False  # the same summary again, or an older one
        self.notes[job] = kept
        floor = self.note_floor
        while len(self.notes) > bounds.notes:
            oldest = min(self.notes, key=lambda j: (instant(self.notes[j]["at"]), j))
            gone = self.notes.pop(oldest)["at"]
            if self.note_floor is None or instant(self.note_floor) < instant(gone):
                self.note_floor = gone
        if job in self.notes and (self.updated_at is None or instant(self.updated_at) < at):
            self.updated_at = kept["at"]
        return job in self.notes or self.note_floor != floor

    # -- folding ------------------------------------------------------------------

    def add(self, fact: Mapping[str, Any], bounds: Bounds) -> bool:
        """Fold one ``MemoryFact`` (as data) in; True when the profile or its
        floor changed (both are stored)."""
        name = fact["name"]
        version = {
            "name": name,
            "value": fact.get("value"),
            "properties": dict(fact.get("properties") or {}),
            "source": fact["source"],
            "event_id": fact["event_id"],
            "job_key": fact["job_key"],
            "valid_from": fact["at"],
            "valid_to": None,
        }
        key = sort_key(version)
        if self.floor is not None and key <= self.floor:
            return False
        versions = self.names.get(name)
        if versions is None:
            versions = self.names[name] = []
            self._keys[name] = []
        keys = self._keys[name]
        if any(
            v["event_id"] == version["event_id"] and v["job_key"] == version["job_key"]
            for v in versions
        ):
            return False
        at = bisect.bisect(keys, key)
        keys.insert(at, key)
        versions.insert(at, version)
        kept = True
        if len(versions) > bounds.versions:
            # The oldest go first: closed ones, since more than one is kept.
            drop = len(versions) - bounds.versions
            kept = at >= drop
            del versions[:drop], keys[:drop]
        _close(versions)
        floor = self.floor
        if len(self.names) > bounds.names:
            kept = self._drop_names(bounds.names, name) and kept
        if kept:
            newest = self.updated_at
            if newest is None or instant(newest) < key[0]:
                self.updated_at = fact["at"]
        # A new name dropped at once leaves the facts as they were, and raises the floor.
        return kept or self.floor != floor

    def _drop_names(self, limit: int, added: str) -> bool:
        """Keep the ``limit`` names whose newest version is newest; False when
        ``added`` is among those dropped."""
        ranked = sorted(self.names, key=lambda n: (self._keys[n][-1], n), reverse=True)
        for name in ranked[limit:]:
            newest = self._keys[name][-1]
            if self.floor is None or self.floor < newest:
                self.floor = newest
            del self.names[name], self._keys[name]
        return added in self.names

    # -- reading ------------------------------------------------------------------

    def facts(self) -> list[dict[str, Any]]:
        """Every kept version, by name, then in order."""
        return [v for name in sorted(self.names) for v in self.names[name]]

    def __len__(self) -> int:
        return sum(len(v) for v in self.names.values())

    def record(self) -> dict[str, Any]:
        """The ``SubjectProfile`` record (memory topic), as data: ``notes``
        (by job key) only when there are some, so a profile without notes is
        the bytes it always was."""
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "type": "memory.profile",
            "subject": self.subject,
            "facts": self.facts(),
            "updated_at": self.updated_at,
        }
        if self.notes:
            data["notes"] = [self.notes[job] for job in sorted(self.notes)]
        return data

    def encode(self) -> bytes:
        """:meth:`record` as the bytes the topic and the table hold: the same
        profile, the same bytes (fields in a fixed order)."""
        return orjson.dumps(self.record())

    def encode_floor(self) -> bytes | None:
        """The floors as the table keeps them beside the profile (None: none):
        the facts' as ``[at, event_id, job_key]``, with a notes' floor as
        ``{"facts": ..., "notes": at}``."""
        facts = None
        if self.floor is not None:
            at, event_id, job_key = self.floor
            facts = [at.isoformat(), event_id, job_key]
        if self.note_floor is not None:
            return orjson.dumps({"facts": facts, "notes": self.note_floor})
        return orjson.dumps(facts) if facts is not None else None

    @classmethod
    def decode(cls, raw: bytes, floor: bytes | None = None) -> Profile:
        """The inverse of :meth:`encode` (and of :meth:`encode_floor`)."""
        data = orjson.loads(raw)
        floors = orjson.loads(floor) if floor is not None else None
        facts_floor = floors.get("facts") if isinstance(floors, dict) else floors
        below: SortKey | None = None
        if facts_floor is not None:
            at, event_id, job_key = facts_floor
            below = (instant(at), event_id, job_key)
        profile = cls(data["subject"], below)
        if isinstance(floors, dict):
            profile.note_floor = floors.get("notes")
        for version in data["facts"]:
            name = version["name"]
            profile.names.setdefault(name, []).append(version)
            profile._keys.setdefault(name, []).append(sort_key(version))
        profile.notes = {n["job_key"]: n for n in data.get("notes", ())}
        profile.updated_at = data.get("updated_at")
        return profile


def _close(versions: list[dict[str, Any]]) -> None:
    """Each version is valid until the next one's ``valid_from``."""
    for older, newer in itertools.pairwise(versions):
        older["valid_to"] = newer["valid_from"]
    if versions:
        versions[-1]["valid_to"] = None


def as_of(facts: list[Mapping[str, Any]], when: datetime) -> list[Mapping[str, Any]]:
    """The versions of a profile's ``facts`` that held at ``when``: for each
    name, the one with ``valid_from <= when < valid_to`` (docs/memory.md)."""
    return [
        f
        for f in facts
        if instant(f["valid_from"]) <= when
        and (f["valid_to"] is None or when < instant(f["valid_to"]))
    ]


def fold_record(
    profile: Profile | None,
    erased: str | None,
    record: Mapping[str, Any],
    bounds: Bounds,
) -> tuple[Profile | None, str | None, bool]:
    """Fold one ``memory-facts`` record (a ``MemoryFact``, a ``MemoryNote`` or
    a ``MemoryErase``, as data) into a subject's ``profile`` (None: it has none) and the instant
    of its latest erasure (None: never erased). Returns the new profile, the
    new erasure instant and whether the profile changed (a change to write:
    the profile, or a tombstone when it is None)."""
    if record["type"] == "memory.erase":
        # The profile as it stands is gone, whatever its facts' instants; none
        # of them comes back if it is sent again.
        for at in (record["at"], profile.updated_at if profile is not None else None):
            if at is not None and (erased is None or instant(erased) < instant(at)):
                erased = at
        return None, erased, True
    if erased is not None and instant(record["at"]) <= instant(erased):
        return profile, erased, False  # decided before its subject was erased
    fresh = profile if profile is not None else Profile(record["subject"])
    if record["type"] == "memory.note":
        changed = fresh.add_note(record, bounds)
    else:
        changed = fresh.add(record, bounds)
    return fresh, erased, changed
