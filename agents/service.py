"""``lemongraph agents``: the service that turns tasks into conversations
(docs/agents.md, "The agents service").

A Faust app with its own consumer group reads ``tasks``. Each job's
conversation lives in the service's RocksDB store, and every write to it is
first produced to the compacted ``conversations`` topic (its changelog), on the
partition of the job's tasks, and acknowledged. When a partition of ``tasks`` is
assigned, its changelog partition is read from where this store last read it
(another process may have owned it meanwhile) before any of its records is
taken; when one is revoked, its runs are stopped and resumed by the new owner.
(A Faust table cannot hold it: Faust writes a table only from inside the
handler of an event, and a run must write its checkpoints while it runs, beside
other jobs' runs.)

A ``task.opened`` owes the job a run; runs of different jobs go concurrently,
up to ``LEMONGRAPH_AGENT_CONCURRENCY``, one at a time per job; scheduled
prompt runs have their own bound, ``LEMONGRAPH_PROMPT_CONCURRENCY``, so a slow
schedule never delays a person (docs/agents.md, "Scheduled prompts and heartbeats"). A conversation
whose run was owed (``due``) when its partition came to this process is run
again: its recorded steps are replayed, its tool calls take effect once
(docs/agents.md, "Crash safety").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import orjson
from compiler import from_iso, to_iso
from pydantic import BaseModel, TypeAdapter, ValidationError
from stream.runtime.config import Settings
from stream.runtime.filestore import FileStore
from stream.runtime.metrics import count_journal
from topics import (
    DeadLetter,
    Headers,
    InboxEvent,
    JournalMail,
    JournalRun,
    MessageRecord,
    ScheduleCommandTask,
    SchedulePromptTask,
    TaskClosedRecord,
    TaskOpenedRecord,
    TaskRecord,
    Topics,
    encode,
    first_error,
)
from topics.mail import ADDRESS_MAX

from agents.catalog import CONVERSATION, Catalog
from agents.contacts import is_contact
from agents.conversation import take_answer
from agents.errors import OutputError
from agents.flows.checkpoint import owed_records
from agents.flows.executor import FlowExecutor
from agents.flows.handlers import load_registry
from agents.flows.service import (
    Execute,
    FlowDriver,
    Flows,
    restore_tracks,
    tick_input,
)
from agents.flows.talking import first_turn, take_turn
from agents.memory import Profiles
from agents.model import Model, ModelSettings
from agents.publish import Send
from agents.run import Conversation, Outbox, RunEnd, Runner
from agents.schedule_runs import KIND as PROMPT_RUN
from agents.schedule_runs import PromptRuns
from agents.stores import (
    CHECKPOINT_MAX_BYTES,
    Changelog,
    CheckpointTooLarge,
    Disk,
    fitted,
)
from agents.tools.executor import Executor, tool_response_bound
from agents.workspace.worktree import Workspaces

if TYPE_CHECKING:
    from agents.tools.mcp import McpServers

__all__ = ["AgentService", "AgentStats", "Where", "data_path"]

log = logging.getLogger(__name__)

_TASKS: TypeAdapter[Any] = TypeAdapter(TaskRecord)


@dataclass(frozen=True)
class Where:
    """Where a record was read, for its dead letter."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    headers: Headers


@dataclass
class AgentStats:
    """What the service did, for its status line."""

    records: int = 0
    runs: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    #: Emails not published: their address is not a contact of the job.
    not_contacts: int = 0


