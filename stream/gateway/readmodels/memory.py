"""Subjects in the gateway (docs/memory.md, "Reading it"): the read model of the
compacted ``memory`` topic, the erasures on ``memory-facts``, and which jobs are
about which subject; the routes ``/v1/subjects/{id}...`` are in
stream/gateway/routes/subjects.py.

**Profiles** (:class:`SubjectModel`) are followed from the beginning of
``memory`` with a consumer of its own (no group), in the loop of
stream/gateway/readmodels/follow.py (which notices a broker reset). A record is
a subject's whole profile (:class:`topics.SubjectProfile`), so the newest one
read replaces what is held; a tombstone (no value) is an erased subject, and is
forgotten. A profile is held as the bytes read (parsed when a route asks).

**Jobs by subject**: the jobs' read model hands this one every decision it reads
(:meth:`SubjectModel.decided`); an applied ``job.start`` files its job under
its subject's key (:func:`topics.subject_key` of the start's subject and
contacts), the rule the worker files its remembered facts by.

**What it keeps** (docs/operations.md, "The gateway's memory"): profiles within
``profile_bytes`` in all (past it, the least recently used profile goes and is
marked *not held*: a read of it answers 503 ``profile_not_held`` and names the
CLI, which reads the topic); per subject its newest ``jobs_per_subject`` job
keys, and ``subjects_kept`` subjects' job lists (the least recently filed go).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from aiokafka.structs import TopicPartition

from compiler import from_iso
from stream.gateway.readmodels.follow import Followed
from topics import MemoryErase, SubjectProfile, Topics, subject_key

__all__ = ["SubjectModel", "current_facts", "facts_as_of"]

log = logging.getLogger("lemongraph.gateway")

#: Bytes of profiles held in all (as read from the topic).
PROFILE_BYTES = 64 << 20
#: Job keys held per subject (the newest), and subjects whose jobs are held.
JOBS_PER_SUBJECT = 1000
SUBJECTS_KEPT = 100_000
#: Subjects remembered as dropped for ``profile_bytes`` (their reads answer 503).
DROPPED_KEPT = 100_000
#: What only an erasure's record holds (a fact's is skipped unparsed).
_ERASE = b'"memory.erase"'


class SubjectModel(Followed):
    """Profiles by subject, as the ``memory`` topic holds them, and each
    subject's jobs."""

    def __init__(
        self,
        topics: Topics,
        *,
        profile_bytes: int = PROFILE_BYTES,
        jobs_per_subject: int = JOBS_PER_SUBJECT,
        subjects_kept: int = SUBJECTS_KEPT,
    ) -> None:
        super().__init__()
        self.topics = topics
        self.profile_bytes = profile_bytes
        self.jobs_per_subject = jobs_per_subject
        self.subjects_kept = subjects_kept
        #: The newest profile record per subject, least recently used first.
        self.profiles: OrderedDict[str, bytes] = OrderedDict()
        self.held_bytes = 0
        #: Subjects whose profile went for ``profile_bytes`` (not erased).
        self.dropped: OrderedDict[str, None] = OrderedDict()
        #: Per subject key, its jobs' keys in the order started (oldest first).
        self.jobs: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()
        #: Per subject, its newest erasure read on ``memory-facts`` or written
        #: by this gateway: (at, request_id), least recently written first.
        self.erasures: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.erased = 0  # tombstones read
        self.skipped = 0  # records that did not decode

    # -- what the routes ask -------------------------------------------------------

    def profile(self, subject: str) -> SubjectProfile | None:
        """The subject's profile; None when it has none (never remembered, or
        erased). Raises :class:`KeyError` for one held no longer (see the
        module's docstring)."""
        raw = self.profiles.get(subject)
        if raw is None:
            if subject in self.dropped:
                raise KeyError(subject)
            return None
        self.profiles.move_to_end(subject)
        return SubjectProfile.model_validate_json(raw)

    def jobs_of(self, subject: str) -> list[str]:
        """The keys of the subject's jobs, oldest first (the newest kept)."""
        return list(self.jobs.get(subject, ()))

    def erasure(self, subject: str) -> tuple[str, str] | None:
        """The subject's newest erasure, (at, request_id), when nothing was
        remembered of it since (no profile held, or one no newer than the
        erasure): a DELETE now would erase nothing more."""
        earlier = self.erasures.get(subject)
        if earlier is None:
            return None
        raw = self.profiles.get(subject)
        if raw is None:
            return earlier
        updated = SubjectProfile.model_validate_json(raw).updated_at
        if updated is not None and from_iso(updated) > from_iso(earlier[0]):
            return None
        return earlier

    def erasing(self, subject: str, at: str, request_id: str) -> None:
        """An erasure written (by this gateway) or read on ``memory-facts``."""
        self.erasures[subject] = (at, request_id)
        self.erasures.move_to_end(subject)
        while len(self.erasures) > DROPPED_KEPT:
            self.erasures.popitem(last=False)

    # -- reading -------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of ``memory``: a profile (replacing the one held) or a
        tombstone (the subject was erased)."""
        if key is None:
            self.skipped += 1
            return
        subject = key.decode("utf-8", "replace")
        self._forget(subject)
        if value is None:
            self.erased += 1
            return
        try:
            SubjectProfile.model_validate_json(value)
        except ValueError as exc:
            self.skipped += 1
            log.debug("subjects: skipped a record of %s: %s", subject, exc)
            return
        self.profiles[subject] = value
        self.held_bytes += len(value)
        while self.held_bytes > self.profile_bytes and len(self.profiles) > 1:
            gone, raw = self.profiles.popitem(last=False)
            self.held_bytes -= len(raw)
            self.dropped[gone] = None
            while len(self.dropped) > DROPPED_KEPT:
                self.dropped.popitem(last=False)

    def _forget(self, subject: str) -> None:
        raw = self.profiles.pop(subject, None)
        if raw is not None:
            self.held_bytes -= len(raw)
        self.dropped.pop(subject, None)

    def decided(self, record: Mapping[str, Any]) -> None:
        """A decision the jobs' read model read: an applied start files its job
        under its subject's key."""
        given = record.get("input")
        if not isinstance(given, Mapping) or given.get("type") != "job.start":
            return
        if record.get("outcome") != "applied" or not record.get("job_key"):
            return
        subject = given.get("subject")
        contacts = given.get("contacts")
        key = subject_key(
            dict(subject) if isinstance(subject, Mapping) else {},
            list(contacts) if isinstance(contacts, list) else [],
        )
        if key is None:
            return
        held = self.jobs.get(key)
        if held is None:
            held = self.jobs[key] = OrderedDict()
        self.jobs.move_to_end(key)
        held[str(record["job_key"])] = None
        while len(held) > self.jobs_per_subject:
            held.popitem(last=False)
        while len(self.jobs) > self.subjects_kept:
            self.jobs.popitem(last=False)

    # -- following (stream/gateway/readmodels/follow.py) ----------------------------

    def followed(self) -> list[str]:
        return [self.topics.memory, self.topics.memory_facts]

    def take(self, tp: TopicPartition, key: bytes | None, value: bytes | None, offset: int) -> None:
        if tp.topic == self.topics.memory:
            self.apply(key, value)
        elif value is not None and _ERASE in value:  # the facts themselves are not read
            try:
                erase = MemoryErase.model_validate_json(value)
            except ValueError:
                self.skipped += 1
                return
            self.erasing(erase.subject, erase.at, erase.request_id)

    def caught_up_line(self) -> str:
        return f"gateway: subjects caught up ({len(self.profiles)} profiles)"


def current_facts(profile: SubjectProfile) -> list[dict[str, Any]]:
    """The facts in force now: the versions no newer one closed."""
    return [f.model_dump(mode="json") for f in profile.facts if f.valid_to is None]


def facts_as_of(profile: SubjectProfile, instant: datetime) -> list[dict[str, Any]]:
    """The versions in force at ``instant`` (an aware datetime):
    ``valid_from <= instant < valid_to`` (an open ``valid_to`` never ends).
    Compared as instants, not as text: an ISO instant's fraction is written
    only when it has one (compiler ``to_iso``)."""
    return [
        f.model_dump(mode="json")
        for f in profile.facts
        if from_iso(f.valid_from) <= instant
        and (f.valid_to is None or instant < from_iso(f.valid_to))
    ]
