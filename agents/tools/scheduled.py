"""A command schedule's run (docs/schedules.md, "Command jobs"): one call of a
catalog tool, whatever its kind, through the trusted executor, outside any
conversation, and the report it makes.

The call's idempotency key is derived from our own data: the task id is
``schedule:<schedule id>/<run id>`` and the occurrence 1, so a task delivered
again, or a run resumed after a crash, is the same call with the same key. A
call is checkpointed as begun before it is made (``begin``, acknowledged); a
run resumed with the call begun and not ended calls an idempotent tool again
(same key) and never a non-idempotent one: its outcome is unknown, and the
worker does not retry it.

The report reads ``Outcome.data`` generically: a command tool's ``exit_code``
and ``output_tail`` when it has them, else an excerpt of the result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Literal

import orjson
from compiler import LemongraphError
from jsonschema import Draft202012Validator
from topics import ScheduleCommandTask

from agents.catalog import load_catalog_file
from agents.tools.executor import Executor, Outcome, derived_key

__all__ = [
    "OUTPUT_MAX",
    "CommandResult",
    "check_command_schedules",
    "command_report",
    "run_command",
    "task_id_of",
]

#: The most of a result a report carries (a run record's ``output`` holds 2,000
#: characters): a command's output tail keeps its end, any other result its start.
OUTPUT_MAX = 2000
#: How much of why a call failed the report's ``error`` carries.
ERROR_MAX = 500


def task_id_of(schedule_id: str, run_id: str) -> str:
    """The task id a command run's call is made under (its key derives from it)."""
    return f"schedule:{schedule_id}/{run_id}"


@dataclass(frozen=True)
class CommandResult:
    """What a command run reports: the run's status, the tool call's outcome,
    the output (a command's tail, else an excerpt of the result), why it failed,
    a command's exit code; and the call itself, for the journal."""

    status: Literal["completed", "failed"]
    outcome: Literal["done", "failed", "refused", "outcome_unknown"]
    output: str = ""
    error: str | None = None
    exit_code: int | None = None
    key: str | None = None
    seconds: float = 0.0
    http_status: int | None = None
    url: str | None = None
    told: str = ""


def command_report(outcome: Outcome) -> CommandResult:
    """The report of one executed call (docs/schedules.md, "Command jobs")."""
    data = outcome.data
    fields: dict[str, Any] = data if isinstance(data, dict) else {}
    code = fields.get("exit_code")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    tail = fields.get("output_tail")
    if isinstance(tail, str):
        output = tail[-OUTPUT_MAX:]
    elif data is not None:
        shown = data if isinstance(data, str) else orjson.dumps(data, default=str).decode()
        output = shown if len(shown) <= OUTPUT_MAX else shown[: OUTPUT_MAX - 1] + "…"
    else:
        output = ""
    error = None
    if outcome.status != "done":
        error = _why(outcome, exit_code, fields.get("timed_out") is True)
    return CommandResult(
        "completed" if outcome.status == "done" else "failed",
        outcome.status,
        output,
        error,
        exit_code,
        outcome.key,
        outcome.seconds,
        outcome.http_status,
        outcome.url,
        outcome.output,
    )


def _why(outcome: Outcome, exit_code: int | None, timed_out: bool) -> str:
    """Why a call is not a success, from what the executor said of it."""
    try:
        said = orjson.loads(outcome.output)
        detail = said.get("error") if isinstance(said, dict) else said
    except orjson.JSONDecodeError:
        detail = outcome.output
    text = detail if isinstance(detail, str) else orjson.dumps(detail, default=str).decode()
    if exit_code is not None:
        text = f"exit code {exit_code}" + (" (timed out)" if timed_out else "")
    label = {"outcome_unknown": "outcome unknown", "refused": "refused"}.get(
        outcome.status, "failed"
    )
    if outcome.status == "outcome_unknown":
        text += "; not retried"
    whole = f"{label}: {text}"
    return whole if len(whole) <= ERROR_MAX else whole[: ERROR_MAX - 1] + "…"


async def run_command(
    task: ScheduleCommandTask,
    executor: Executor,
    *,
    now: datetime,
    deadline: datetime,
    begun: bool,
    begin: Callable[[], Awaitable[None]],
) -> CommandResult:
    """Run the task's tool once (docs/schedules.md, "Command jobs"). ``begun``:
    a run before this one began the call and did not end it; ``begin`` makes
    the call's start durable before its side effect."""
    catalog = executor.catalog
    tool = catalog.tools.get(task.tool)
    key = derived_key(task_id_of(task.schedule_id, task.run_id), task.tool, task.args, 1)
    if tool is None:
        why = f"refused: unknown tool {task.tool!r}: not in the catalog ({catalog.source})"
        return CommandResult("failed", "refused", error=why, key=key)
    if deadline <= now:
        when = "resumed" if begun else "started"
        why = f"deadline passed before the run {when} (deadline {task.deadline})"
        return CommandResult("failed", "refused", error=why, key=key)
    if begun and not tool.idempotent:
        why = (
            "outcome unknown: the call was begun by a run cut short (the agents service "
            "stopped); it may or may not have taken effect, and is not made again; not retried"
        )
        return CommandResult("failed", "outcome_unknown", error=why, key=key)
    await begin()
    started = time.monotonic()
    try:
        async with asyncio.timeout((deadline - now).total_seconds()):
            outcome = await executor.run(
                job_key=f"schedule:{task.schedule_id}",
                task_id=task_id_of(task.schedule_id, task.run_id),
                name=task.tool,
                arguments=orjson.dumps(task.args).decode(),
                granted=[task.tool],
                occurrence=1,
            )
    except TimeoutError:
        seconds = time.monotonic() - started
        passed = f"deadline passed during the call (deadline {task.deadline})"
        if tool.idempotent:
            return CommandResult("failed", "failed", error=passed, key=key, seconds=seconds)
        why = f"outcome unknown: {passed}; it may or may not have taken effect; not retried"
        return CommandResult("failed", "outcome_unknown", error=why, key=key, seconds=seconds)
    return command_report(outcome)


def check_command_schedules(
    *, schedules: Iterable[tuple[str, Mapping[str, Any]]], catalog: Path
) -> list[str]:
    """``lemongraph check``'s and ``lemongraph schedule add``'s check of command
    schedules against a catalog (the entry-point group
    ``lemongraph.schedule_checks``; docs/schedules.md, "Command jobs"): each
    ``(where, normalised definition)`` whose tool the catalog lacks, or whose
    args do not fit the tool's parameters, is one line."""
    wanted = [(w, s) for w, s in schedules if (s.get("action") or {}).get("type") == "command"]
    if not wanted:
        return []
    try:
        loaded = load_catalog_file(catalog)
    except LemongraphError as exc:
        return [line for line in str(exc).splitlines() if line.strip()]
    problems = []
    for where, spec in wanted:
        action = spec["action"]
        name = str(action.get("tool"))
        tool = loaded.tools.get(name)
        if tool is None:
            near = get_close_matches(name, list(loaded.tools), 1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(f"{where}: action.tool: no tool {name!r} in {catalog}{hint}")
            continue
        if not tool.parameters:
            continue  # read from its server when the service starts (an MCP tool)
        errors = Draft202012Validator(tool.parameters).iter_errors(action.get("args", {}))
        first = min(errors, key=lambda e: list(e.path), default=None)
        if first is not None:
            at = "/".join(str(p) for p in first.absolute_path)
            problems.append(
                f"{where}: action.args{'/' + at if at else ''}: do not fit the parameters of "
                f"{name!r} in {catalog}: {first.message}"
            )
    return problems