class AgentService:
    """The conversations, their store, and the runs in flight."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        model_settings: ModelSettings,
        *,
        concurrency: int = 8,
        prompt_concurrency: int = 4,
        history: int = 20,
        tool_env: Mapping[str, str] | None = None,
        send: Send | None = None,
        flows: Flows | None = None,
        live: int = 1000,
    ) -> None:
        self.settings = settings
        #: The flows milestones name (docs/flows.md, "Flows in the agents service").
        self.flows = flows or Flows()
        #: Carries out a flow's calls (agents/flows/executor.py); made on first use.
        self.execute: Execute | None = None
        #: Jobs with an open flow question that expires, and when (the soonest).
        self.expiring: dict[str, datetime] = {}
        #: The wall clock flows are stepped with (their ``now``) and expire by.
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        #: Calls the flow executor made, by kind.
        self.flow_calls: dict[str, int] = {}
        self.topics = Topics(settings.topic_prefix)
        self.catalog = catalog
        #: The catalog's MCP servers, once started (:meth:`start_mcp`).
        self.mcp: McpServers | None = None
        self._mcp_tried = False
        self.model_settings = model_settings
        self.history = history
        self.tool_env = tool_env
        #: ``LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES`` (docs/agents.md, "Output bounds").
        self.max_tool_response = tool_response_bound(tool_env)
        #: The most a conversation's checkpoint may take (agents/stores.py).
        self.checkpoint_bound = CHECKPOINT_MAX_BYTES
        #: Conversations' runs at once; prompt runs (agents/schedule_runs.py) at once.
        self.limit = asyncio.Semaphore(concurrency)
        self.prompt_limit = asyncio.Semaphore(prompt_concurrency)
        #: Conversations held in memory, least recently used first: at most
        #: ``live_max`` of them (beyond, the oldest not in use is dropped; the
        #: store holds it, and :meth:`load` reads it back).
        self.live: OrderedDict[str, Conversation] = OrderedDict()
        self.live_max = max(1, live)
        #: The job whose record is being taken (its conversation is not dropped).
        self.changing: str | None = None
        #: Per partition of ``tasks``: set while every record fetched of it has
        #: been taken (the records of one decision come together): what a
        #: closing turn waits for, so a task the decision opens is seen first.
        self.idle: dict[int, asyncio.Event] = {}
        self.running: dict[str, asyncio.Task[None]] = {}
        self.stats = AgentStats()
        self.send = send
        #: Awaited after a run is cancelled (a partition revoked): the producer's
        #: records in flight are acknowledged before another process reads them.
        self.flush: Callable[[], Any] | None = None
        folder = data_path(settings)
        folder.mkdir(parents=True, exist_ok=True)
        #: The stores, which go on through a full disk (agents/stores.py).
        self.disk = Disk(folder, "agents")
        self.db = self.disk.open("conversations")
        #: Per changelog partition, the next offset to read back (everything before
        #: it is in ``db``), kept beside the store so a restart reads only the tail.
        self.offsets = self.disk.open("offsets")
        #: The jobs' worktrees, for ``workspace`` tools (docs/coding.md, "Worktrees").
        self.workspaces = Workspaces(folder / "coding")
        #: What ``db`` read of the changelog, and whether the broker still has it.
        self.changelog = Changelog(settings, self.topics.conversations, self.db, self.offsets)
        #: Held while partitions are assigned or the broker is checked.
        self.assigning = asyncio.Lock()
        #: The assigned partitions of ``tasks``; set once its changelog is read back.
        self.partitions: dict[int, asyncio.Event] = {}
        self._model: Model | None = None
        self._client: httpx.AsyncClient | None = None
        #: The ``schedule.prompt`` runs (agents/schedule_runs.py).
        self.prompts = PromptRuns(self)
        #: The subjects' current facts (docs/memory.md, "Given to agents"), followed by the app.
        self.memory = Profiles.from_env(self.topics, os.environ if tool_env is None else tool_env)

    # -- state ----------------------------------------------------------------------

    async def assign(self, partitions: Iterable[int]) -> tuple[int, int]:
        """Partitions of ``tasks`` now ours: read each one's changelog partition
        from where this store last read it to its end (another process may have
        written it meanwhile), then resume the runs owed on it. Records of a
        partition wait until then. What the store holds of a changelog the
        broker no longer has (reset, recreated) is forgotten first, and read
        again. (records read, runs resumed)"""
        async with self.assigning:
            return await self._assign(set(partitions))

    async def check_broker(self) -> None:
        """Before a record is taken: a broker that is not the one the store was
        read from (restarted empty, replaced) is checked as at an assignment,
        and the partitions held are read again from it (stream/runtime/resets.py)."""
        if not self.partitions or not await self.changelog.moved():
            return
        async with self.assigning:
            mine = set(self.partitions)
            await self.revoke(mine)
            await self._assign(mine)

    async def _assign(self, mine: set[int]) -> tuple[int, int]:
        reset = await self.changelog.resets(mine)
        if reset:
            await self.revoke(reset)  # their runs stop; read again below
            gone = self.changelog.forget(reset)
            stale = [k for k, c in self.live.items() if c.partition in reset or c.partition is None]
            for key in stale:
                self.live.pop(key)
            log.warning("agents: forgot %d stored records of partitions %s; reading them "
                        "again from the broker", gone, sorted(reset))  # fmt: skip
        new = sorted(p for p in mine if p not in self.partitions)
        if not new:
            return 0, 0
        for partition in new:
            self.partitions[partition] = asyncio.Event()
        read = await self.changelog.read_back(new)
        for raw in read:
            self.live.pop(raw.decode(), None)  # what this process held may be older
        for partition in new:
            self.partitions[partition].set()
        return len(read), self._resume(set(new))

    def _resume(self, mine: set[int]) -> int:
        """Start every run owed on these partitions: of a conversation, whether
        just read back or already in the store (a run resumed once and cut short
        again before it wrote anything is owed still), or a prompt run; note
        when their open flow questions expire. The number of runs resumed."""
        resumed = 0
        for stored in self.db.values():
            data = orjson.loads(stored)
            if data.get("partition") not in mine:
                continue
            if data.get("kind") == PROMPT_RUN:
                resumed += self.prompts.resume(data)
                continue
            if data.get("flow_expires"):
                self.expiring[str(data["job_key"])] = from_iso(data["flow_expires"])
            if data.get("due") or data.get("flow_due"):
                self.start(str(data["job_key"]))
                resumed += 1
        return resumed

    async def revoke(self, partitions: Iterable[int]) -> int:
        """Partitions of ``tasks`` no longer ours: stop the runs on them (another
        process resumes them from the changelog) and forget what is held in
        memory. The number of runs stopped."""
        gone = set(partitions) & set(self.partitions)
        for partition in gone:
            del self.partitions[partition]
        if not gone:
            return 0
        keys = [k for k, c in self.live.items() if c.partition in gone or c.partition is None]
        stopping = [self.running.pop(k) for k in keys if k in self.running]
        for task in stopping:
            task.cancel()
        if stopping:
            await asyncio.gather(*stopping, return_exceptions=True)
        stopping += await self.prompts.stop(gone)
        if self.flush is not None:
            await self.flush()
        for key in keys:
            self.live.pop(key, None)
            self.expiring.pop(key, None)
        return sum(1 for t in stopping if t.cancelled())

    def load(self, key: str) -> Conversation:
        """The job's conversation: the live one, else the stored one, else new."""
        conv = self.live.get(key)
        if conv is not None:
            self.live.move_to_end(key)
            return conv
        raw = self.db.get(key.encode())
        conv = Conversation.from_json(orjson.loads(raw)) if raw else Conversation(key)
        restore_tracks(conv, self.db.get, self.flows.by_name)  # a large flow run's records
        self.live[key] = conv
        self._evict()
        return conv

    def _evict(self) -> None:
        """Drop the least recently used conversations beyond ``live_max``, but
        never one whose run is in flight or whose record is being taken (every
        change is in the store before it is acknowledged: :meth:`save`)."""
        excess = len(self.live) - self.live_max
        if excess <= 0:
            return
        for key in list(self.live):
            if excess <= 0:
                break
            run = self.running.get(key)
            if key == self.changing or (run is not None and not run.done()):
                continue
            del self.live[key]
            excess -= 1

    def reading(self, partition: int, behind: bool) -> None:
        """The stream is taking a record of this ``tasks`` partition (``behind``:
        more of it were fetched), or has taken one and is caught up."""
        event = self.idle.setdefault(partition, asyncio.Event())
        if behind:
            event.clear()
        else:
            event.set()

    async def settled(self, partition: int | None) -> None:
        """Wait until the records fetched of the job's ``tasks`` partition are
        taken (bounded: a stream that stalls does not hold a reply for good)."""
        event = self.idle.get(partition) if partition is not None else None
        if event is not None and not event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=30)

    async def save(self, conv: Conversation) -> None:
        """Changelog first (to the partition of the job's tasks), acknowledged;
        then the local store. A checkpoint over its bound drops the oldest turns
        first; :class:`CheckpointTooLarge` when that is not enough
        (docs/agents.md, "Output bounds")."""
        raw, dropped = fitted(conv.to_json(), self.checkpoint_bound)
        if dropped:
            del conv.turns[:dropped]
            log.warning("agents: %s: %d oldest turns dropped: the checkpoint is over %d bytes",
                        conv.job_key, dropped, self.checkpoint_bound)  # fmt: skip
        key = conv.job_key.encode()
        await self.save_records(conv)
        await self.produce(self.topics.conversations, key, raw, partition=conv.partition)
        self.db[key] = raw
        await self.save_records(conv, after=True)
        soonest = [t.expires_at() for t in conv.flows.values() if t.open_interrupt()]
        times = [t for t in soonest if t is not None]
        if times:
            self.expiring[conv.job_key] = min(times)
        else:
            self.expiring.pop(conv.job_key, None)

    async def save_records(self, conv: Conversation, *, after: bool = False) -> None:
        """The checkpoint records its flow runs owe (docs/flows.md, "Crash
        safety"): written before its record, or deleted (``after``) after it."""
        for key, value in owed_records(conv, after=after):
            await self.produce(self.topics.conversations, key, value, partition=conv.partition)
            if value is None:
                self.db.delete(key)
            else:
                self.db[key] = value

    async def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce a record, acknowledged when this returns. A record that
        cannot be written is logged, and the error raised (whoever produced it
        journals what it means: a run ends, a record is dead-lettered):
        :class:`OutputError`."""
        assert self.send is not None
        try:
            await self.send(topic, key, value, headers, partition)
        except Exception as exc:
            log.error("agents: %s: a record of %d bytes to %s cannot be written: %s: %s",
                      (key or b"").decode(errors="replace"), len(value or b""), topic,
                      type(exc).__name__, exc)  # fmt: skip
            raise OutputError(f"{topic}: {type(exc).__name__}: {exc}") from exc

    def count_run(self, reason: str) -> None:
        """A run ended (a job's or a prompt's): counted for the status line."""
        self.stats.runs += 1
        self.stats.ended[reason] = self.stats.ended.get(reason, 0) + 1

    async def dead_letter(self, where: Where, value: bytes | None, reason: str) -> None:
        """The record as it was read, to ``deadletter`` (docs/kafka.md, "Dead letters")."""
        letter = DeadLetter.of(
            where.topic, where.partition, where.offset, reason, to_iso(datetime.now(UTC)),
            where.timestamp_ms,
        )  # fmt: skip
        await self.produce(self.topics.deadletter, where.key, value, letter.headers(where.headers))

    async def publish(
        self, topic: Literal["inbox", "messages", "journal"], key: str, record: BaseModel
    ) -> None:
        """Produce a record of a run, acknowledged. An email to an address that is
        not one of the job's contacts is not published: it is journaled instead."""
        if isinstance(record, MessageRecord) and self._not_a_contact(record):
            self.stats.not_contacts += 1
            log.warning("agents: %s: not emailing %r: not a contact of the job", key,
                        record.contact)  # fmt: skip
            record = JournalMail(
                job_key=key, at=to_iso(self.clock()), direction="out", outcome="refused",
                message_id=record.message_id, address=(record.contact or "")[:ADDRESS_MAX] or None,
                detail="not a contact of the job: not sent",
            )  # fmt: skip
            topic = "journal"
        value = encode(record.compact() if isinstance(record, InboxEvent) else record)
        await self.produce(self.topics.name(topic), key.encode(), value)
        count_journal(record)  # model and tool calls: docs/operations.md, "Metrics"

    def _not_a_contact(self, record: MessageRecord) -> bool:
        """An outbound email whose address is not a contact of its job (whoever
        chose it): the agents never mail anyone else."""
        if record.direction != "out" or record.channel != "email":
            return False
        return not is_contact(self.load(record.job_key).contacts, record.contact)

    # -- records and runs -------------------------------------------------------------

    async def on_record(self, value: bytes | None, where: Where | None = None) -> None:
        """Take one record of ``tasks`` or ``messages`` (``where`` says which; a
        task record without it); start the run it owes. A record that is not of
        its topic's shape is dead-lettered, byte for byte, with the reason."""
        if where is not None:
            caught_up = self.partitions.get(where.partition)
            if caught_up is None:
                return  # revoked meanwhile: its new owner reads it
            await caught_up.wait()
        self.stats.records += 1
        record = await self._read(value, where)
        if record is None:
            return
        partition = where.partition if where is not None else None
        # each kind of record to its method (_TAKERS, below the class)
        try:
            await _TAKERS[type(record)](self, record, partition)
        except Exception as exc:  # one job's poison never stops the stream
            await self._not_taken(record, value, where, exc)
        finally:
            self.changing = None

    async def _not_taken(
        self, record: BaseModel, value: bytes | None, where: Where | None, exc: Exception
    ) -> None:
        """A record whose taking failed (docs/agents.md, "Output bounds"): the
        job's conversation is read back from its last checkpoint, as after a
        crash (its run in flight, stopped, resumes from there), and the record is
        dead-lettered byte for byte with the reason; the stream goes on."""
        self.stats.refused += 1
        job = str(getattr(record, "job_key", "") or "")
        reason = f"not taken: {type(exc).__name__}: {exc}"[:1000]
        log.error("agents: %s: a record of %s %s", job, where.topic if where else "tasks",
                  reason, exc_info=not isinstance(exc, CheckpointTooLarge))  # fmt: skip
        if job:
            await self._read_again(job)
        if where is None:
            raise exc
        await self.dead_letter(where, value, reason)

    async def _read_again(self, job: str) -> None:
        """Forget the job's conversation held in memory (a record may have
        changed it halfway); a run in flight is stopped and started again, to
        resume from the store."""
        run = self.running.pop(job, None)
        in_flight = run is not None and not run.done()
        if run is not None and in_flight:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            if self.flush is not None:
                await self.flush()
        self.live.pop(job, None)
        if in_flight:
            self.start(job)

    async def _read(self, value: bytes | None, where: Where | None) -> BaseModel | None:
        """The record, of its topic's shape; else None, and it is dead-lettered."""
        message = where is not None and where.topic == self.topics.messages
        try:
            if message:
                return MessageRecord.model_validate_json(value or b"")
            record: BaseModel = _TASKS.validate_json(value or b"")
            return record
        except ValidationError as exc:
            self.stats.refused += 1
            reason = f"not a {'message' if message else 'task'} record: "
            reason += first_error(exc, "value")
            log.warning("%s: %s", "messages" if message else "tasks", reason)
            if where is not None:
                await self.dead_letter(where, value, reason)
            return None

    def _conversation(self, job_key: str, partition: int | None) -> Conversation:
        """The job's conversation, noted as on the partition its record came on."""
        self.changing = job_key
        conv = self.load(job_key)
        if partition is not None:
            conv.partition = partition
        return conv

    async def _settle(self, conv: Conversation, owes: bool) -> None:
        """Checkpoint the conversation a record changed; start the run it owes."""
        await self.save(conv)
        if owes:
            self.start(conv.job_key)

    async def _take_message(self, record: MessageRecord, partition: int | None) -> None:
        """A person's message: an answer to a flow's open question, else a turn
        of the conversation."""
        if record.direction != "in":
            return  # what an agent said: written by us, delivered by its channel
        conv = self._conversation(record.job_key, partition)
        if record.message_id in conv.received:
            return  # re-delivered
        taken = self._answer(conv, record)
        if taken is None:  # a conversational flow's turn (docs/flows.md, "Conversational flows")
            taken = take_turn(conv, record, self.flows)
        await self._settle(conv, conv.receive(record) if taken is None else taken)

    async def _take_prompt(
        self, record: SchedulePromptTask | ScheduleCommandTask, partition: int | None
    ) -> None:
        """A schedule's run (docs/agents.md, "Scheduled prompts and heartbeats";
        docs/schedules.md, "Command jobs")."""
        await self.prompts.take(record, partition)

    async def _take_opened(self, record: TaskOpenedRecord, partition: int | None) -> None:
        """A task opened: its flow's run when its milestone names one, else the
        conversation agent's."""
        conv = self._conversation(record.job_key, partition)
        flow = self.flows.of(record.playbook_key, record.milestone)
        if flow:
            known = await self.memory.channel(record.subject, record.contacts)  # docs/flows.md
            inputs = self.flows.inputs(
                flow, record.subject, conv.turns, conv.remembered.get(flow), known
            )
            owes = conv.open_flow(record, flow, inputs)
            if owes and self.flows.conversational(flow):  # a run per message
                owes = first_turn(conv, conv.flows[record.milestone], record.at)
        else:
            owes = conv.apply(record)
        await self._settle(conv, owes)

    async def _take_closed(self, record: TaskClosedRecord, partition: int | None) -> None:
        """A task closed: its flow's run stops; else the conversation drops it."""
        conv = self._conversation(record.job_key, partition)
        if record.milestone not in conv.flows:
            await self._settle(conv, conv.apply(record))
            return
        track = conv.flows[record.milestone]
        if record.task_id not in conv.closed:
            conv.closed.append(record.task_id)
        conv.frontier = [m for m in conv.frontier if m != record.milestone]
        await self.flow_driver().stop(conv, track)
        await self._settle(conv, False)

    def _answer(self, conv: Conversation, record: MessageRecord) -> bool | None:
        """A person's message that answers a flow's open question
        (:func:`agents.conversation.take_answer`)."""
        return take_answer(conv, record, self.flows)

    async def tick(self, now: datetime | None = None) -> int:
        """Time passed: a flow run whose open question expired is stepped with a
        tick (the service has no tick stream: its timer calls this). The number
        of jobs ticked."""
        now = now or self.clock()
        ticked = 0
        for key, when in list(self.expiring.items()):
            if when > now:
                continue
            conv = self.load(key)
            if conv.partition is not None and conv.partition not in self.partitions:
                self.expiring.pop(key, None)
                continue
            queued = False
            for track in conv.flows.values():
                expires = track.expires_at()
                if (
                    track.open_interrupt()
                    and expires is not None
                    and expires <= now
                    and not any(q.get("kind") == "tick" for q in track.queued)
                ):
                    track.queued.append(tick_input())
                    queued = True
            self.expiring.pop(key, None)
            if queued:
                await self.save(conv)
                self.start(key)
                ticked += 1
        await self.prompts.sweep(now)  # reported prompt runs past their time
        return ticked

    def start(self, key: str) -> None:
        """Run the job's agent now, or right after its run in flight."""
        task = self.running.get(key)
        if task is not None and not task.done():
            return  # the run in flight sees the new task; due stays set for another
        self.running[key] = asyncio.create_task(self._runs(key), name=f"agents:{key}")
        self.running[key].add_done_callback(_log_failure)

    async def _runs(self, key: str) -> None:
        async with self.limit:
            conv = self.load(key)
            outbox = Outbox(self.publish, self.save)
            while True:
                track = conv.owed_flow()
                if track is not None:
                    await self.flow_driver().drive(conv, track)
                    continue
                if conv.closing:
                    await self.settled(conv.partition)  # a task the decision opens comes first
                    if not conv.tasks and not conv.flows_open():
                        self.count_run((await self._run(conv, outbox, closing=True)).reason)
                        continue
                    conv.closing = False  # the new frontier's turn (or its flow) answers instead
                if not (conv.due and conv.open_tasks()):
                    break
                end = await self._run(conv, outbox)
                self.count_run(end.reason)
            if conv.inputs > conv.ran and not conv.tasks:  # owed, but nothing is open
                conv.ran = conv.inputs
                await self.save(conv)

    async def _run(self, conv: Conversation, outbox: Outbox, *, closing: bool = False) -> RunEnd:
        """One run of the conversation agent (its closing turn: docs/agents.md,
        "The closing turn"), checkpointed. A run whose output or checkpoint
        cannot be written ends there, journaled (docs/agents.md, "Output
        bounds"): the job answers its next message."""
        try:
            runner = self.runner()
            end = await (runner.close(conv, outbox) if closing else runner.run(conv, outbox))
            await self.save(conv)
        except Exception as exc:
            return await self._run_failed(conv, exc)
        return end

    async def _run_failed(self, conv: Conversation, exc: Exception) -> RunEnd:
        """End the run that failed: its tape is dropped (its non-idempotent
        calls in flight stay pending), the inputs it saw are answered, and a
        ``journal.run`` record and a log line say why."""
        run_id = conv.active or f"{conv.job_key}#{conv.runs}"
        reason = "checkpoint_too_large" if isinstance(exc, CheckpointTooLarge) else "output_failed"
        log.error("agents: %s: run %s ended (%s): %s: %s", conv.job_key, run_id, reason,
                  type(exc).__name__, exc, exc_info=reason == "output_failed")  # fmt: skip
        conv.active = None
        conv.tape = []
        conv.ran = conv.inputs
        conv.closing = False
        end = RunEnd(reason, 0, 0, 0)
        try:
            await self.save(conv)
            record = JournalRun(
                job_key=conv.job_key, run_id=run_id, agent=CONVERSATION, at=to_iso(self.clock()),
                ended=reason, turns=0, tool_calls=0, tokens=0, replayed=0,
            )  # fmt: skip
            await self.publish("journal", conv.job_key, record)
        except Exception as again:  # the broker refuses everything: logged above and here
            log.error("agents: %s: run %s's end not written: %s", conv.job_key, run_id, again)
        return end

    def runner(self) -> Runner:
        """The runner (its HTTP clients are made on first use, in the service's loop)."""
        if self._model is None:
            self._model = Model(self.model_settings)
        if self._client is None:
            self._client = httpx.AsyncClient()
        # MCP tools are offered as their servers list them now (docs/agents.md,
        # "MCP servers"); with none running, none is offered.
        if self.mcp is not None:
            catalog = self.mcp.catalog(self.catalog)
        else:
            catalog = (
                replace(self.catalog, mcp_listed={}) if self.catalog.mcp_servers else self.catalog
            )
        executor = Executor(
            catalog, self._client, self.tool_env, max_response=self.max_tool_response,
            mcp=self.mcp, workspaces=self.workspaces,
        )  # fmt: skip
        return Runner(
            catalog, self._model, executor, history=self.history, guarded=self.flows.guarded,
            memory=self.memory,
        )  # fmt: skip

    def flow_driver(self) -> FlowDriver:
        """What runs a flow's actions and steps it (docs/flows.md, "Flows in the
        agents service")."""
        if self.execute is None and self.flows.by_name:
            self.execute = self._flow_executor()
        return FlowDriver(
            self.flows,
            self.execute,
            self.publish,
            self.save,
            clock=self.clock,
            save_records=self.save_records,
            inputs_of=self._flow_inputs,
        )

    async def _flow_inputs(self, conv: Conversation, flow: str) -> dict[str, Any]:
        """What a run of ``flow`` starts with now (a conversational flow's next
        run): ``Flows.inputs`` with the subject's current facts."""
        known = await self.memory.channel(conv.subject, conv.contacts)
        return self.flows.inputs(flow, conv.subject, conv.turns, conv.remembered.get(flow), known)

    def _flow_executor(self) -> Execute:
        if self._model is None:
            self._model = Model(self.model_settings)
        if self._client is None:
            self._client = httpx.AsyncClient()
        tools = Executor(
            self.catalog, self._client, self.tool_env, max_response=self.max_tool_response,
            mcp=self.mcp,
            workspaces=self.workspaces,
        )  # fmt: skip
        registry = load_registry(self.tool_env)
        # The gateway's uploads, under the same data folder (docs/flows.md, "A model
        # reads a file").
        files = FileStore(self.settings.file_store_dir, self.settings.file_max_bytes,
                          self.settings.file_types)  # fmt: skip
        flow_executor = FlowExecutor(self._model, tools, registry, self.publish, files=files)
        self.flow_calls = flow_executor.calls
        return flow_executor.execute

    async def start_mcp(self) -> None:
        """Start the catalog's MCP servers, once (docs/agents.md, "MCP servers").
        The SDK is imported only when one is configured (a URL read from an unset
        variable is not): every process of the service would pay for it."""
        if self.mcp is not None or self._mcp_tried:
            return
        self._mcp_tried = True
        servers = self.catalog.mcp_servers
        unset = [name for name, spec in servers.items() if not spec.configured(self.tool_env)]
        if unset:
            log.warning("agents: MCP servers not started, their url is empty: %s", ", ".join(unset))
        if len(unset) < len(servers):
            from agents.tools.mcp import McpServers

            self.mcp = McpServers(self.catalog, self.tool_env)
            await self.mcp.start()

    async def close(self) -> None:
        """Wait for runs in flight; close the clients, the MCP servers and the store."""
        runs = [*self.running.values(), *self.prompts.running.values()]
        if runs:
            await asyncio.gather(*runs, return_exceptions=True)
        if self.mcp is not None:
            await self.mcp.close()
        if self._model is not None:
            await self._model.close()
        if self._client is not None:
            await self._client.aclose()
        await self.changelog.close()
        self.disk.close()


#: The method that takes each kind of record: a person's or agent's message,
#: and the four kinds of ``tasks`` records (topics' ``TaskRecord``).
_TAKERS: dict[type[BaseModel], Callable[[AgentService, Any, int | None], Awaitable[None]]] = {
    MessageRecord: AgentService._take_message,
    SchedulePromptTask: AgentService._take_prompt,
    ScheduleCommandTask: AgentService._take_prompt,
    TaskOpenedRecord: AgentService._take_opened,
    TaskClosedRecord: AgentService._take_closed,
}


def _log_failure(task: asyncio.Task[None]) -> None:
    """A job's runs that ended by an error no run caught: logged, never silent
    (the job's next record starts its runs again)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("agents: %s failed", task.get_name(), exc_info=task.exception())


def data_path(settings: Settings) -> Path:
    """Where the service keeps its store."""
    return settings.data_dir / "agents"
