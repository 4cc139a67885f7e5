"""The agents service's read model of the compacted ``memory`` topic
(docs/memory.md, "Given to agents"): each subject's current facts, what a run's
compose and a flow's ``memory`` channel are given.

:meth:`Profiles.follow` reads ``memory`` from its beginning with a consumer of
its own (no group: every process of the service holds every subject, since a
job's subject can be any) and keeps following. A record is a subject's whole
profile, so the newest read replaces what is held; a tombstone (an erased
subject) drops it. A run waits for the first catch-up (:meth:`Profiles.ready`,
bounded by ``wait``), and each run for the read to reach the topic's end as it
is when the run asks (at most :data:`LATEST_WAIT` s), so that a job started just
after its subject's profile was written is given it.

**What it keeps**: per subject its current facts only (``valid_to`` None), the
newest ``facts_per_subject`` of them, and its notes (each job's rolling summary,
``agent``: :meth:`Profiles.summary`, never among the facts); at most ``subjects_kept`` subjects, the
least recently used going first (a subject dropped so is not given to its next
run: the log line says so, and the bound is a setting).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from compiler import from_iso
from pydantic import ValidationError
from stream.runtime.kafka import (
    KafkaSecurity,
    caught_up,
    new_consumer,
    partitions_of,
    start_consumer,
)
from topics import (
    GROUNDED_SOURCES,
    ProfileFact,
    ProfileNote,
    SubjectProfile,
    Topics,
    subject_key,
)

from agents.memory.recall import MEMORY_TOKENS

__all__ = ["FACTS_PER_SUBJECT", "FLOW_FACTS", "SUBJECTS_KEPT", "Profiles", "fact_dicts"]

log = logging.getLogger(__name__)

#: The facts a flow's ``memory`` channel holds at most (the newest): the
#: channel is kept in the conversation's checkpoint (docs/flows.md, "Crash safety").
FLOW_FACTS = 50
#: The most a run waits for the follower to read ``memory`` to its end as it is
#: when the run asks (after the first catch-up).
LATEST_WAIT = 3.0
#: Current facts held per subject (the newest), subjects held, and the bytes
#: of all held (the facts as compact JSON: 10,000 facts of a subject are about 2 MB
#: so, and about 15 MB as objects, which is why they are parsed when a run asks).
FACTS_PER_SUBJECT = 10_000
SUBJECTS_KEPT = 100_000
MEMORY_BYTES = 128 << 20
#: Subjects whose facts are also held parsed (the most recently asked for): a
#: run's every turn asks again, and 10,000 facts take a quarter of a second to parse.
PARSED_KEPT = 4


class Profiles:
    """Current facts by subject key."""

    def __init__(
        self,
        topics: Topics,
        *,
        tokens: int = MEMORY_TOKENS,
        facts_per_subject: int = FACTS_PER_SUBJECT,
        subjects_kept: int = SUBJECTS_KEPT,
        memory_bytes: int = MEMORY_BYTES,
        wait: float = 10.0,
    ) -> None:
        self.topics = topics
        #: The budget of the section a run is given (``LEMONGRAPH_MEMORY_TOKENS``).
        self.tokens = tokens
        self.facts_per_subject = facts_per_subject
        self.subjects_kept = subjects_kept
        self.memory_bytes = memory_bytes
        #: Seconds a run waits for the first catch-up before it goes on without.
        self.wait = wait
        #: Per subject its current facts as compact JSON, least recently used first.
        self.held: OrderedDict[str, bytes] = OrderedDict()
        #: Per subject held, its notes as compact JSON (when it has some).
        self.notes: dict[str, bytes] = {}
        self.held_bytes = 0
        self._parsed: OrderedDict[str, tuple[ProfileFact, ...]] = OrderedDict()
        self.caught_up = asyncio.Event()
        #: Set when :meth:`follow` runs or is to run (the app sets it when it
        #: starts the service: agents/app.py); a run waits for the catch-up only then.
        self.followed = False
        #: The follower's consumer and partitions, while it follows (:meth:`latest`).
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[TopicPartition] = []
        self.dropped = 0  # subjects dropped for ``subjects_kept``
        self.skipped = 0  # records that did not decode

    @classmethod
    def from_env(cls, topics: Topics, env: Mapping[str, str]) -> Profiles:
        """With ``LEMONGRAPH_MEMORY_TOKENS``, ``LEMONGRAPH_MEMORY_SUBJECTS`` and
        ``LEMONGRAPH_MEMORY_BYTES`` (docs/memory.md, "Given to agents"); a value
        that is not a count of 1 or more raises :class:`ValueError`."""
        return cls(
            topics,
            tokens=_count(env, "LEMONGRAPH_MEMORY_TOKENS", MEMORY_TOKENS),
            subjects_kept=_count(env, "LEMONGRAPH_MEMORY_SUBJECTS", SUBJECTS_KEPT),
            memory_bytes=_count(env, "LEMONGRAPH_MEMORY_BYTES", MEMORY_BYTES),
        )

    def facts(self, subject: str) -> tuple[ProfileFact, ...]:
        """The subject's current facts (none: never remembered, or erased)."""
        found = self.held.get(subject)
        if found is None:
            return ()
        self.held.move_to_end(subject)
        parsed = self._parsed.get(subject)
        if parsed is None:
            # Validated when read from the topic: constructed again as they were.
            parsed = tuple(ProfileFact.model_construct(**f) for f in orjson.loads(found))
            self._parsed[subject] = parsed
            while len(self._parsed) > PARSED_KEPT:
                self._parsed.popitem(last=False)
        self._parsed.move_to_end(subject)
        return parsed

    def summary(self, subject: str, job_key: str) -> ProfileNote | None:
        """The newest summary of ``job_key``'s conversation kept for ``subject``
        (None: none, or erased): a model's words, for that job's agent only
        (docs/memory.md, "Summaries are claims")."""
        raw = self.notes.get(subject)
        if raw is None:
            return None
        found = [n for n in orjson.loads(raw) if n.get("job_key") == job_key]
        return ProfileNote.model_validate(found[0]) if found else None

    def of_job(
        self, subject: Mapping[str, Any], contacts: Sequence[Any]
    ) -> tuple[str, tuple[ProfileFact, ...]] | None:
        """A job's subject key and its current facts; None when the job names
        no subject (topics ``subject_key``)."""
        key = subject_key(dict(subject), list(contacts))
        return None if key is None else (key, self.facts(key))

    async def channel(
        self, subject: Mapping[str, Any], contacts: Sequence[Any]
    ) -> list[dict[str, Any]]:
        """A flow's built-in ``memory`` channel for a job (docs/flows.md,
        "Channels"): its subject's newest :data:`FLOW_FACTS` current facts,
        newest first, once caught up (bounded)."""
        if self.of_job(subject, contacts) is None:
            return []  # no subject: nothing to wait for
        await self.ready()
        found = self.of_job(subject, contacts)
        if found is None:
            return []
        newest = sorted(found[1], key=lambda f: from_iso(f.valid_from), reverse=True)
        return fact_dicts(newest[:FLOW_FACTS])

    async def ready(self) -> None:
        """Wait for the first catch-up, at most :attr:`wait` seconds (not at all
        when nothing follows the topic: a service made without its app); then
        for the read to reach the topic's end as it is now (:meth:`latest`)."""
        if not self.followed:
            return
        if not self.caught_up.is_set():
            try:
                await asyncio.wait_for(self.caught_up.wait(), self.wait)
            except TimeoutError:
                log.warning("agents: memory not read to its end within %gs: a run goes on",
                            self.wait)  # fmt: skip
                return
        await self.latest()

    async def latest(self) -> None:
        """Wait until the follower has read ``memory`` up to its end as it is now,
        at most :data:`LATEST_WAIT` seconds: a profile written before a run asks
        (the gateway already shows it) is given to that run, not to the next one
        (docs/memory.md, "Given to agents"). One ListOffsets request."""
        consumer, tps = self._consumer, self._tps
        if consumer is None or not tps:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LATEST_WAIT
        try:
            ends = await asyncio.wait_for(consumer.end_offsets(tps), LATEST_WAIT)
            while loop.time() < deadline:
                read = [await consumer.position(tp) for tp in tps]
                if all(at >= ends[tp] for at, tp in zip(read, tps, strict=True)):
                    return
                await asyncio.sleep(0.02)
        except Exception as exc:  # a broker slow to answer: the run goes on
            log.warning("agents: memory: where its end is was not known: %s", exc)
            return
        log.warning("agents: memory not read to its end within %gs: a run goes on", LATEST_WAIT)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of ``memory``: a profile, or a tombstone (erased)."""
        if key is None:
            self.skipped += 1
            return
        subject = key.decode("utf-8", "replace")
        self._parsed.pop(subject, None)
        earlier = self.held.pop(subject, None)
        if earlier is not None:
            self.held_bytes -= len(earlier)
        self.held_bytes -= len(self.notes.pop(subject, b""))
        if value is None:
            return
        try:
            profile = SubjectProfile.model_validate_json(value)
        except (ValidationError, ValueError):
            self.skipped += 1
            return
        current = [f for f in profile.facts if f.valid_to is None and f.source in GROUNDED_SOURCES]
        kept = current[-self.facts_per_subject :]
        if not kept and not profile.notes:
            return
        raw = orjson.dumps([f.model_dump(mode="json") for f in kept])
        self.held[subject] = raw
        self.held_bytes += len(raw)
        if profile.notes:
            notes = orjson.dumps([n.model_dump(mode="json") for n in profile.notes])
            self.notes[subject] = notes
            self.held_bytes += len(notes)
        while len(self.held) > 1 and (
            len(self.held) > self.subjects_kept or self.held_bytes > self.memory_bytes
        ):
            gone, dropped = self.held.popitem(last=False)
            self._parsed.pop(gone, None)
            self.held_bytes -= len(dropped) + len(self.notes.pop(gone, b""))
            self.dropped += 1
            log.warning("agents: memory: subject %r dropped (LEMONGRAPH_MEMORY_SUBJECTS, "
                        "LEMONGRAPH_MEMORY_BYTES)", gone)  # fmt: skip

    async def follow(
        self,
        bootstrap: str,
        security: KafkaSecurity | None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        """Read ``memory`` from its beginning and keep following."""
        self.followed = True
        consumer = new_consumer(bootstrap, security, offsets="earliest")
        await start_consumer(consumer)
        try:
            partitions: list[int] = []
            while not partitions:
                partitions = await partitions_of(consumer, self.topics.memory)
                if not partitions:
                    # No memory topic yet: nothing is remembered, so a run need
                    # not wait for it (docs/memory.md, "Given to agents").
                    self.caught_up.set()
                    await asyncio.sleep(0.5)
            tps = [TopicPartition(self.topics.memory, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            self._consumer, self._tps = consumer, tps
            while not stopping():
                batches = await consumer.getmany(timeout_ms=200, max_records=2000)
                for records in batches.values():
                    for r in records:
                        self.apply(r.key, r.value)
                if not self.caught_up.is_set() and await caught_up(consumer, tps):
                    self.caught_up.set()
        finally:
            self._consumer, self._tps = None, []
            await consumer.stop()


def fact_dicts(facts: Sequence[ProfileFact]) -> list[dict[str, Any]]:
    """Facts as a flow's ``memory`` channel holds them (docs/flows.md, "Channels")."""
    return [
        {
            "name": f.name, "value": f.value, "properties": dict(f.properties),
            "source": f.source, "event_id": f.event_id, "job_key": f.job_key,
            "since": f.valid_from,
        }
        for f in facts
    ]  # fmt: skip


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip() or str(default)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r} must be 1 or more")
    return int(text)
