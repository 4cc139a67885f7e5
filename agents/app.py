"""The agents service's Faust app (docs/agents.md, "The agents service"): the
app, its stream of ``tasks`` and ``messages``, and the hooks Faust calls, each a
named method of :class:`ServiceHooks`. What the service does with a record is
:class:`agents.service.AgentService`'s."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import faust
from stream.runtime.config import Settings
from stream.runtime.faust_tuning import (
    common_settings,
    fetch_max_wait,
    set_fetch_max_wait,
)
from stream.runtime.kafka import bootstrap_of
from stream.runtime.processes import dump_tasks_on_signal
from stream.runtime.tracing import resumed, with_current
from topics import Headers, Topics

from agents.catalog import Catalog
from agents.coding.watch import WATCH_EVERY, watch_worktrees
from agents.flows.service import load_flows
from agents.model import ModelSettings
from agents.reload import CatalogReload
from agents.service import AgentService, Where, data_path

__all__ = ["BATCH_WAIT", "TAKE_AT_ONCE", "ServiceHooks", "build_service"]

log = logging.getLogger("agents.service")

#: The most records one batch of the stream takes before its checkpoints are
#: written and its runs start (agents/service/intake.py).
TAKE_AT_ONCE = 500
#: How long an open batch waits for its next record before it ends (s).
BATCH_WAIT = 0.005


def build_service(
    settings: Settings,
    catalog: Catalog,
    model_settings: ModelSettings,
    *,
    concurrency: int,
    prompt_concurrency: int = 4,
    history: int = 20,
    tool_env: Mapping[str, str] | None = None,
    tansu: bool = False,
    say: Callable[[str], None] = print,
    live: int = 1000,
    reload_every: float = 0.0,
) -> tuple[faust.App, AgentService]:
    """The Faust app that runs the service (with ``reload_every``, it watches
    its playbooks folder that often: agents/reload.py)."""
    # Tansu holds a fetch for its whole wait: keep it short there (stream/runtime/faust_tuning.py).
    set_fetch_max_wait(fetch_max_wait(tansu))
    options = common_settings(
        settings.kafka_url,
        data_path(settings) / "faust",
        settings.partitions,
        tansu,
        settings.kafka_security,
        settings.kafka_compression,
    )
    topics = Topics(settings.topic_prefix)
    app = faust.App(f"{settings.topic_prefix}agents", **options)
    flows = load_flows(settings.playbooks_dir, catalog, say)
    if flows.by_milestone:
        count = len(flows.by_milestone)
        say(f"agents: {count} milestones run by flows ({len(flows.by_name)} flows)")
    service = AgentService(
        settings, catalog, model_settings, concurrency=concurrency,
        prompt_concurrency=prompt_concurrency, history=history, tool_env=tool_env,
        flows=flows, live=live,
    )  # fmt: skip

    hooks = ServiceHooks(app, service, (topics.tasks, topics.messages), say)
    service.send = hooks.send
    service.flush = hooks.flush
    app.task(hooks.ready)
    app.task(hooks.memory)  # the subjects' facts: docs/memory.md, "Given to agents"
    service.memory.followed = True  # a run waits for its first read to the end
    app.on_partitions_revoked.connect(hooks.on_revoked)
    app.on_partitions_assigned.connect(hooks.on_assigned)
    app.on_before_shutdown.connect(hooks.on_shutdown)
    # One stream of both topics (co-partitioned: a job's tasks and messages share
    # a partition number), so a job's records are taken in one order.
    source = app.topic(topics.tasks, topics.messages, key_type=bytes, value_type=bytes)
    app.agent(source)(hooks.tasks)
    # The service reads no tick stream: this timer steps a flow whose open
    # question expired (docs/flows.md, "Flows in the agents service").
    app.timer(max(0.1, settings.tick_interval))(hooks.flow_ticks)
    app.timer(10.0)(hooks.status)
    # The worktrees of coding jobs waiting at a checkpoint: a change is said on
    # the journal, and the gateway refuses an answer meanwhile (docs/coding.md,
    # "A changed worktree: the 409").
    app.timer(WATCH_EVERY)(hooks.worktrees)
    if reload_every > 0:  # docs/operations.md, "Reloading"
        app.timer(reload_every, name="reload")(CatalogReload(service, say).poll)
    return app, service


class ServiceHooks:
    """What the Faust app calls, each a named method: the producer the service
    sends with, the partition signals, the stream of ``tasks`` and ``messages``
    records, and the timers."""

    def __init__(
        self,
        app: faust.App,
        service: AgentService,
        ours: tuple[str, str],
        say: Callable[[str], None],
    ) -> None:
        self.app = app
        self.service = service
        #: The topics whose partitions are the service's (``tasks``, ``messages``).
        self.ours = ours
        self.say = say
        #: The last status line said.
        self.said = ""

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        partition: int | None,
    ) -> None:
        """Produce, acknowledged when this returns."""
        # The current span's trace goes on in the record's headers, when the
        # service traces (docs/operations.md, "Tracing").
        sent = await self.app.producer.send(
            topic, key, value, partition=partition, timestamp=None, headers=with_current(headers)
        )
        await sent

    async def flush(self) -> None:
        await self.app.producer.flush()

    async def ready(self) -> None:
        dump_tasks_on_signal()  # docs/operations.md, "A process that seems stuck"
        self.service.warm()  # the model's client, before the first task waits for it
        # What start-up made (Faust, openai's and pydantic's types, the catalog)
        # lives as long as the process: out of the collector's sight, a full
        # collection under a burst took 15-30 ms instead of 119-147
        # (benchmarks/README.md, "The agents service").
        gc.collect()
        gc.freeze()
        self.say(f"agents: ready (group {self.app.conf.id})")

    async def memory(self) -> None:
        """Follow the ``memory`` topic into the service's read model of it."""
        settings = self.service.settings
        assert settings.kafka_url is not None
        await self.service.memory.follow(
            bootstrap_of(settings.kafka_url), settings.kafka_security, self._stopping
        )

    def _stopping(self) -> bool:
        return bool(self.app.should_stop)

    async def on_revoked(self, sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        [revoked] = args
        service = self.service
        stopped = await service.revoke(tp.partition for tp in revoked if tp.topic in self.ours)
        if stopped:
            self.say(
                f"agents: partitions revoked: {stopped} runs stopped (their new owner resumes them)"
            )

    async def on_assigned(self, sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        [assigned] = args
        service = self.service
        mine = {tp.partition for tp in assigned if tp.topic in self.ours}
        began = time.monotonic()
        await service.revoke(p for p in list(service.partitions) if p not in mine)
        read, resumed = await service.assign(mine)
        self.say(
            f"agents: partitions {sorted(mine)} assigned: {read} conversation records read "
            f"back, {resumed} runs resumed ({time.monotonic() - began:.1f} s)"
        )

    async def tasks(self, stream: Any) -> None:
        """The Faust agent: the records of the stream, with where each was read,
        in batches: a batch ends when no record is waiting, when none comes
        within ``BATCH_WAIT`` s, or at ``TAKE_AT_ONCE``; then its checkpoints are
        written together, its runs start, and its records are acknowledged
        (docs/agents.md, "Taking a burst"). A batch never waits open for a record
        that may not come: a rebalance empties the stream's queue and then waits
        for every record handed out to be acknowledged."""
        service = self.service
        await service.start_mcp()  # before the first run: docs/agents.md, "MCP servers"
        service.batched = True
        manual = stream.noack()  # a record is acknowledged once its checkpoint is written
        waiting = manual.channel.queue
        records = manual.events().__aiter__()
        batch: list[Any] = []
        coming: asyncio.Future[Any] | None = None
        try:
            while True:
                if coming is None:
                    coming = asyncio.ensure_future(records.__anext__())
                if batch and not (await asyncio.wait({coming}, timeout=BATCH_WAIT))[0]:
                    await self._taken(manual, batch)  # none came: the batch ends
                    batch = []
                try:
                    event = await coming
                except StopAsyncIteration:
                    break
                finally:
                    if coming.done():
                        coming = None
                await self._take(event)
                batch.append(event)
                if len(batch) >= TAKE_AT_ONCE or waiting.empty():
                    await self._taken(manual, batch)
                    batch = []
        finally:
            if coming is not None:
                coming.cancel()

    async def _take(self, event: Any) -> None:
        """One record of the stream, with where it was read. Whatever goes wrong
        is logged and the record goes on with its batch: a record never stays
        unacknowledged (a rebalance would wait for it for good)."""
        service = self.service
        try:
            m = event.message
            stamp = m.timestamp
            where = Where(
                m.topic, m.partition, m.offset,
                round(stamp * 1000) if stamp is not None else -1,
                m.key, _header_list(m.headers),
            )  # fmt: skip
            if m.topic == self.ours[0]:
                service.reading(m.partition, True)
            if not service.unsaved:
                await service.check_broker()  # a broker reset under us: docs/operations.md
            # The trace the record carries is the current one while it is taken:
            # a run it starts is that trace's (docs/operations.md, "Tracing").
            with resumed("agents", where.headers):
                await service.on_record(event.value, where)
        except Exception as exc:  # the broker refuses even the dead letter: logged
            log.error("agents: a record of %s not taken and not dead-lettered: %s: %s",
                      getattr(event.message, "topic", "?"), type(exc).__name__, exc,
                      exc_info=True)  # fmt: skip

    async def _taken(self, stream: Any, batch: list[Any]) -> None:
        """A batch's end: its checkpoints written and its runs started
        (:meth:`AgentService.stored`), its records acknowledged, and each of its
        ``tasks`` partitions said caught up or not."""
        try:
            await self.service.stored()
        except Exception as exc:  # stored() logs and goes on; this is a bug's last net
            log.error("agents: a batch's checkpoints: %s: %s", type(exc).__name__, exc,
                      exc_info=True)  # fmt: skip
        for event in batch:
            await stream.ack(event)
            m = event.message
            if m.topic == self.ours[0]:
                self.service.reading(m.partition, m.offset + 1 < self._highwater(m))

    def _highwater(self, message: Any) -> int:
        """The end of the message's partition as last fetched (0: not known)."""
        try:
            return int(self.app.consumer.highwater(message.tp) or 0)
        except (AttributeError, KeyError, TypeError, AssertionError):
            return 0

    async def on_shutdown(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        """The worker stops: the MCP servers are closed (a stdio one's process ends)."""
        if self.service.mcp is not None:
            await self.service.mcp.close()

    async def flow_ticks(self) -> None:
        await self.service.tick()

    async def worktrees(self) -> None:
        await watch_worktrees(self.service.workspaces, self.service.publish)

    async def status(self) -> None:
        """The status line, when it changed since the last one (quiet when idle:
        docs/operations.md, "Metrics")."""
        s = self.service.stats
        ended = ", ".join(f"{k} {v}" for k, v in sorted(s.ended.items())) or "none"
        line = f"agents: {s.records} task records, {s.runs} runs (ended: {ended})"
        if line != self.said:
            self.said = line
            self.say(line)


def _header_list(headers: Any) -> Headers:
    """Faust gives headers as a list of pairs or a mapping."""
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(n), bytes(v or b"")) for n, v in pairs]
