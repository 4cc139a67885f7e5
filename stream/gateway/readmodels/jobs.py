"""The gateway's read model: jobs, decisions and playbooks, fed by their topics
and by the writes this gateway accepted itself (so a client reads its own writes).

:meth:`ReadModel.follow` (the loop of stream/gateway/readmodels/follow.py, which also
notices a broker reset) reads the job table's changelog (``Topics.jobstate``: each
job's state, of which it builds the job's view, ``JobSnapshot``), ``decisions``,
``playbooks``, ``journal`` and ``messages`` from the beginning with a plain
consumer (no group: every partition assigned) and keeps following. It is
*caught up* when every partition's position has reached the high watermark the
fetch responses report (the embedded broker's ListOffsets answer can be off by
up to a batch, so it is not used).

An accepted write stays *pending* until a decision whose origin is its inbox
partition and offset arrives — or any later offset of that partition is decided
(inbox records are decided in order per partition, so an earlier one that made
no decision, e.g. a retried idempotency key, is settled too). A retried
idempotency key makes no decision at all, so a pending event whose key (per
source, as the engine remembers keys) an applied decision already carries is
settled by that decision; and a write pending longer than ``pending_ttl``
seconds is dropped from the list (it is still on the inbox and will be decided;
only this gateway's reminder of it goes).

**What it keeps** (docs/operations.md, "The gateway's memory"). Per job: the
newest decisions, events, journal records, messages and idempotency keys, up
to the counts below and, together, ``job_bytes`` bytes (as JSON): past that the
oldest record of the largest kind goes (never a kind's newest). In all: at most
``jobs_kept`` jobs and ``memory_bytes`` bytes; past either, the least recently
used job that nobody watches and that has no undecided write is evicted whole.
What is left of it is its snapshot's summary (status, milestone states, seq),
so a read answers ``in_memory: false`` rather than 404, a write to it is taken,
and its next snapshot brings the snapshot back (the older decisions, events and
the like do not come back); past ``10 × jobs_kept`` such summaries, or an eighth
of ``memory_bytes`` of them, the oldest is forgotten. Undecided writes (a start
until its snapshot or refusal, a pending event) are counted too, and expire
after ``pending_ttl``; past ``pending_bytes`` (a quarter of ``memory_bytes``)
:meth:`full` says so and the API refuses new writes (503 ``gateway_full``).
Everything dropped stays on the topics.

Idempotency keys are learnt from applied decisions too, not only from this
gateway's own writes: a retry sent after a restart, or of a key another
producer sent, is answered ``duplicate`` without writing again.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka.structs import TopicPartition
from pydantic import TypeAdapter, ValidationError

from compiler import LemongraphError, Playbook, compile_playbook
from stream.gateway.readmodels.entries import AcceptedWrite, JobEntry, idem
from stream.gateway.readmodels.follow import Followed
from stream.gateway.readmodels.interrupts import OpenQuestions
from stream.gateway.readmodels.states import JobStates
from topics import (
    JobSnapshot,
    JournalFlow,
    JournalInterrupt,
    JournalRecord,
    JournalWorktree,
    MessageRecord,
    MilestoneSnapshot,
    PlaybookRecord,
    Topics,
)

__all__ = ["AcceptedWrite", "JobEntry", "ReadModel", "idem"]

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
#: Seconds an accepted write stays in ``pending_writes`` at most.
PENDING_TTL = 300.0
#: Jobs held in memory, and the bytes (as JSON) held per job and in all.
JOBS_KEPT = 10_000
JOB_BYTES = 1 << 20
MEMORY_BYTES = 128 << 20
#: Accepted writes listed as pending per job (the oldest go first).
PENDING_KEPT = 200
#: The part of ``memory_bytes`` that undecided writes (starts and pending
#: events) may take; past it new writes are answered 503 ``gateway_full``.
PENDING_SHARE = 4
#: The part of ``memory_bytes`` that evicted jobs' summaries may take.
GONE_SHARE = 8
#: What a start keeps until its snapshot arrives (what views.py reads).
_START_FIELDS = ("type", "key", "playbook_key", "subject", "contacts")
#: The kinds of record kept per job within its byte budget.
_KINDS = ("decisions", "events", "journal", "messages", "idempotency")


class ReadModel(Followed):
    """Jobs by key, their newest decisions, the playbooks; watchers per job."""

    def __init__(
        self,
        topics: Topics,
        playbooks: dict[str, dict[int, dict[str, Any]]],
        *,
        pending_ttl: float = PENDING_TTL,
        jobs_kept: int = JOBS_KEPT,
        job_bytes: int = JOB_BYTES,
        memory_bytes: int = MEMORY_BYTES,
        pending_bytes: int | None = None,
    ) -> None:
        super().__init__()
        self.topics = topics
        self.pending_ttl = pending_ttl
        self.jobs_kept = jobs_kept
        self.job_bytes = job_bytes
        self.memory_bytes = memory_bytes
        #: Bytes undecided writes may hold before new writes are refused.
        self.pending_bytes = (
            pending_bytes if pending_bytes is not None else memory_bytes // PENDING_SHARE
        )
        #: Bytes held per job, by kind (and "snapshot", "start", "pending");
        #: their sum in all, and the undecided part ("start" and "pending").
        self._held: dict[str, dict[str, int]] = {}
        self.held_bytes = 0
        self.undecided_bytes = 0
        #: Idle jobs by last use, least recent first; busy ones (watched, or
        #: with undecided writes) are in ``_busy_jobs`` instead, so eviction
        #: never walks past them.
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._busy_jobs: set[str] = set()
        #: Evicted jobs: their snapshot's summary (no detail, no timers), and
        #: the bytes those summaries weigh (counted against ``memory_bytes``).
        self.gone: OrderedDict[str, JobSnapshot] = OrderedDict()
        self._gone_size: dict[str, int] = {}
        self.gone_bytes = 0
        #: The keys ``GET /v1/jobs`` lists (visible in memory, or evicted), sorted,
        #: in all and by status; and each one's status there.
        self.listed: list[str] = []
        self.listed_by: dict[str, list[str]] = {}
        self._listed_as: dict[str, str] = {}
        self._starting: set[str] = set()  # keys of jobs with an undecided start
        self.evicted = 0  # jobs evicted from memory
        self.forgotten = 0  # evicted jobs whose summary went too
        #: Open milestones (each has its open task) per job held, and in all
        #: (``lemongraph_tasks_open``, docs/operations.md "Metrics").
        self._open_tasks: dict[str, int] = {}
        self.tasks_open = 0
        self.trimmed = 0  # records dropped for a job's byte budget
        self._pending_jobs: set[str] = set()  # keys of jobs with pending writes
        self.playbooks = playbooks
        self.jobs: dict[str, JobEntry] = {}
        self.decisions: dict[str, deque[dict[str, Any]]] = {}
        self.journal: dict[str, deque[dict[str, Any]]] = {}
        self.journal_totals: dict[str, int] = {}  # journal records ever read, per job
        self.messages: dict[str, deque[dict[str, Any]]] = {}  # the conversation, per job
        self.message_totals: dict[str, int] = {}
        self.message_ids: dict[str, set[str]] = {}  # of the messages kept, per job
        self.flow_ids: dict[str, set[tuple[Any, ...]]] = {}  # of the flow records kept
        #: Flows' open questions per job (stream/gateway/readmodels/interrupts.py).
        self.interrupts = OpenQuestions()
        self.decision_totals: dict[str, int] = {}  # decisions ever read, per job
        self.events: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self.decided: dict[int, int] = {}  # inbox partition → highest offset decided
        # Refused starts by inbox (partition, offset), for a refusal read before
        # the broker's acknowledgement of the start reached the gateway.
        self._refused_starts: OrderedDict[tuple[int, int], str] = OrderedDict()
        self.skipped = 0
        self._expired = 0.0  # when undecided writes were last expired (monotonic)
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._compiled: dict[tuple[str, int], Playbook | None] = {}
        #: The jobs' states made into their views (stream/gateway/readmodels/states.py).
        self.states = JobStates(self.playbook, self.compiled)
        #: Told every decision read (the schedules' read model joins its runs).
        self.decision_readers: list[Callable[[dict[str, Any]], None]] = []
        #: Told every message read (the webhook's reply tokens are filled so).
        self.message_readers: list[Callable[[MessageRecord], None]] = []

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
        entry = self.lookup(key)
        return entry if entry is not None and entry.exists else None

    def lookup(self, key: str) -> JobEntry | None:
        """The job's entry, if any: an evicted job comes back as its summary
        (``in_memory`` False). Counts as a use of the job."""
        entry = self.jobs.get(key)
        if entry is None:
            summary = self.gone.pop(key, None)
            if summary is None:
                return None
            self._drop_gone_size(key)
            entry = self.jobs[key] = JobEntry(key, snapshot=summary, in_memory=False)
            self._add(key, "snapshot", _summary_size(summary))
            self._touch(key)
            self._fit(key)
        self._touch(key)
        return entry

    def _new(self, key: str) -> JobEntry:
        """A new entry for job ``key`` (used; listed once visible); an evicted
        job's comes back as its summary, never shadowed by a bare entry."""
        if key in self.gone:
            found = self.lookup(key)
            assert found is not None
            return found
        entry = self.jobs[key] = JobEntry(key)
        self._touch(key)
        return entry

    def status_of(self, key: str) -> str | None:
        """The status job ``key`` is listed under (None: not listed)."""
        entry = self.jobs.get(key)
        if entry is not None:
            if entry.snapshot is not None:
                return str(entry.snapshot.status)
            if entry.start is None:
                return None
            return "refused" if entry.refused is not None else "starting"
        summary = self.gone.get(key)
        return str(summary.status) if summary is not None else None

    def _relist(self, key: str) -> None:
        """Keep the sorted lists in step with job ``key``'s status."""
        now, was = self.status_of(key), self._listed_as.get(key)
        if now == was:
            return
        if was is not None:
            _unsort(self.listed_by[was], key)
            if now is None:
                _unsort(self.listed, key)
        if now is None:
            del self._listed_as[key]
            return
        if was is None:
            bisect.insort(self.listed, key)
        bisect.insort(self.listed_by.setdefault(now, []), key)
        self._listed_as[key] = now

    def full(self) -> bool:
        """Do undecided writes hold their whole budget (new writes wait)?"""
        return self.undecided_bytes > self.pending_bytes

    # -- memory ----------------------------------------------------------------------

    def _touch(self, key: str) -> None:
        """A use of job ``key``: the most recent idle one, or a busy one."""
        if self._busy(key):
            self._recent.pop(key, None)
            self._busy_jobs.add(key)
        else:
            self._busy_jobs.discard(key)
            self._recent[key] = None
            self._recent.move_to_end(key)

    def _restate(self, key: str) -> None:
        """Job ``key`` may have become busy or idle."""
        if key in self._recent or key in self._busy_jobs:
            self._touch(key)

    def _add(self, key: str, kind: str, size: int) -> None:
        held = self._held.setdefault(key, {})
        held[kind] = held.get(kind, 0) + size
        self.held_bytes += size
        if kind in ("start", "pending"):
            self.undecided_bytes += size

    def _take(self, key: str, kind: str, size: int) -> None:
        held = self._held.get(key)
        if held is not None:
            held[kind] = held.get(kind, 0) - size
        self.held_bytes -= size
        if kind in ("start", "pending"):
            self.undecided_bytes -= size

    def _set_start(self, entry: JobEntry, start: AcceptedWrite | None) -> None:
        if entry.start is not None:
            kind = "start" if entry.key in self._starting else "refused"
            self._take(entry.key, kind, _write_size(entry.start))
        entry.start = start
        self._starting.discard(entry.key)
        if start is not None:
            # Undecided until its snapshot or refusal (which may have come first).
            undecided = entry.refused is None
            self._add(entry.key, "start" if undecided else "refused", _write_size(start))
            if undecided:
                self._starting.add(entry.key)
        self._restate(entry.key)
        self._relist(entry.key)

    def _set_pending(self, entry: JobEntry, pending: list[AcceptedWrite]) -> None:
        if pending == entry.pending:
            return
        size = sum(_write_size(w) for w in entry.pending)
        self._take(entry.key, "pending", size)
        entry.pending = pending
        self._add(entry.key, "pending", sum(_write_size(w) for w in pending))
        if pending:
            self._pending_jobs.add(entry.key)
        else:
            self._pending_jobs.discard(entry.key)
        self._restate(entry.key)

    def _pop_oldest(self, key: str, kind: str) -> bool:
        """Drop the oldest record of ``kind`` for job ``key`` (never the newest)."""
        size = 0
        if kind in ("decisions", "journal", "messages"):
            kept: deque[dict[str, Any]] | None = getattr(self, kind).get(key)
            if kept is None or len(kept) < 2:
                return False
            record = kept.popleft()
            size = _size(record)
            if kind == "messages":
                self.message_ids.get(key, set()).discard(record["message_id"])
            elif record.get("type") == "journal.flow":
                self.flow_ids.get(key, set()).discard(_flow_id(record))
        elif kind == "events":
            events = self.events.get(key)
            if events is None or len(events) < 2:
                return False
            size = _size(events.popitem(last=False)[1])
        else:
            entry = self.jobs.get(key)
            if entry is None or len(entry.idempotency) < 2:
                return False
            size = _write_size(entry.idempotency.popitem(last=False)[1])
        self._take(key, kind, size)
        return True

    def _fit(self, key: str) -> None:
        """Keep job ``key`` within its byte budget, then the model within its own."""
        held = self._held.get(key)
        while held is not None and sum(held.values()) > self.job_bytes:
            kinds = sorted(_KINDS, key=lambda k: held.get(k, 0), reverse=True)
            if not any(self._pop_oldest(key, k) for k in kinds):
                break
            self.trimmed += 1
        while (
            len(self._recent) + len(self._busy_jobs) > self.jobs_kept
            or self.held_bytes + self.gone_bytes > self.memory_bytes
        ):
            # The least recently used idle job: at most two steps (``key``
            # itself, then another), however many jobs are busy.
            idle = next((k for k in self._recent if k != key), None)
            if idle is None:
                break
            if self._busy(idle):  # not expected: every change restates
                self._touch(idle)
                continue
            self.evict(idle)

    def _busy(self, key: str) -> bool:
        """Watched, or with writes of this gateway no decision reflects yet."""
        if key in self._watchers:
            return True
        entry = self.jobs.get(key)
        if entry is None:
            return False
        starting = entry.start is not None and entry.snapshot is None and entry.refused is None
        return starting or bool(entry.pending)

    def _drop_gone_size(self, key: str) -> None:
        self.gone_bytes -= self._gone_size.pop(key, 0)

    def evict(self, key: str) -> None:
        """Let go of everything held for job ``key`` but its summary."""
        entry = self.jobs.pop(key, None)
        for kept in (
            self.decisions, self.journal, self.messages, self.message_ids, self.flow_ids,
            self.events, self.decision_totals, self.journal_totals, self.message_totals,
        ):  # fmt: skip
            kept.pop(key, None)
        held = self._held.pop(key, {})
        self.held_bytes -= sum(held.values())
        self.undecided_bytes -= held.get("start", 0) + held.get("pending", 0)
        self._recent.pop(key, None)
        self._busy_jobs.discard(key)
        self._pending_jobs.discard(key)
        self._starting.discard(key)
        self.evicted += 1
        if entry is None or entry.snapshot is None:
            self._relist(key)
            return
        # Its milestones' states only: a snapshot keeps them in its detail.
        states = {m: MilestoneSnapshot(state=d.state) for m, d in entry.snapshot.detail.items()}
        summary = entry.snapshot.model_copy(update={"detail": states, "timers": []})
        self.gone[key] = summary
        self._gone_size[key] = _summary_size(summary)
        self.gone_bytes += self._gone_size[key]
        self._relist(key)
        gone_budget = self.memory_bytes // GONE_SHARE
        while len(self.gone) > 10 * max(1, self.jobs_kept) or self.gone_bytes > gone_budget:
            forgotten, _ = self.gone.popitem(last=False)
            self._drop_gone_size(forgotten)
            self._relist(forgotten)
            self._count_open(forgotten, 0)
            self.forgotten += 1

    def _count_open(self, key: str, count: int) -> None:
        """Job ``key`` has ``count`` open tasks now."""
        self.tasks_open += count - self._open_tasks.pop(key, 0)
        if count:
            self._open_tasks[key] = count

    def open_task_count(self) -> int:
        """The open tasks of every job held, evicted ones' summaries included."""
        return self.tasks_open

    # -- accepted writes -----------------------------------------------------------

    def reserve(self, key: str) -> JobEntry:
        """The entry of a job about to be started (the caller checked it is free)."""
        entry = self.jobs.get(key)
        if entry is None:
            entry = self._new(key)
        return entry

    def accepted(self, key: str, write: AcceptedWrite) -> None:
        """Record a write the broker acknowledged."""
        entry = self.lookup(key) or self.reserve(key)
        self._touch(key)
        if write.type != "job.start":
            # What a pending write and a retry need; the value stays on the inbox.
            message = {k: write.message.get(k) for k in ("type", "action", "source")}
            message["idempotency_key"] = write.message.get("idempotency_key")
        else:
            # What a reader of a job not yet decided is shown (views.py).
            message = {k: write.message[k] for k in _START_FIELDS if k in write.message}
        write = dataclasses.replace(write, message=message)
        if write.type == "job.start":
            entry.refused = self._refused_starts.get((write.partition, write.offset))
            self._set_start(entry, write)
        elif write.offset > self.decided.get(write.partition, -1):
            self._set_pending(entry, [*entry.pending, write][-PENDING_KEPT:])
        given = write.message.get("idempotency_key")
        if given:
            self._remember(entry, idem(write.message.get("source"), given), write)
        self._changed(key)
        self._fit(key)

    def _remember(self, entry: JobEntry, key: str, write: AcceptedWrite) -> None:
        earlier = entry.idempotency.pop(key, None)
        if earlier is not None:
            self._take(entry.key, "idempotency", _write_size(earlier))
        entry.idempotency[key] = write
        self._add(entry.key, "idempotency", _write_size(write))
        while len(entry.idempotency) > IDEMPOTENCY_KEPT:
            self._take(entry.key, "idempotency", _write_size(entry.idempotency.popitem(False)[1]))

    def expire_pending(self, now: float) -> int:
        """Drop writes pending longer than ``pending_ttl`` (how many went): events
        and starts alike (a start no snapshot followed goes with its entry; it is
        still on the inbox, and its snapshot brings the job when decided)."""
        dropped = 0
        for key in list(self._pending_jobs):
            entry = self.jobs.get(key)
            if entry is None or not entry.pending:
                self._pending_jobs.discard(key)
                continue
            kept = [w for w in entry.pending if now - w.at <= self.pending_ttl]
            if len(kept) != len(entry.pending):
                dropped += len(entry.pending) - len(kept)
                self._set_pending(entry, kept)
                self._changed(key)
        for key in list(self._starting):
            entry = self.jobs.get(key)
            start = entry.start if entry is not None else None
            if entry is None or start is None:
                self._starting.discard(key)
                continue
            if now - start.at <= self.pending_ttl:
                continue
            dropped += 1
            self._set_start(entry, None)
            self._changed(key)
            if entry.snapshot is None and key not in self._watchers:
                self.evict(key)  # nothing else to keep: no summary either
                self.evicted -= 1  # not an eviction for memory
        return dropped

    # -- watching --------------------------------------------------------------------

    def watch(self, key: str) -> asyncio.Event:
        """An event set whenever job ``key`` changes."""
        flag = asyncio.Event()
        self._watchers.setdefault(key, set()).add(flag)
        self._restate(key)
        return flag

    def unwatch(self, key: str, flag: asyncio.Event) -> None:
        """Stop watching."""
        flags = self._watchers.get(key)
        if flags is not None:
            flags.discard(flag)
            if not flags:
                del self._watchers[key]
                self._restate(key)

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
        """One record of a followed topic; a record that does not decode is
        counted and skipped (the worker dead-letters inputs; these are its outputs)."""
        if value is None:
            return
        try:
            if topic == self.topics.jobstate:
                self._state(key, value)
            elif topic == self.topics.decisions:
                self._decision(orjson.loads(value), len(value))
            elif topic == self.topics.playbooks:
                record = PlaybookRecord.model_validate_json(value)
                self.playbooks.setdefault(record.key, {})[record.version] = record.spec
                self._compiled.pop((record.key, record.version), None)  # compiled from it
                for held_key, held in self.states.placed((record.key, record.version)):
                    self.apply(self.topics.jobstate, held_key, held)
            elif topic == self.topics.messages:
                self._message(MessageRecord.model_validate_json(value), len(value))
            elif topic == self.topics.journal:
                self._journal(_JOURNAL.validate_json(value))
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            self.skipped += 1
            log.debug("read model: skipped a record of %s: %s", topic, exc)

    def _keep(self, key: str, kind: str, record: dict[str, Any], count: int, size: int = 0) -> None:
        """Append ``record`` to the job's newest ``count`` of ``kind``."""
        kept: dict[str, deque[dict[str, Any]]] = getattr(self, kind)
        held = kept.get(key)
        if held is None:
            held = kept[key] = deque()
        self._touch(key)
        while len(held) >= count and self._pop_oldest(key, kind):
            pass
        held.append(record)
        self._add(key, kind, size or _size(record))

    def answered(self, key: str, interrupt_id: str) -> None:
        """An answer to ``interrupt_id`` was written: a second one is refused."""
        self.interrupts.answered(key, interrupt_id)

    def _journal(self, entry: JournalRecord) -> None:
        """One journal record; a ``journal.flow`` record written again after a
        crash (the same ``run_id``, ``event``, ``node`` and ``at``: docs/flows.md,
        "Crash safety") is kept once."""
        if isinstance(entry, JournalInterrupt):
            self.interrupts.read(entry)
        elif isinstance(entry, JournalWorktree):
            self.interrupts.worktree(entry)
        record = entry.dump()
        if isinstance(entry, JournalFlow):
            flows = self.flow_ids.setdefault(entry.job_key, set())
            if _flow_id(record) in flows:
                return
            flows.add(_flow_id(record))
        self._keep(entry.job_key, "journal", record, JOURNAL_KEPT)
        totals = self.journal_totals
        totals[entry.job_key] = totals.get(entry.job_key, 0) + 1
        self._changed(entry.job_key)
        self._fit(entry.job_key)

    def _message(self, record: MessageRecord, size: int = 0) -> None:
        key = record.job_key
        for reader in self.message_readers:
            reader(record)
        if record.direction == "in" and record.interrupt_id is not None:
            self.answered(key, record.interrupt_id)
        ids = self.message_ids.setdefault(key, set())
        if record.message_id in ids:
            return  # a re-delivery (the same id is the same message)
        self._keep(key, "messages", record.dump(), MESSAGES_KEPT, size)
        ids.add(record.message_id)
        self.message_totals[key] = self.message_totals.get(key, 0) + 1
        self._changed(key)
        self._fit(key)

    def _state(self, key: bytes | None, value: bytes) -> None:
        """A row of the job table's changelog: a job's state becomes its view."""
        found = self.states.view(key, value, self._seq_held)
        if found is not None:
            self._snapshot(*found)

    def _seq_held(self, key: str) -> int | None:
        entry = self.jobs.get(key)
        if entry is None or not entry.in_memory or entry.snapshot is None:
            return None
        return entry.snapshot.seq

    def _snapshot(self, snapshot: JobSnapshot, size: int = 0) -> None:
        # An evicted job comes back as its summary first (held, counted and
        # used like any entry), so a snapshot older than that summary leaves
        # an entry that is evicted in its turn.
        entry = self.lookup(snapshot.key)
        if entry is None:
            entry = self._new(snapshot.key)
        if entry.snapshot is not None and entry.snapshot.seq > snapshot.seq:
            self._fit(snapshot.key)
            return
        self._touch(snapshot.key)
        held = self._held.get(snapshot.key, {}).get("snapshot", 0)
        self._take(snapshot.key, "snapshot", held)
        self._add(snapshot.key, "snapshot", size or len(snapshot.model_dump_json()))
        entry.snapshot = snapshot
        self._count_open(snapshot.key, sum(s == "open" for s in snapshot.milestones.values()))
        entry.in_memory = True
        entry.refused = None
        self._set_start(entry, None)  # and listed under its status
        self._changed(snapshot.key)
        self._fit(snapshot.key)

    def _decision(self, record: dict[str, Any], size: int = 0) -> None:
        key = str(record["job_key"])
        for reader in self.decision_readers:
            reader(record)
        self._keep(key, "decisions", record, DECISIONS_KEPT, size)
        self.decision_totals[key] = self.decision_totals.get(key, 0) + 1
        given = record.get("input") or {}
        if given.get("type") == "job.start" and record.get("outcome") == "applied":
            entry = self.jobs.get(key) or self._new(key)
            entry.subject = dict(given.get("subject") or {})
            entry.contacts = list(given.get("contacts") or [])
        if given.get("type") == "event":
            self._applied_key(key, record, given)
            ident = given.get("id") or given.get("idempotency_key") or f"{key}#{record.get('seq')}"
            events = self.events.setdefault(key, OrderedDict())
            earlier = events.pop(str(ident), None)
            if earlier is not None:
                self._take(key, "events", _size(earlier))
            while len(events) >= EVENTS_KEPT and self._pop_oldest(key, "events"):
                pass
            event = {**given, "id": str(ident), "at": record.get("now")}
            events[str(ident)] = event
            self._add(key, "events", _size(event))
        origin = record.get("origin") or {}
        if origin.get("topic") == self.topics.inbox:
            self._settle(key, int(origin["partition"]), int(origin["offset"]), record)
        self._changed(key)
        self._fit(key)

    def _applied_key(self, key: str, record: dict[str, Any], given: dict[str, Any]) -> None:
        """An applied event's idempotency key: remembered, and every other pending
        write of it settled (the engine makes no decision for a retried key)."""
        if record.get("outcome") != "applied" or not given.get("idempotency_key"):
            return
        origin = record.get("origin") or {}
        if origin.get("topic") != self.topics.inbox:
            return
        entry = self.jobs.get(key)
        if entry is None:
            return
        remembered = idem(given.get("source"), given["idempotency_key"])
        where = (int(origin["partition"]), int(origin["offset"]))
        if remembered not in entry.idempotency:
            self._remember(
                entry,
                remembered,
                AcceptedWrite(
                    type="event",
                    partition=where[0],
                    offset=where[1],
                    accepted_at=str(record.get("now") or ""),
                    message={
                        "action": given.get("action"),
                        "source": given.get("source"),
                        "idempotency_key": given["idempotency_key"],
                    },
                ),
            )
        kept = [
            w
            for w in entry.pending
            if (w.partition, w.offset) == where
            or idem(w.message.get("source"), w.message.get("idempotency_key")) != remembered
            or not w.message.get("idempotency_key")
        ]
        self._set_pending(entry, kept)

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
            if key in self._starting and start is not None:
                # Decided: kept so a reader learns why, but no longer undecided.
                self._starting.discard(key)
                self._take(key, "start", _write_size(start))
                self._add(key, "refused", _write_size(start))
            self._restate(key)
            self._relist(key)
        kept = [w for w in entry.pending if not (w.partition == partition and w.offset <= offset)]
        self._set_pending(entry, kept)

    # -- following the topics (stream/gateway/readmodels/follow.py) ------------------------------

    def followed(self) -> list[str]:
        t = self.topics
        return [t.jobstate, t.decisions, t.playbooks, t.journal, t.messages]

    def take(self, tp: TopicPartition, key: bytes | None, value: bytes | None, offset: int) -> None:
        self.apply(tp.topic, key, value)

    def assigned(self, tps: list[TopicPartition]) -> None:
        self._expired = time.monotonic()

    def between(self) -> None:
        """Undecided writes past ``pending_ttl`` expire, checked once a second."""
        if time.monotonic() - self._expired >= 1.0:
            self.expire_pending(time.time())
            self._expired = time.monotonic()

    def caught_up_line(self) -> str:
        return (
            f"gateway: read model caught up ({len(self.jobs)} jobs, "
            f"{len(self.playbooks)} playbooks)"
        )


def _flow_id(record: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies one ``journal.flow`` record (docs/flows.md, "Crash safety")."""
    return (record.get("run_id"), record.get("event"), record.get("node"), record.get("at"))


def _size(record: dict[str, Any]) -> int:
    """What a kept record weighs, as JSON bytes."""
    return len(orjson.dumps(record))


def _write_size(write: AcceptedWrite) -> int:
    return 100 + len(orjson.dumps(write.message))


def _unsort(keys: list[str], key: str) -> None:
    """Remove ``key`` from the sorted ``keys``."""
    at = bisect.bisect_left(keys, key)
    if at < len(keys) and keys[at] == key:
        del keys[at]


def _summary_size(summary: JobSnapshot) -> int:
    """What an evicted job's summary weighs (an estimate: its key and states)."""
    return len(summary.key) + 200 * (1 + len(summary.milestones))
