"""The agents service's runs (docs/agents.md, "The agents service").

A ``task.opened`` owes the job a run; runs of different jobs go concurrently,
up to ``LEMONGRAPH_AGENT_CONCURRENCY``, one at a time per job; scheduled
prompt runs have their own bound, ``LEMONGRAPH_PROMPT_CONCURRENCY``, so a slow
schedule never delays a person (docs/agents.md, "Scheduled prompts and heartbeats").
A flow's run is driven by :class:`agents.flows.service.FlowDriver`, and a flow
question that expires is ticked (:meth:`Runs.tick`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from compiler import to_iso
from stream.runtime.filestore import FileStore
from topics import JournalRun

from agents.catalog import CONVERSATION
from agents.flows.executor import FlowExecutor
from agents.flows.handlers import load_registry
from agents.flows.service import Execute, FlowDriver, tick_input
from agents.run import Conversation, Outbox, RunEnd
from agents.service.state import ServiceState, log
from agents.stores import CheckpointTooLarge
from agents.tools.executor import Executor

__all__ = ["Runs"]


class Runs(ServiceState):
    """Starting and driving a job's runs, of its conversation agent or flows."""

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
        model, client = self._clients()
        tools = Executor(
            self.catalog, client, self.tool_env, max_response=self.max_tool_response,
            mcp=self.mcp,
            workspaces=self.workspaces,
        )  # fmt: skip
        registry = load_registry(self.tool_env)
        # The gateway's uploads, under the same data folder (docs/flows.md, "A model
        # reads a file").
        files = FileStore(self.settings.file_store_dir, self.settings.file_max_bytes,
                          self.settings.file_types)  # fmt: skip
        flow_executor = FlowExecutor(model, tools, registry, self.publish, files=files)
        self.flow_calls = flow_executor.calls
        return flow_executor.execute


def _log_failure(task: asyncio.Task[None]) -> None:
    """A job's runs that ended by an error no run caught: logged, never silent
    (the job's next record starts its runs again)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("agents: %s failed", task.get_name(), exc_info=task.exception())
