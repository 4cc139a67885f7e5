"""Scheduled prompts and commands in the agents service (docs/agents.md,
"Scheduled prompts and heartbeats"; docs/schedules.md, "Command jobs").

A ``schedule.prompt`` task on ``tasks`` (key: the schedule id) asks for one run of
a catalog agent on a prompt. It has no job: its state is a :class:`PromptRun`
of its own, kept in the service's store and on the ``conversations`` changelog
under ``schedule-run/<run id>`` (a key no job can have: a job key has no ``/``),
on the partition the task came on. The run's steps are checkpointed there as a
job's run's are (docs/agents.md, "Crash safety"), so a task delivered again, or a
service killed mid-run, never runs it twice: a recorded model reply is replayed,
a tool call takes effect once. A ``schedule.command`` task is a run of the same
kind whose one step is a catalog tool's call (agents/tools/scheduled.py): checkpointed
as begun before it is made, so a run cut short never makes a non-idempotent call
twice (its outcome is unknown).

When the run ends, a :class:`~topics.ScheduleReport` goes to ``schedule-runs``
(key: the schedule id, the task's partition): ``completed`` with the reply as it
was (untrimmed: the worker decides what is a heartbeat's ``HEARTBEAT_OK``), or
``failed`` with the reason. The report is checkpointed before it is produced
and marked reported once acknowledged: a task delivered after that publishes
nothing; a crash between the acknowledgement and the mark publishes exactly the
same record (the same bytes) once more, which the worker ignores (a report for
a run that is not active). A reported run's record is forgotten (a tombstone on
the changelog) :data:`FORGET_AFTER` past its task's deadline, so the store does
not grow with every run ever made; a task delivered again after that (a consumer
group read from the start) is past its deadline, and is reported ``failed``
without a model call, which the worker ignores too.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

import orjson
from compiler import ORIGIN_HEADER, origin_link, show_origin, to_iso
from pydantic import BaseModel
from topics import (
    JournalModelCall,
    JournalToolCall,
    ScheduleCommandTask,
    SchedulePromptTask,
    ScheduleReport,
    Topics,
    encode,
)

from agents.catalog import Catalog
from agents.compose import OpenTask, Turn
from agents.errors import OutputError
from agents.publish import Publish, Send
from agents.run import Conversation, Outbox, Runner
from agents.stores import Store
from agents.tools.executor import Executor
from agents.tools.scheduled import CommandResult, run_command, task_id_of

__all__ = ["KIND", "PromptHost", "PromptRun", "PromptRuns", "run_key"]

log = logging.getLogger(__name__)

#: What a prompt or command run's stored record says it is (beside the jobs'
#: conversations); its task's ``type`` says which.
KIND = "schedule.prompt"
#: A command run's task type (docs/schedules.md, "Command jobs").
COMMAND = "schedule.command"
#: The milestone a prompt run's one task is filed under (what ``compose`` needs).
MILESTONE = "schedule"
#: How long past its task's deadline a reported run's record is kept.
FORGET_AFTER = timedelta(days=1)
#: What a prompt run is given of its schedule's earlier runs (docs/schedules.md,
#: "Previous reports"): the newest this many reports, each cut to this many characters.
PREVIOUS_REPORTS = 3
REPORT_CHARS = 600
#: What the stored record of a schedule's previous reports says it is.
REPORTS = "schedule.reports"


def run_key(run_id: str) -> bytes:
    """The store and changelog key of a prompt run."""
    return f"schedule-run/{run_id}".encode()


def reports_key(schedule_id: str) -> bytes:
    """The store and changelog key of a schedule's previous reports (on the
    partition its tasks come on: they are keyed by the schedule id)."""
    return f"schedule-reports/{schedule_id}".encode()


def report_lines(held: list[dict[str, Any]]) -> str:
    """The previous reports as a prompt run's turn shows them, oldest first."""
    if not held:
        return ""
    lines = ["Your previous reports for this schedule (oldest first):"]
    for r in held:
        said = r.get("output") if r.get("status") == "completed" else r.get("error")
        lines.append(f"- {r.get('at')} ({r.get('status')}): {str(said or '').strip()}")
    return "\n".join(lines)


