"""The agents service's state: the conversations, their store and the clients
its runs use (docs/agents.md, "The agents service").

Each job's conversation lives in the service's RocksDB store, and every write
to it is first produced to the compacted ``conversations`` topic (its
changelog), on the partition of the job's tasks, and acknowledged. (A Faust
table cannot hold it: Faust writes a table only from inside the handler of an
event, and a run must write its checkpoints while it runs, beside other jobs'
runs.) At most ``live_max`` conversations are held in memory as well.

The methods that change this state are in the modules beside this one
(:mod:`agents.service`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx2
import orjson
from compiler import to_iso
from pydantic import BaseModel
from stream.runtime.config import Settings
from stream.runtime.metrics import count_journal
from topics import DeadLetter, Headers, InboxEvent, JournalMail, MessageRecord, Topics, encode
from topics.mail import ADDRESS_MAX

from agents.catalog import Catalog
from agents.contacts import is_contact
from agents.errors import OutputError
from agents.flows.checkpoint import owed_records
from agents.flows.service import Execute, Flows, restore_tracks
from agents.memory import Profiles
from agents.model import Model, ModelSettings
from agents.publish import Send
from agents.run import Conversation, Runner
from agents.schedule_runs import PromptRuns
from agents.stores import CHECKPOINT_MAX_BYTES, Changelog, Disk, fitted
from agents.tools.executor import Executor, tool_response_bound
from agents.workspace.worktree import Workspaces

if TYPE_CHECKING:
    from agents.tools.mcp import McpServers


__all__ = ["AGENT_CONCURRENCY", "AgentStats", "ServiceState", "Taken", "Where", "data_path"]

#: ``LEMONGRAPH_AGENT_CONCURRENCY``'s default: runs of different jobs at once. A
#: run waits on the model most of its time (seconds per call with a hosted one),
#: so 8 held a burst of tasks in a queue; 64 took a burst of 1,000 as fast or
#: faster on the stand-in (benchmarks/README.md, "The agents service").
AGENT_CONCURRENCY = 64

#: The service's one logger, named for the package whichever of its modules
#: logs: a log line's source reads ``agents.service``, as it did before the split.
log = logging.getLogger("agents.service")


@dataclass(frozen=True)
class Where:
    """Where a record was read, for its dead letter."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    headers: Headers


@dataclass(frozen=True)
class Taken:
    """A record taken in a batch whose checkpoint is not written yet: what its
    dead letter needs if it cannot be."""

    record: BaseModel
    value: bytes | None
    where: Where | None
    #: The context it was taken in (its trace): its checkpoint and dead letter
    #: are written in it.
    context: contextvars.Context


@dataclass
class AgentStats:
    """What the service did, for its status line."""

    records: int = 0
    runs: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    #: Emails not published: their address is not a contact of the job.
    not_contacts: int = 0


class ServiceState:
    """The conversations, their store, the runs in flight and the clients."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        model_settings: ModelSettings,
        *,
        concurrency: int = AGENT_CONCURRENCY,
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
        #: Take records in batches (the app's stream does; a direct caller of
        #: ``on_record`` does not): a record's checkpoint is written with the
        #: others of its batch, and the runs they owe start once those are
        #: acknowledged (agents/service/intake.py, :meth:`Intake.stored`).
        self.batched = False
        #: In a batch: the conversations changed and not yet checkpointed, each
        #: with the record that changed it (a job's second record stores the
        #: first one's change before it is taken): its dead letter if the
        #: checkpoint cannot be written. They are never dropped from memory.
        self.unsaved: dict[str, tuple[Conversation, Taken]] = {}
        #: In a batch: the jobs owed a run once their checkpoint is written, each
        #: with the context its record was taken in (its trace: ``Taken.context``).
        self.owed: dict[str, contextvars.Context] = {}
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
        self._client: httpx2.AsyncClient | None = None
        #: The ``schedule.prompt`` runs (agents/schedule_runs.py).
        self.prompts = PromptRuns(self)
        #: The subjects' current facts (docs/memory.md, "Given to agents"), followed by the app.
        self.memory = Profiles.from_env(self.topics, os.environ if tool_env is None else tool_env)

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
        never one whose run is in flight, whose record is being taken, or whose
        checkpoint waits for its batch (every change is in the store before it is
        acknowledged: :meth:`save`)."""
        excess = len(self.live) - self.live_max
        if excess <= 0:
            return
        for key in list(self.live):
            if excess <= 0:
                break
            run = self.running.get(key)
            if key == self.changing or key in self.unsaved or (run is not None and not run.done()):
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
            conv.forget(dropped)
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
        self,
        topic: Literal["inbox", "messages", "journal", "memory-facts"],
        key: str,
        record: BaseModel,
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

    def warm(self) -> None:
        """Make the model's client before the first record (the service calls
        the model: its import is paid at start, not by the first runs)."""
        self._clients()[0].warm()

    def _clients(self) -> tuple[Model, httpx2.AsyncClient]:
        """The model and the tools' HTTP client, made on first use (in the
        service's loop) and shared by every run."""
        if self._model is None:
            self._model = Model(self.model_settings)
        if self._client is None:
            self._client = httpx2.AsyncClient()
        return self._model, self._client

    def runner(self) -> Runner:
        """The runner (its HTTP clients are made on first use, in the service's loop)."""
        model, client = self._clients()
        # MCP tools are offered as their servers list them now (docs/agents.md,
        # "MCP servers"); with none running, none is offered.
        if self.mcp is not None:
            catalog = self.mcp.catalog(self.catalog)
        else:
            catalog = (
                replace(self.catalog, mcp_listed={}) if self.catalog.mcp_servers else self.catalog
            )
        executor = Executor(
            catalog, client, self.tool_env, max_response=self.max_tool_response,
            mcp=self.mcp, workspaces=self.workspaces,
        )  # fmt: skip
        return Runner(
            catalog, model, executor, history=self.history, guarded=self.flows.guarded,
            memory=self.memory,
        )  # fmt: skip

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


def data_path(settings: Settings) -> Path:
    """Where the service keeps its store."""
    return settings.data_dir / "agents"
