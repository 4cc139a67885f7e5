"""The gateway's read model: jobs, decisions and playbooks, fed by their topics
and by the writes this gateway accepted itself (so a client reads its own writes).

:meth:`ReadModel.follow` reads ``jobs``, ``decisions`` and ``playbooks`` from the
beginning with a plain consumer (no group: every partition assigned) and keeps
following. It is *caught up* when every partition's position has reached the
high watermark the fetch responses report (the embedded broker's ListOffsets
answer can be off by up to a batch, so it is not used).

An accepted write stays *pending* until a decision whose origin is its inbox
partition and offset arrives — or any later offset of that partition is decided
(inbox records are decided in order per partition, so an earlier one that made
no decision, e.g. a retried idempotency key, is settled too).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from pydantic import TypeAdapter, ValidationError

from compiler import LemongraphError, Playbook, compile_playbook
from stream.kafka import caught_up, client_kwargs
from topics import JobSnapshot, JournalRecord, MessageRecord, PlaybookRecord, Topics

__all__ = ["AcceptedWrite", "JobEntry", "ReadModel"]

log = logging.getLogger("lemongraph.gateway")

#: Decisions kept per job (the audit trail's newest part; the topic has it all).
DECISIONS_KEPT = 200
#: Journal records (model calls, tool calls, run ends) kept per job.
JOURNAL_KEPT = 200
#: Messages of a job's conversation the gateway keeps (the newest).
MESSAGES_KEPT = 200
_JOURNAL: TypeAdapter[Any] = TypeAdapter(JournalRecord)
#: Events remembered per job, to show the evidence verdicts cite.
EVENTS_KEPT = 1000
#: Idempotency keys this gateway remembers per job.
IDEMPOTENCY_KEPT = 1000


@dataclass(frozen=True, slots=True)
class AcceptedWrite:
    """A record this gateway produced to the inbox."""

    type: str  # job.start | event
    partition: int
    offset: int
    accepted_at: str
    message: dict[str, Any]


@dataclass
class JobEntry:
    """Everything the read model knows about one job."""

    key: str
    snapshot: JobSnapshot | None = None
    start: AcceptedWrite | None = None
    pending: list[AcceptedWrite] = field(default_factory=list)
    refused: str | None = None
    idempotency: OrderedDict[str, AcceptedWrite] = field(default_factory=OrderedDict)
    #: The job's subject and contacts, from its applied start.
    subject: dict[str, Any] = field(default_factory=dict)
    contacts: list[Any] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        """Known to the engine, or started through this gateway and not refused."""
        return self.snapshot is not None or (self.start is not None and self.refused is None)

    @property
    def visible(self) -> bool:
        """Readable: known to the engine, or started through this gateway (even
        when the engine refused the start: the reader learns why)."""
        return self.snapshot is not None or self.start is not None


class ReadModel:
    """Jobs by key, their newest decisions, the playbooks; watchers per job."""

    def __init__(self, topics: Topics, playbooks: dict[str, dict[int, dict[str, Any]]]) -> None:
        self.topics = topics
        self.playbooks = playbooks
        self.jobs: dict[str, JobEntry] = {}
        self.decisions: dict[str, deque[dict[str, Any]]] = {}
        self.journal: dict[str, deque[dict[str, Any]]] = {}
        self.journal_totals: dict[str, int] = {}  # journal records ever read, per job
        self.messages: dict[str, deque[dict[str, Any]]] = {}  # the conversation, per job
        self.message_totals: dict[str, int] = {}
        self.message_ids: dict[str, set[str]] = {}  # of the messages kept, per job
        self.decision_totals: dict[str, int] = {}  # decisions ever read, per job
        self.events: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self.decided: dict[int, int] = {}  # inbox partition → highest offset decided
        # Refused starts by inbox (partition, offset), for a refusal read before
        # the broker's acknowledgement of the start reached the gateway.
        self._refused_starts: OrderedDict[tuple[int, int], str] = OrderedDict()
        self.caught_up = False
        self.following = False
        self.skipped = 0
        #: Set when a followed log went backwards (the broker was reset, or a
        #: topic recreated): what this model holds no longer matches the broker.
        self.reset: str | None = None
        self._next: dict[TopicPartition, int] = {}
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._compiled: dict[tuple[str, int], Playbook | None] = {}

    # -- what the API asks -------------------------------------------------------

    def playbook(self, key: str, version: int | None = None) -> dict[str, Any] | None:
        """A playbook spec: ``version``, or the latest."""
        versions = self.playbooks.get(key)
        if not versions:
            return None
        return versions.get(version if version is not None else max(versions))

    def compiled(self, key: str, version: int | None = None) -> Playbook | None:
        """The playbook compiled by the core, for what only the core should say
        (rank order, depth, goals); None when unknown or, for a record no
        worker would have registered, invalid."""
        spec = self.playbook(key, version)
        if spec is None:
            return None
        pin = (key, int(spec.get("version", 0)))
        if pin not in self._compiled:
            try:
                self._compiled[pin] = compile_playbook(spec)
            except (LemongraphError, ValueError, TypeError):
                self._compiled[pin] = None
        return self._compiled[pin]

    def entry(self, key: str) -> JobEntry | None:
        """The job ``key`` if it exists (see :attr:`JobEntry.exists`)."""
        entry = self.jobs.get(key)
        return entry if entry is not None and entry.exists else None

    # -- accepted writes -----------------------------------------------------------

    def reserve(self, key: str) -> JobEntry:
        """The entry of a job about to be started (the caller checked it is free)."""
        entry = self.jobs.get(key)
        if entry is None:
            entry = self.jobs[key] = JobEntry(key)
        return entry

    def accepted(self, key: str, write: AcceptedWrite) -> None:
        """Record a write the broker acknowledged."""
        entry = self.reserve(key)
        if write.type == "job.start":
            entry.start = write
            entry.refused = self._refused_starts.get((write.partition, write.offset))
        elif write.offset > self.decided.get(write.partition, -1):
            entry.pending.append(write)
        idem = write.message.get("idempotency_key")
        if idem:
            entry.idempotency[idem] = write
            while len(entry.idempotency) > IDEMPOTENCY_KEPT:
                entry.idempotency.popitem(last=False)
        self._changed(key)

    # -- watching --------------------------------------------------------------------

    def watch(self, key: str) -> asyncio.Event:
        """An event set whenever job ``key`` changes."""
        flag = asyncio.Event()
        self._watchers.setdefault(key, set()).add(flag)
        return flag

    def unwatch(self, key: str, flag: asyncio.Event) -> None:
        """Stop watching."""
        flags = self._watchers.get(key)
        if flags is not None:
            flags.discard(flag)
            if not flags:
                del self._watchers[key]

    def wake_all(self) -> None:
        """Wake every watcher (the gateway is stopping)."""
        for flags in self._watchers.values():
            for flag in flags:
                flag.set()

    def _changed(self, key: str) -> None:
        for flag in self._watchers.get(key, ()):
            flag.set()

    # -- applying records -------------------------------------------------------------

    def apply(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """One record of ``jobs``, ``decisions`` or ``playbooks``; a record that
        does not decode is counted and skipped (the worker dead-letters inputs;
        these are its outputs)."""
        if value is None:
            return
        try:
            if topic == self.topics.jobs:
                self._snapshot(JobSnapshot.model_validate_json(value))
            elif topic == self.topics.decisions:
                self._decision(orjson.loads(value))
            elif topic == self.topics.playbooks:
                record = PlaybookRecord.model_validate_json(value)
                self.playbooks.setdefault(record.key, {})[record.version] = record.spec
            elif topic == self.topics.messages:
                self._message(MessageRecord.model_validate_json(value))
            elif topic == self.topics.journal:
                entry = _JOURNAL.validate_json(value)
                kept = self.journal.get(entry.job_key)
                if kept is None:
                    kept = self.journal[entry.job_key] = deque(maxlen=JOURNAL_KEPT)
                kept.append(entry.dump())
                totals = self.journal_totals
                totals[entry.job_key] = totals.get(entry.job_key, 0) + 1
                self._changed(entry.job_key)
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            self.skipped += 1
            log.debug("read model: skipped a record of %s: %s", topic, exc)

    def _message(self, record: MessageRecord) -> None:
        key = record.job_key
        ids = self.message_ids.setdefault(key, set())
        if record.message_id in ids:
            return  # a re-delivery (the same id is the same message)
        kept = self.messages.get(key)
        if kept is None:
            kept = self.messages[key] = deque(maxlen=MESSAGES_KEPT)
        if len(kept) == kept.maxlen:
            ids.discard(kept[0]["message_id"])
        kept.append(record.dump())
        ids.add(record.message_id)
        self.message_totals[key] = self.message_totals.get(key, 0) + 1
        self._changed(key)

    def _snapshot(self, snapshot: JobSnapshot) -> None:
        entry = self.jobs.get(snapshot.key)
        if entry is None:
            entry = self.jobs[snapshot.key] = JobEntry(snapshot.key)
        if entry.snapshot is not None and entry.snapshot.seq > snapshot.seq:
            return
        entry.snapshot = snapshot
        entry.start = None
        entry.refused = None
        self._changed(snapshot.key)

    def _decision(self, record: dict[str, Any]) -> None:
        key = str(record["job_key"])
        kept = self.decisions.get(key)
        if kept is None:
            kept = self.decisions[key] = deque(maxlen=DECISIONS_KEPT)
        kept.append(record)
        self.decision_totals[key] = self.decision_totals.get(key, 0) + 1
        given = record.get("input") or {}
        if given.get("type") == "job.start" and record.get("outcome") == "applied":
            entry = self.jobs.setdefault(key, JobEntry(key))
            entry.subject = dict(given.get("subject") or {})
            entry.contacts = list(given.get("contacts") or [])
        if given.get("type") == "event":
            ident = given.get("id") or given.get("idempotency_key") or f"{key}#{record.get('seq')}"
            events = self.events.setdefault(key, OrderedDict())
            events[str(ident)] = {**given, "id": str(ident), "at": record.get("now")}
            while len(events) > EVENTS_KEPT:
                events.popitem(last=False)
        origin = record.get("origin") or {}
        if origin.get("topic") == self.topics.inbox:
            self._settle(key, int(origin["partition"]), int(origin["offset"]), record)
        self._changed(key)

    def _settle(self, key: str, partition: int, offset: int, record: dict[str, Any]) -> None:
        if offset > self.decided.get(partition, -1):
            self.decided[partition] = offset
        given = record.get("input") or {}
        refused = record.get("outcome") == "refused" and given.get("type") == "job.start"
        if refused:
            self._refused_starts[(partition, offset)] = str(record.get("refused") or "refused")
            while len(self._refused_starts) > IDEMPOTENCY_KEPT:
                self._refused_starts.popitem(last=False)
        entry = self.jobs.get(key)
        if entry is None:
            return
        start = entry.start
        here = start is not None and (start.partition, start.offset) == (partition, offset)
        if refused and here and entry.snapshot is None:
            entry.refused = self._refused_starts[(partition, offset)]
        entry.pending = [
            w for w in entry.pending if not (w.partition == partition and w.offset <= offset)
        ]

    # -- following the topics ------------------------------------------------------------

    def _check_order(self, tp: TopicPartition, offset: int, say: Callable[[str], None]) -> None:
        expected = self._next.get(tp, 0)
        if offset < expected:
            self._went_back(tp, f"it delivered offset {offset} again", say)
        self._next[tp] = max(expected, offset + 1)

    def _went_back(self, tp: TopicPartition, what: str, say: Callable[[str], None]) -> None:
        if self.reset is not None:
            return
        self.reset = (
            f"{tp.topic} partition {tp.partition} was reset or recreated: this gateway had read "
            f"it up to offset {self._next.get(tp, 0) - 1}, but {what}. Restart the gateway "
            "(and see docs/operations.md, 'When the broker was reset')"
        )
        say(f"gateway: {self.reset}")

    async def follow(
        self, bootstrap: str, stopping: asyncio.Event, say: Callable[[str], None] = log.info
    ) -> None:
        """Read the three topics from the beginning and keep following until
        ``stopping`` is set."""
        consumer = AIOKafkaConsumer(
            **client_kwargs(bootstrap), enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            names = [
                self.topics.jobs,
                self.topics.decisions,
                self.topics.playbooks,
                self.topics.journal,
                self.topics.messages,
            ]
            tps: list[TopicPartition] = []
            while not stopping.is_set():
                await consumer.topics()  # fresh metadata
                found = {n: consumer.partitions_for_topic(n) or set() for n in names}
                if all(found.values()):
                    tps = [TopicPartition(n, p) for n, ps in found.items() for p in sorted(ps)]
                    break
                await asyncio.sleep(0.5)
            if not tps:
                return
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            self.following = True
            while not stopping.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=2000)
                for tp, records in batches.items():
                    for r in records:
                        self._check_order(tp, r.offset, say)
                        self.apply(tp.topic, r.key, r.value)
                for tp in tps:
                    high = consumer.highwater(tp)
                    if high is not None and high < self._next.get(tp, 0):
                        self._went_back(tp, f"its log now ends at offset {high}", say)
                now_caught_up = await caught_up(consumer, tps)
                if now_caught_up and not self.caught_up:
                    say(
                        f"gateway: read model caught up ({len(self.jobs)} jobs, "
                        f"{len(self.playbooks)} playbooks)"
                    )
                self.caught_up = now_caught_up
        finally:
            self.following = False
            await consumer.stop()