def _cut(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= REPORT_CHARS else text[: REPORT_CHARS - 1] + "…"


def job_key_of(schedule_id: str) -> str:
    """What a prompt run's journal records are filed under (docs/schedules.md)."""
    return f"schedule:{schedule_id}"


def prompt_text(prompt: str, context: dict[str, Any] | None) -> str:
    """The prompt, and a wake's context after it (docs/schedules.md, "Wake"):
    the worker appends it to the task's prompt already; a task whose prompt
    does not end with it (another producer's) gets it here."""
    if not context or "\n\nContext: " in prompt:
        return prompt
    shown = orjson.dumps(context, option=orjson.OPT_SORT_KEYS).decode()
    return f"{prompt}\n\nContext: {shown}"


@dataclass
class PromptRun:
    """One prompt run as the service keeps it."""

    task: dict[str, Any]
    partition: int | None
    #: ``running`` (owed: run or resume it), ``ended`` (``report`` is set and not
    #: yet acknowledged), ``reported``.
    status: Literal["running", "ended", "reported"] = "running"
    #: The run's conversation (turns, tape, calls made), while it runs.
    conversation: dict[str, Any] | None = None
    started_at: str | None = None
    report: dict[str, Any] | None = None
    #: A command run's call was begun (checkpointed before it was made).
    begun: bool = False

    @property
    def record(self) -> SchedulePromptTask:
        return SchedulePromptTask.model_validate(self.task)

    @property
    def is_command(self) -> bool:
        return self.task.get("type") == COMMAND

    @property
    def what(self) -> str:
        """``prompt run`` or ``command run``, as the log says it."""
        return "command run" if self.is_command else "prompt run"

    @property
    def run_id(self) -> str:
        return str(self.task["run_id"])

    @property
    def deadline(self) -> datetime:
        return _parse_time(str(self.task["deadline"]))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "run_id": self.task["run_id"],
            "task": self.task,
            "partition": self.partition,
            "status": self.status,
            "conversation": self.conversation,
            "started_at": self.started_at,
            "report": self.report,
            "begun": self.begun,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PromptRun:
        return cls(
            task=dict(data["task"]),
            partition=data.get("partition"),
            status=data.get("status", "running"),
            conversation=data.get("conversation"),
            started_at=data.get("started_at"),
            report=data.get("report"),
            begun=bool(data.get("begun", False)),
        )


class PromptHost(Protocol):
    """What the prompt runs need of the agents service (agents/service/state.py): its
    store, its topics and partitions, its bound on prompt runs (apart from the
    conversations': docs/agents.md, "Scheduled prompts and heartbeats"), its
    clock, a producer acknowledged when awaited, a runner of catalog agents,
    and its count of the runs that ended."""

    @property
    def db(self) -> Store: ...

    @property
    def topics(self) -> Topics: ...

    @property
    def catalog(self) -> Catalog: ...

    @property
    def partitions(self) -> Container[int]: ...

    @property
    def prompt_limit(self) -> asyncio.Semaphore: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def produce(self) -> Send: ...

    @property
    def publish(self) -> Publish: ...

    def runner(self) -> Runner: ...

    def count_run(self, reason: str) -> None: ...


class PromptRuns:
    """The service's prompt runs: taken from ``tasks``, resumed on assignment,
    stopped on revocation."""

    def __init__(self, service: PromptHost) -> None:
        self.service = service
        self.running: dict[str, asyncio.Task[None]] = {}
        self.partition_of: dict[str, int | None] = {}
        #: Reported runs by when their record may go: (epoch s, run id, partition).
        self.forget: list[tuple[float, str, int | None]] = []
        #: How long past a task's deadline its reported run is remembered.
        self.keep = FORGET_AFTER
        #: How many of a schedule's reports its next prompt run is given.
        self.previous = PREVIOUS_REPORTS

    # -- state ------------------------------------------------------------------------

    def load(self, run_id: str) -> PromptRun | None:
        raw = self.service.db.get(run_key(run_id))
        return PromptRun.from_json(orjson.loads(raw)) if raw else None

    async def save(self, run: PromptRun) -> None:
        """Changelog first (the task's partition), acknowledged; then the store."""
        raw = orjson.dumps(run.to_json())
        key = run_key(str(run.task["run_id"]))
        await self.service.produce(self.service.topics.conversations, key, raw, None, run.partition)
        self.service.db[key] = raw

    # -- records ------------------------------------------------------------------------

    async def take(
        self, task: SchedulePromptTask | ScheduleCommandTask, partition: int | None
    ) -> None:
        """A ``schedule.prompt`` or ``schedule.command`` task: run it, unless this
        run id was taken before (a task delivered again: the run in flight, or its
        checkpoint, goes on; a run reported already publishes nothing)."""
        run = self.load(task.run_id)
        if run is None:
            run = PromptRun(task.model_dump(mode="json", by_alias=True), partition)
            await self.save(run)
        elif run.status == "reported":
            log.info("agents: %s %s was reported already: ignored", run.what, task.run_id)
            return
        self.start(run)

    def resume(self, data: dict[str, Any]) -> bool:
        """A stored prompt run of a partition just assigned: resumed when owed."""
        run = PromptRun.from_json(data)
        if run.status == "reported":
            self._forget_later(run)
            return False
        self.start(run)
        return True

    def start(self, run: PromptRun) -> None:
        run_id = str(run.task["run_id"])
        task = self.running.get(run_id)
        if task is not None and not task.done():
            return
        self.partition_of[run_id] = run.partition
        self.running[run_id] = asyncio.create_task(self._go(run_id), name=f"agents:{run_id}")

    async def stop(self, partitions: Iterable[int]) -> list[asyncio.Task[None]]:
        """Stop the runs of revoked partitions (their new owner resumes them)."""
        gone = set(partitions)
        ids = [r for r, p in self.partition_of.items() if p in gone or p is None]
        stopping = [self.running.pop(r) for r in ids if r in self.running]
        for r in ids:
            self.partition_of.pop(r, None)
        for task in stopping:
            task.cancel()
        if stopping:
            await asyncio.gather(*stopping, return_exceptions=True)
        return stopping

    def _forget_later(self, run: PromptRun) -> None:
        when = (run.deadline + self.keep).timestamp()
        heapq.heappush(self.forget, (when, run.run_id, run.partition))

    async def sweep(self, now: datetime) -> int:
        """Forget the reported runs whose time has come, on the partitions this
        process holds (a tombstone on the changelog, then the store). How many."""
        gone = 0
        while self.forget and self.forget[0][0] <= now.timestamp():
            _, run_id, partition = heapq.heappop(self.forget)
            if partition is not None and partition not in self.service.partitions:
                continue  # revoked: its new owner forgets it
            key = run_key(run_id)
            if self.service.db.get(key) is None:
                continue
            changelog = self.service.topics.conversations
            await self.service.produce(changelog, key, None, None, partition)
            self.service.db.delete(key)
            gone += 1
        return gone

    # -- a run --------------------------------------------------------------------------

    async def _go(self, run_id: str) -> None:
        try:
            async with self.service.prompt_limit:
                run = self.load(run_id)  # the latest checkpoint
                if run is None:
                    return
                if run.status == "running":
                    await self._work(run)
                if run.status == "ended":
                    assert run.report is not None
                    report = ScheduleReport.model_validate(run.report)
                    await self.service.produce(
                        self.service.topics.schedule_runs,
                        report.schedule_id.encode(),
                        encode(report),
                        None,
                        run.partition,
                    )
                    if not run.is_command and run.started_at is not None:
                        await self._keep_report(run, report)  # one that ran
                    run.status = "reported"
                    await self.save(run)
                    self._forget_later(run)
        except Exception:
            # Not an outcome of the run (those are reported): a fault of ours.
            # The run stays owed; the worker times it out (docs/schedules.md).
            log.exception("agents: schedule run %s stopped on an error", run_id)
        finally:
            if self.running.get(run_id) is asyncio.current_task():
                del self.running[run_id]
                self.partition_of.pop(run_id, None)

    def held_reports(self, schedule_id: str) -> list[dict[str, Any]]:
        """The schedule's previous reports this store holds, oldest first."""
        raw = self.service.db.get(reports_key(schedule_id))
        return list(orjson.loads(raw).get("reports") or []) if raw else []

    async def _keep_report(self, run: PromptRun, report: ScheduleReport) -> None:
        """Keep the report (cut) among the schedule's newest :attr:`previous`:
        changelog first, then the store. A report kept already (a crash before
        the run was marked reported) is kept once."""
        held = self.held_reports(report.schedule_id)
        if any(r.get("run_id") == report.run_id for r in held):
            return
        held.append(
            {"run_id": report.run_id, "status": report.status, "at": report.at,
             "output": _cut(report.output), "error": _cut(report.error)}
        )  # fmt: skip
        record = {
            "kind": REPORTS, "schedule_id": report.schedule_id, "partition": run.partition,
            "reports": held[-self.previous :],
        }  # fmt: skip
        raw = orjson.dumps(record)
        key = reports_key(report.schedule_id)
        await self.service.produce(self.service.topics.conversations, key, raw, None, run.partition)
        self.service.db[key] = raw

    async def _work(self, run: PromptRun) -> None:
        """Run the agent or the command (or refuse to); checkpoint the report as
        ``ended``."""
        if run.is_command:
            await self._command(run)
            return
        task = run.record
        now = self.service.clock()
        status: Literal["completed", "failed"] = "failed"
        output = ""
        error = self._refusal(run, task, now)
        if error is None:
            status, output, error = await self._run_agent(run, task, now)
        run.report = ScheduleReport(
            schedule_id=task.schedule_id,
            run_id=task.run_id,
            status=status,
            output=output,
            error=error,
            at=to_iso(self.service.clock()),
        ).model_dump(mode="json", by_alias=True)
        run.status = "ended"
        run.conversation = None  # the journal has the run; the record stays small
        await self.save(run)

    def _refusal(self, run: PromptRun, task: SchedulePromptTask, now: datetime) -> str | None:
        """Why the run is not made (an agent not in the catalog, a deadline
        passed), or None."""
        catalog = self.service.catalog
        if task.agent not in catalog.agents:
            return f"unknown agent {task.agent!r}: not in the catalog ({catalog.source})"
        if _parse_time(task.deadline) <= now:
            when = "started" if run.started_at is None else "resumed"
            return f"deadline passed before the run {when} (deadline {task.deadline})"
        return None

    async def _run_agent(
        self, run: PromptRun, task: SchedulePromptTask, now: datetime
    ) -> tuple[Literal["completed", "failed"], str, str | None]:
        """Run the agent until it ends or its deadline passes: (status, output, error)."""
        run.started_at = run.started_at or to_iso(now)
        conv = self._conversation(run, task)
        outbox = _PromptOutbox(self, run)
        runner = self._runner(task)
        seconds = (_parse_time(task.deadline) - now).total_seconds()
        error = None
        try:
            async with asyncio.timeout(seconds):
                reason, reply = await runner.run_prompt(
                    conv, Outbox(outbox.publish, outbox.save), task.agent
                )
        except TimeoutError:
            reason, reply = "deadline", ""
            error = f"deadline passed during the run (deadline {task.deadline})"
        except OutputError as exc:  # logged by the service (docs/agents.md, "Output bounds")
            reason, reply = "output_failed", ""
            error = f"a record of the run could not be written ({exc})"
        self.service.count_run(reason)
        if reason == "done":
            return "completed", reply, None
        if reason == "model_error":
            last = outbox.failures[-1] if outbox.failures else None
            why = f"{last.outcome}: {last.response}" if last is not None else "no reply"
            return "failed", "", f"the model call failed ({why})"
        if reason == "error":  # a fault of ours, logged by the runner
            return "failed", "", "the run stopped on an error (the agents service's log has it)"
        if reason not in ("deadline", "output_failed"):
            error = f"budget exceeded: {reason}"
        return "failed", "", error

    def _conversation(self, run: PromptRun, task: SchedulePromptTask) -> Conversation:
        """The run's conversation: the checkpointed one, else a new one whose one
        task is the prompt and whose one turn is the prompt, as the person's."""
        if run.conversation is not None:
            return Conversation.from_json(run.conversation)
        text = prompt_text(task.prompt, task.context)
        # The schedule's previous reports follow the prompt (docs/schedules.md,
        # "Previous reports"): fixed when the run starts, checkpointed with it.
        earlier = report_lines(self.held_reports(task.schedule_id)[-self.previous :])
        return Conversation(
            job_key_of(task.schedule_id),
            tasks={MILESTONE: OpenTask(task.run_id, MILESTONE, text, task.deadline, ())},
            frontier=[MILESTONE],
            turns=[Turn("person", f"{text}\n\n{earlier}" if earlier else text)],
            partition=run.partition,
            active=task.run_id,
        )

    def _runner(self, task: SchedulePromptTask) -> Runner:
        """The service's runner, for one catalog agent on a prompt: its own tools
        and delegates, its bounds, its journal records, no person to talk to."""
        base = self.service.runner()  # makes the model and HTTP clients on first use
        executor = self._executor(base, task)
        return Runner(base.catalog, base.model, executor, history=base.history, clock=base.clock)

    @staticmethod
    def _executor(base: Runner, task: SchedulePromptTask | ScheduleCommandTask) -> Executor:
        """The service's executor, whose calls carry the run's origin
        (docs/schedules.md, "Wake loops"): the runs that woke it and the run itself."""
        chain = [*task.origin, origin_link(task.schedule_id, task.run_id)]
        headers = {ORIGIN_HEADER: show_origin(chain)}
        return base.executor.carrying(headers)

    # -- a command run (docs/schedules.md, "Command jobs") -------------------------------

    async def _command(self, run: PromptRun) -> None:
        """Call the task's tool once (agents/tools/scheduled.py), journal the
        call and checkpoint the report as ``ended``."""
        task = ScheduleCommandTask.model_validate(run.task)
        now = self.service.clock()
        run.started_at = run.started_at or to_iso(now)

        async def begin() -> None:
            run.begun = True
            await self.save(run)  # durable before the side effect

        result = await run_command(
            task,
            self._executor(self.service.runner(), task),
            now=now,
            deadline=_parse_time(task.deadline),
            begun=run.begun,
            begin=begin,
        )
        await self._journal_command(task, result)
        self.service.count_run("done" if result.status == "completed" else "failed")
        run.report = ScheduleReport(
            schedule_id=task.schedule_id,
            run_id=task.run_id,
            status=result.status,
            output=result.output,
            error=result.error,
            at=to_iso(self.service.clock()),
            outcome=result.outcome,
            exit_code=result.exit_code,
        ).model_dump(mode="json", by_alias=True)
        run.status = "ended"
        await self.save(run)

    async def _journal_command(self, task: ScheduleCommandTask, result: CommandResult) -> None:
        """The call's ``journal.tool_call`` record, filed under the schedule."""
        job_key = job_key_of(task.schedule_id)
        record = JournalToolCall(
            job_key=job_key,
            run_id=task.run_id,
            agent="schedule",
            at=to_iso(self.service.clock()),
            tool=task.tool,
            task_id=task_id_of(task.schedule_id, task.run_id),
            arguments=orjson.dumps(task.args).decode()[:300],
            outcome=result.outcome,
            key=result.key,
            http_status=result.http_status,
            url=result.url,
            result=(result.told or result.error or "")[:300],
            latency_ms=int(result.seconds * 1000),
        )
        await self.service.publish("journal", job_key, record)


class _PromptOutbox:
    """Where a prompt run's records go. A prompt run has no job: no fact to
    record, no person to tell; its journal records are the only ones it writes
    (its failed model calls are kept for its report). Its checkpoint is its
    :class:`PromptRun` record."""

    def __init__(self, runs: PromptRuns, run: PromptRun) -> None:
        self.runs = runs
        self.run = run
        self.failures: list[JournalModelCall] = []

    async def publish(self, topic: str, key: str, record: BaseModel) -> None:
        if topic != "journal":
            return
        if isinstance(record, JournalModelCall) and record.outcome != "ok":
            self.failures.append(record)
        await self.runs.service.publish("journal", key, record)

    async def save(self, conv: Conversation) -> None:
        self.run.conversation = conv.to_json()
        await self.runs.save(self.run)


def _parse_time(text: str) -> datetime:
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
