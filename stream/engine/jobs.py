"""The jobs' adapter of the engine (stream/engine/engine.py): an inbox record
(``job.start`` or an event) or a tick becomes an input of the pure core
(``JobGraph.next``, compiler/), and its step becomes the records to produce — a
decision, the tasks it opened or closed, the fact it remembered (to
``memory-facts``, on its subject's partition: docs/memory.md) — and the state to
store (``Batch.states``), whose changelog record is also what read models read
of the job (docs/kafka.md, "The job table's changelog").
The engine decides where a record is decided (its home partition), when a
timer fires (the due-time index, stream/engine/due.py) and what is
dead-lettered; this module reads a job's state (the batch's own first, then a
cache of recently stored ones, then the table) and decides it. Everything that
can fail happens before the batch is touched, so a failure leaves nothing of a
record behind (docs/operations.md).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from compiler import (
    Event,
    FactRemembered,
    JobGraph,
    JobState,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    refusal,
)
from stream.engine.batch import Batch, JobRef, Output, Record
from stream.engine.registry import Registry
from stream.engine.store import NOTHING_APPLIED, Applied, Stored, decode_stored, next_due_ms
from stream.engine.timers import JOBS
from stream.runtime.errors import StorageError
from stream.runtime.partitions import Homes
from topics import InboxEvent, JobStart, Topics, event_id
from topics.build import (
    decision_record,
    memory_fact_record,
    record_origin,
    task_closed_record,
    task_opened_record,
)

__all__ = ["Jobs"]

log = logging.getLogger("lemongraph.worker")


def _dumps(data: Any) -> bytes:
    # Outputs are built in a fixed key order, so plain dumps is deterministic
    # (a re-decided record is byte-identical); only job state, which is hashed,
    # needs canonical (sorted) keys. Sorting cost a third of the encoding.
    return orjson.dumps(data)


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class Jobs:
    """The jobs of the partitions the engine owns: see the module's docstring.
    ``load`` reads a stored job (bytes) by key and partition from the table;
    ``homes`` says which partition a key lives on (a remembered fact goes to
    its subject's, on ``memory-facts``)."""

    def __init__(
        self,
        topics: Topics,
        registry: Registry,
        load: Callable[[str, int], bytes | None],
        cache_size: int,
        homes: Homes,
    ) -> None:
        # The names read for every output (a Topics property formats its name
        # on each read).
        self._inbox_topic = topics.inbox
        self._decisions_topic = topics.decisions
        self._tasks_topic = topics.tasks
        self._memory_facts_topic = topics.memory_facts
        self._homes = homes
        self.registry = registry
        self.load = load
        # Recently stored jobs, decoded: a job that just had an event is likely to
        # have another soon (a conversation), and decoding costs as much as
        # deciding. Holds committed states only, so a crash loses nothing.
        # With each its due time as stored (what the index holds for it).
        self._cache: OrderedDict[JobRef, tuple[Applied, JobState, int | None]] = OrderedDict()
        self.cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0

    def clear(self) -> None:
        """Partitions were (re)assigned: forget what is cached."""
        self._cache.clear()

    def committed(self, batch: Batch) -> None:
        """The batch's writes are stored: its states are the cached ones."""
        cache = self._cache
        timers = batch.timers
        for ref, (applied, state) in batch.states.items():
            entry = timers.get((ref[0], JOBS, ref[1]))
            cache[ref] = (applied, state, entry[1] if entry is not None else next_due_ms(state))
            cache.move_to_end(ref)
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def current(self, ref: JobRef, batch: Batch) -> tuple[Applied, JobState | None]:
        """(inbox records applied, state) — the batch's own writes first."""
        pending = batch.states.get(ref)
        if pending is not None:
            return pending
        where = (ref[0], JOBS, ref[1])
        cached = self._cache.get(ref)
        if cached is not None:
            self.cache_hits += 1
            self._cache.move_to_end(ref)
            if where not in batch.timers:
                batch.timers[where] = (cached[2], cached[2])
            return cached[0], cached[1]
        self.cache_misses += 1
        try:
            raw = self.load(ref[1], ref[0])
        except Exception as exc:
            # The table, not the record: stop the worker (see Engine.process).
            raise StorageError(f"cannot read job {ref[1]!r} of partition {ref[0]}: {exc}") from exc
        if raw is None:
            if where not in batch.timers:
                batch.timers[where] = (None, None)
            return NOTHING_APPLIED, None
        stored: Stored = decode_stored(raw)
        if where not in batch.timers:
            # The header's due time is the one its index row was written with.
            batch.timers[where] = (stored.next_due_ms, stored.next_due_ms)
        return stored.applied, stored.state

    # -- inbox ------------------------------------------------------------------------

    def inbox(
        self,
        record: Record,
        origin: tuple[int, int],
        ref: JobRef,
        message: InboxEvent | JobStart,
        now_ms: int,
        bound: str | None,
        batch: Batch,
    ) -> bool:
        """Decide a ``job.start`` or an event at its home partition, produced at
        ``origin`` and decided at ``now_ms`` (``bound``: why that is not the
        record's timestamp, None: it is). True when the job was decided (a tick
        may fire its timer again)."""
        applied, state = self.current(ref, batch)
        if applied.covers(origin[0], origin[1]):
            batch.skipped += 1  # re-delivered (or forwarded twice): applied already
            return False
        now = _instant(now_ms)
        bounded = bound  # why now is not the record's timestamp (None: it is)
        if isinstance(message, InboxEvent):
            item: Event | Start = Event(
                message.action,
                message.value,
                message.properties or None,
                message.source,
                message.idempotency_key,
                None if message.idempotency_key else event_id(origin[0], origin[1]),
            )
            refused = refusal(state, item)  # the core's rule, before a graph is needed
            if refused is not None:
                self.refuse(record, origin, ref, now, item, refused, batch, applied, state, bounded)
                return False
            assert state is not None  # refusal() refuses an event for a job never started
            graph = self.registry.graph(state.playbook_key, state.playbook_version)
            if graph is None:
                reason = (
                    f"playbook {state.playbook_key} v{state.playbook_version} is not registered "
                    "on this worker"
                )
                self.refuse(record, origin, ref, now, item, reason, batch, applied, state, bounded)
                return False
        else:
            item = Start(
                message.key, message.playbook_key, message.subject, tuple(message.contacts)
            )
            latest = self.registry.latest(message.playbook_key)
            if latest is None:
                reason = f"unknown playbook {message.playbook_key!r}"
                self.refuse(record, origin, ref, now, item, reason, batch, applied, state, bounded)
                return False
            graph = latest
        step = graph.next(state, now, item)
        if bound is None and step.now != now:
            bounded = "job_clock"
        return self.decided(record, origin, ref, graph, state, applied, step, batch, bounded)

    def graph(self, state: JobState) -> JobGraph | None:
        """The playbook ``state`` runs, if registered."""
        return self.registry.graph(state.playbook_key, state.playbook_version)

    def decided(
        self,
        record: Record,
        origin: tuple[int, int],
        ref: JobRef,
        graph: JobGraph,
        before: JobState | None,
        applied: Applied,
        step: Step,
        batch: Batch,
        clock: str | None,
    ) -> bool:
        """Encode the decision, then add it to the batch. Everything that can
        fail happens before the batch is touched, so a failure leaves nothing of
        this record behind. True when the job was decided (not a duplicate):
        a tick may fire its timer again."""
        state = step.state
        where = (ref[0], JOBS, ref[1])
        if step.noop:
            return True
        inbox = record.topic == self._inbox_topic
        if step.duplicate:
            # A retried idempotency key: applied once already, so no decision and
            # no write (a re-delivery of this retry is a duplicate again).
            batch.duplicates += 1
            batch.decided(graph.playbook.key, "duplicate", record, inbox)
            return False
        body = self.decision_body(record, origin, ref[1], graph, before, step, clock)
        encoded = [Output(self._decisions_topic, ref[1].encode(), _dumps(body), ref[0])]
        # The effects' JSON is in the decision record already: task records reuse it.
        for effect, data in zip(step.effects, body["effects"], strict=True):
            if isinstance(effect, TaskOpened) and state is not None:
                task = task_opened_record(
                    data,
                    effect.instructions,
                    effect.playbook_instructions,
                    effect.integrations,
                    effect.frontier,
                    state.playbook_key,
                    state.subject,
                    state.contacts,
                )
            elif isinstance(effect, TaskClosed):
                task = task_closed_record(data)
            elif isinstance(effect, FactRemembered):
                # Keyed by the subject, on the subject's partition (murmur2, as
                # Kafka's default partitioner): one subject's facts are one
                # partition's, in order, for the memory processor (docs/memory.md).
                subject = effect.subject.encode()
                fact = _dumps(memory_fact_record(data))
                encoded.append(
                    Output(self._memory_facts_topic, subject, fact, self._homes.of(subject))
                )
                continue
            else:
                continue
            encoded.append(Output(self._tasks_topic, ref[1].encode(), _dumps(task), ref[0]))
        due = next_due_ms(state) if state is not None else None
        # -- nothing below can fail --
        if state is not None:
            batch.states[ref] = (applied.after(origin[0], origin[1]) if inbox else applied, state)
            known = batch.timers.get(where)
            batch.timers[where] = (known[0] if known is not None else None, due)
        if clock is not None:
            batch.bounded += 1
        batch.decisions += 1
        batch.decided(graph.playbook.key, "applied", record, inbox, encoded)
        batch.outputs.extend(encoded)
        return state is not None

    def decision_body(
        self,
        record: Record,
        origin: tuple[int, int],
        key: str,
        graph: JobGraph | None,
        before: JobState | None,
        step: Step,
        clock: str | None,
    ) -> dict[str, Any]:
        """A decision record (topics.DecisionRecord), as data."""
        playbook = graph.playbook if graph is not None else None
        return decision_record(
            key,
            playbook.key if playbook else None,
            playbook.version if playbook else None,
            record_origin(record.topic, origin[0], origin[1], record.partition, record.offset),
            before.hash if before is not None else None,
            step.to_json(),
            record.timestamp_ms,
            clock,
        )

    def refuse(
        self,
        record: Record,
        origin: tuple[int, int],
        ref: JobRef,
        now: datetime,
        item: Event | Start,
        reason: str,
        batch: Batch,
        applied: Applied,
        state: JobState | None = None,
        clock: str | None = None,
    ) -> None:
        """The refusal of ``item``: a decision that changes nothing."""
        step = Step(state, now, item, refused=reason)
        body = self.decision_body(record, origin, ref[1], None, state, step, clock)
        output = Output(self._decisions_topic, ref[1].encode(), _dumps(body), ref[0])
        if state is not None:
            # Remember the offset, so a re-delivery is recognised without a
            # second decision.
            batch.states[ref] = (applied.after(origin[0], origin[1]), state)
        batch.decisions += 1
        # A playbook a job runs (registered when it started), never a key an
        # input named that is not registered: labels stay bounded.
        playbook = state.playbook_key if state is not None else ""
        batch.decided(playbook, "refused", record, record.topic == self._inbox_topic)
        batch.outputs.append(output)


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
