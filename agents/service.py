"""``lemongraph agents``: the service that turns tasks into conversations
(docs/agents.md, "The agents service").

A Faust app with its own consumer group reads ``tasks``. Each job's
conversation lives in the service's RocksDB store, and every write to it is
first produced to the compacted ``conversations`` topic (its changelog) and
acknowledged, so a restarted service, here or on another machine, reads it back.
(A Faust table cannot hold it: Faust writes a table only from inside the handler
of an event, and a run must write its checkpoints while it runs, beside other
jobs' runs.)

A ``task.opened`` owes the job a run; runs of different jobs go concurrently,
up to ``LEMONGRAPH_AGENT_CONCURRENCY``, one at a time per job. A conversation
whose run was owed when the service stopped (``due``) is run again when the
service starts: its tool calls take effect once (docs/agents.md, "Tools as
evidence").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import faust
import httpx
import orjson
from compiler import to_iso
from pydantic import BaseModel, TypeAdapter, ValidationError
from rocksdict import Rdict
from stream.config import Settings
from stream.faust_tuning import (
    FETCH_MAX_WAIT_MS,
    FETCH_MAX_WAIT_MS_TANSU,
    common_settings,
    set_fetch_max_wait,
)
from stream.kafka import bootstrap_of, read_topic
from topics import DeadLetter, Headers, InboxEvent, TaskRecord, Topics, encode

from .catalog import Catalog
from .executor import Executor
from .model import Model, ModelSettings
from .run import Conversation, Outbox, Runner

__all__ = ["AgentService", "AgentStats", "build_service"]

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


class AgentService:
    """The conversations, their store, and the runs in flight."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        model_settings: ModelSettings,
        *,
        concurrency: int = 8,
        history: int = 20,
        tool_env: Mapping[str, str] | None = None,
        send: Callable[[str, bytes | None, bytes | None, Headers | None], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.catalog = catalog
        self.model_settings = model_settings
        self.history = history
        self.tool_env = tool_env
        self.limit = asyncio.Semaphore(concurrency)
        self.live: dict[str, Conversation] = {}
        self.running: dict[str, asyncio.Task[None]] = {}
        self.stats = AgentStats()
        self.send = send
        folder = data_path(settings)
        folder.mkdir(parents=True, exist_ok=True)
        self.db = Rdict(str(folder / "conversations"))
        self._model: Model | None = None
        self._client: httpx.AsyncClient | None = None
        self._ready: asyncio.Event | None = None

    def ready(self) -> asyncio.Event:
        """Set once the changelog has been read back (records wait for it)."""
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    # -- state ----------------------------------------------------------------------

    async def recover(self) -> int:
        """Read the changelog into the store (the latest state of each job)."""
        count = 0
        async for record in read_topic(
            bootstrap_of(self.settings.kafka_url or ""), self.topics.conversations
        ):
            if record.key is None:
                continue
            if record.value is None:
                self.db.delete(record.key)
            else:
                self.db[record.key] = record.value
            count += 1
        return count

    def load(self, key: str) -> Conversation:
        """The job's conversation: the live one, else the stored one, else new."""
        conv = self.live.get(key)
        if conv is not None:
            return conv
        raw = self.db.get(key.encode())
        conv = Conversation.from_json(orjson.loads(raw)) if raw else Conversation(key)
        self.live[key] = conv
        return conv

    async def save(self, conv: Conversation) -> None:
        """Changelog first, acknowledged; then the local store."""
        raw = orjson.dumps(conv.to_json())
        key = conv.job_key.encode()
        await self._send(self.topics.conversations, key, raw)
        self.db[key] = raw

    async def _send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None = None
    ) -> None:
        assert self.send is not None
        await self.send(topic, key, value, headers)

    async def dead_letter(self, where: Where, value: bytes | None, reason: str) -> None:
        """The record as it was read, to ``deadletter`` (docs/kafka.md, "Dead letters")."""
        letter = DeadLetter.of(
            where.topic, where.partition, where.offset, reason, to_iso(datetime.now(UTC)),
            where.timestamp_ms,
        )  # fmt: skip
        await self._send(self.topics.deadletter, where.key, value, letter.headers(where.headers))

    async def publish(
        self, topic: Literal["inbox", "messages", "journal"], key: str, record: BaseModel
    ) -> None:
        """Produce a record of a run, acknowledged."""
        value = encode(record.compact() if isinstance(record, InboxEvent) else record)
        await self._send(self.topics.name(topic), key.encode(), value)

    # -- records and runs -------------------------------------------------------------

    async def on_record(self, value: bytes | None, where: Where | None = None) -> None:
        """Take one ``tasks`` record; start the run it owes. A record that is not
        a task record is dead-lettered, byte for byte, with the reason."""
        await self.ready().wait()
        self.stats.records += 1
        try:
            record = _TASKS.validate_json(value or b"")
        except ValidationError as exc:
            self.stats.refused += 1
            first = exc.errors()[0]
            reason = f"not a task record: {'.'.join(map(str, first['loc'])) or 'value'}: "
            reason += first["msg"]
            log.warning("tasks: %s", reason)
            if where is not None:
                await self.dead_letter(where, value, reason)
            return
        conv = self.load(record.job_key)
        owes = conv.apply(record)
        await self.save(conv)
        if owes:
            self.start(conv.job_key)

    def resume_due(self) -> int:
        """Start every stored conversation whose run was owed (cut short by a stop)."""
        started = 0
        for key, raw in self.db.items():
            data = orjson.loads(raw)
            if data.get("due"):
                self.start(key.decode() if isinstance(key, bytes) else str(key))
                started += 1
        return started

    def start(self, key: str) -> None:
        """Run the job's agent now, or right after its run in flight."""
        task = self.running.get(key)
        if task is not None and not task.done():
            return  # the run in flight sees the new task; due stays set for another
        self.running[key] = asyncio.create_task(self._runs(key), name=f"agents:{key}")

    async def _runs(self, key: str) -> None:
        async with self.limit:
            conv = self.load(key)
            while conv.due and conv.open_tasks():
                end = await self.runner().run(conv, Outbox(self.publish, self.save))
                await self.save(conv)
                self.stats.runs += 1
                self.stats.ended[end.reason] = self.stats.ended.get(end.reason, 0) + 1
            if conv.due:  # owed, but nothing is open any more
                conv.ran = conv.opened
                await self.save(conv)

    def runner(self) -> Runner:
        """The runner (its HTTP clients are made on first use, in the service's loop)."""
        if self._model is None:
            self._model = Model(self.model_settings)
        if self._client is None:
            self._client = httpx.AsyncClient()
        executor = Executor(self.catalog, self._client, self.tool_env)
        return Runner(self.catalog, self._model, executor, history=self.history)

    async def close(self) -> None:
        """Wait for runs in flight; close the clients and the store."""
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        if self._model is not None:
            await self._model.close()
        if self._client is not None:
            await self._client.aclose()
        self.db.close()


def build_service(
    settings: Settings,
    catalog: Catalog,
    model_settings: ModelSettings,
    *,
    concurrency: int,
    history: int = 20,
    tool_env: Mapping[str, str] | None = None,
    tansu: bool = False,
    say: Callable[[str], None] = print,
) -> tuple[faust.App, AgentService]:
    """The Faust app that runs the service."""
    # Tansu holds a fetch for its whole wait: keep it short there (stream/faust_tuning.py).
    set_fetch_max_wait(FETCH_MAX_WAIT_MS_TANSU if tansu else FETCH_MAX_WAIT_MS)
    options = common_settings(
        settings.kafka_url, data_path(settings) / "faust", settings.partitions, tansu
    )
    topics = Topics(settings.topic_prefix)
    app = faust.App(f"{settings.topic_prefix}agents", **options)
    service = AgentService(
        settings, catalog, model_settings, concurrency=concurrency, history=history,
        tool_env=tool_env,
    )  # fmt: skip

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Headers | None
    ) -> None:
        producer = app.producer
        sent = await producer.send(
            topic, key, value, partition=None, timestamp=None, headers=headers
        )
        await sent

    service.send = send
    source = app.topic(topics.tasks, key_type=bytes, value_type=bytes)

    @app.task  # type: ignore[untyped-decorator]
    async def start() -> None:
        recovered = await service.recover()
        service.ready().set()
        resumed = service.resume_due()
        say(
            f"agents: ready (group {app.conf.id}, {recovered} conversation records read back, "
            f"{resumed} runs resumed)"
        )

    @app.agent(source)
    async def tasks(stream: Any) -> None:
        async for event in stream.events():
            m = event.message
            stamp = m.timestamp
            where = Where(
                m.topic, m.partition, m.offset,
                round(stamp * 1000) if stamp is not None else -1,
                m.key, _header_list(m.headers),
            )  # fmt: skip
            await service.on_record(event.value, where)

    @app.timer(10.0)  # type: ignore[untyped-decorator]
    async def status() -> None:
        s = service.stats
        ended = ", ".join(f"{k} {v}" for k, v in sorted(s.ended.items())) or "none"
        say(f"agents: {s.records} task records, {s.runs} runs (ended: {ended})")

    return app, service


def _header_list(headers: Any) -> Headers:
    """Faust gives headers as a list of pairs or a mapping."""
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(n), bytes(v or b"")) for n, v in pairs]


def data_path(settings: Settings) -> Path:
    """Where the service keeps its store."""
    return settings.data_dir / "agents"
