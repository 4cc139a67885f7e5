"""``lemongraph code run``, ``status`` and ``resume`` (docs/coding.md,
"`lemongraph code`"): start a coding job, follow it one line per step, answer
its checkpoint. Registered under the entry-point group ``lemongraph.commands``
(pyproject.toml; docs/operations.md, "Commands").

They talk to Kafka as ``lemongraph start-job`` does, with no gateway: the
``job.start`` goes on the inbox (stream/cli/outcome.py waits for its decision),
the job's ``decisions`` and ``journal`` records are followed
(agents/coding/follow.py), and an answer goes on ``messages`` exactly as
``POST /v1/jobs/{key}/answers`` writes it (stream/gateway/routes/answers.py).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

import click
import orjson
from stream.runtime.command import env_settings, require_kafka
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.kafka import producer, run
from topics import Answerer, JobStart, MessageRecord, Topics, encode

from agents.coding.follow import (
    EXIT_CODES,
    Checkpoint,
    JobView,
    Step,
    follow_job,
    from_the_end,
)
from agents.coding.validation import Validation, discover
from agents.workspace.fingerprint import Fingerprint, check_resume
from agents.workspace.worktree import Workspaces, source_top

__all__ = ["changed_here", "code", "job_subject", "new_job_key"]

#: The playbook a coding job runs (docs/coding.md, "How the parts join").
PLAYBOOK: Final = "coding-task"
#: The answer that needs a message, and the flow's node that asks for it.
REVISE: Final = "revise"
DEFAULT_ATTEMPTS: Final = 3
#: ``--no-wait`` (docs/coding.md, "`lemongraph code`"): not waiting for a person.
NO_WAIT: Final = "Never ask at a terminal: return at a checkpoint (exit 5), as when piped."
#: Who a CLI answer is from (the gateway's ``by`` for a token holder).
_BY: Final = Answerer(source="world", name="lemongraph code")


def new_job_key(now: datetime | None = None) -> str:
    """``code-<UTC time>-<4 hex>``: a fresh job key."""
    at = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")
    return f"code-{at}-{secrets.token_hex(2)}"


def job_subject(
    repo: Path, task: str, validation: Validation, max_attempts: int, review: str,
    research: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The job's subject, the flow's inputs: the repository's top folder, the
    task, the trusted commands as discovery found them, the bounds, and
    whether the operator asked for the research step (docs/coding.md,
    "Research": the route is decided by this, never by a model)."""
    return {
        "repo": str(repo),
        "task": task,
        "validate": [
            {"text": c.text, "source": c.source, "line": c.line, "kind": c.kind}
            for c in validation.commands
        ],
        "validation_source": validation.source,
        "max_attempts": max_attempts,
        "review": review,
        "research": research,
    }


class _Printer:
    """One line per step (or one JSON object with ``--json``)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def emit(self, kind: str, **fields: Any) -> None:
        if self.as_json:
            click.echo(orjson.dumps({"kind": kind, **fields}).decode())
        elif kind == "job":
            click.echo(f"job: {fields['key']}")
        elif kind == "step":
            click.echo(f"{fields['step']}: {fields['text']}")
        elif kind == "checkpoint":
            click.echo(f"checkpoint: {fields['question']}")
            answers = fields["answers"]
            click.echo(f"answers: {', '.join(answers) if answers else '(any text)'}")
        elif kind == "end":
            click.echo(f"status: {fields['status']}")
        elif kind == "refused":
            click.echo(f"refused: 409 {fields['code']}: {fields['why']}", err=True)
            click.echo(f"at the checkpoint: {_fields(fields['expected'])}", err=True)
            click.echo(f"now: {_fields(fields['actual'])}", err=True)

    def step(self, step: Step) -> None:
        if step.kind not in ("checkpoint", "status"):  # said at the end, once
            self.emit("step", step=step.kind, text=step.text)


def _fields(found: Any) -> str:
    if not isinstance(found, dict):
        return "(no worktree)"
    return " ".join(f"{k}={v}" for k, v in found.items())


def _end(printer: _Printer, view: JobView, where: str, key: str, *, then_exit: bool = True) -> None:
    """Say where the job is and exit with its code (unless not ``then_exit``)."""
    asked = view.checkpoint
    if where == "waiting" and asked is not None:
        printer.emit(
            "checkpoint", key=key, interrupt_id=asked.interrupt_id, question=asked.question,
            answers=list(asked.answers),
        )  # fmt: skip
        if not printer.as_json:
            click.echo(f"answer: lemongraph code resume {key} --response R [--message M]")
    else:
        printer.emit("end", key=key, status=where, reason=view.refused)
    if then_exit:
        sys.exit(EXIT_CODES[where])


def _follow(
    settings: Settings, view: JobView, on_step: Callable[[Step], None], **kwargs: Any
) -> str:
    topics = Topics(settings.topic_prefix)
    reading = (topics.decisions, topics.journal)
    bootstrap = require_kafka(settings)
    security = settings.kafka_security
    return str(run(follow_job(bootstrap, reading, view, on_step, security=security, **kwargs)))


def _follow_or_leave(settings: Settings, view: JobView, printer: _Printer, **kwargs: Any) -> str:
    """Follow the job; Ctrl-C leaves it running and says how to follow it again."""
    try:
        return _follow(settings, view, printer.step, **kwargs)
    except KeyboardInterrupt:
        click.echo(
            f"the job goes on: lemongraph code status {view.job_key} says where it is", err=True
        )
        sys.exit(130)


@click.group()
def code() -> None:
    """The coding workflow: a model edits a worktree, trusted validation decides
    (docs/coding.md)."""


@code.command("run")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="The repository to change.")  # fmt: skip
@click.option("--task", required=True, help="What to change.")
@click.option("--validate", "validate", multiple=True, metavar="CMD",
              help="A validation command (repeatable); replaces the repository's own.")  # fmt: skip
@click.option("--max-attempts", default=DEFAULT_ATTEMPTS, show_default=True,
              type=click.IntRange(1, 20), help="Attempts before a checkpoint.")  # fmt: skip
@click.option("--review", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True, help="When the change is reviewed.")  # fmt: skip
@click.option("--research", is_flag=True,
              help="A read-only research step before the edits (docs/coding.md).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of text.")
@click.option("--no-wait", is_flag=True, help=NO_WAIT)
def code_run(
    repo: Path, task: str, validate: Sequence[str], max_attempts: int, review: str,
    research: bool, as_json: bool, no_wait: bool,
) -> None:  # fmt: skip
    """Start a coding job on REPO for TASK and follow it: exit 0 done, 1 failed
    or aborted, 4 completed with override, 5 waiting at a checkpoint."""
    try:
        top = source_top(repo.resolve())
        validation = discover(top, validate)
    except (OSError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if not validation.commands:
        notes = "; ".join(validation.notes) or "no AGENTS.md or .lemongraph.json"
        raise click.UsageError(f"no validation command for {top} ({notes}): give --validate CMD")
    settings = env_settings()
    key = new_job_key()
    printer = _Printer(as_json)
    printer.emit("job", key=key, repo=str(top), validation=validation.source)
    message = JobStart(
        key=key, playbook_key=PLAYBOOK,
        subject=job_subject(top, task, validation, max_attempts, review, research),
    )  # fmt: skip
    view = JobView(key)
    # The job's records all come after this: read from here.
    topics = Topics(settings.topic_prefix)
    reading = (topics.decisions, topics.journal)
    run(from_the_end(require_kafka(settings), reading, view, security=settings.kafka_security))
    # On the inbox as `lemongraph start-job` sends it; a refusal (an unknown
    # playbook) is the job's first decision, which the follow reads.
    run(_send(settings, Topics(settings.topic_prefix).inbox, key, encode(message)))
    where = _follow_or_leave(settings, view, printer)
    if _at_terminal(as_json, no_wait):
        where = _ask_here(settings, view, printer, where)
    _end(printer, view, where, key)


@code.command("status")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of text.")
def code_status(job: str, as_json: bool) -> None:
    """Where job JOB is: its steps, its status, its open checkpoint. Exit 0
    done, 1 failed, 3 running, 4 completed with override, 5 waiting."""
    printer = _Printer(as_json)
    printer.emit("job", key=job)
    view = JobView(job)
    _end(printer, view, _follow(env_settings(), view, printer.step, follow=False), job)


@code.command("resume")
@click.argument("job")
@click.option("--response", required=True, help="The answer: one the checkpoint allows.")
@click.option("--message", help="What to change (needed with revise).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of text.")
@click.option("--no-wait", is_flag=True, help=NO_WAIT)
def code_resume(job: str, response: str, message: str | None, as_json: bool, no_wait: bool) -> None:
    """Answer job JOB's checkpoint with RESPONSE and follow the job as `code run`
    does. A response the checkpoint does not allow exits 2 listing the allowed ones."""
    settings = env_settings()
    printer = _Printer(as_json)
    printer.emit("job", key=job)
    view = JobView(job)
    where = _follow(settings, view, lambda _: None, follow=False)
    asked = view.checkpoint
    if where != "waiting" or asked is None:
        click.echo(f"job {job} waits at no checkpoint (it is {where})", err=True)
        sys.exit(ExitCode.FAILED)
    chosen = _allowed(asked, response, message)
    where, refusal = _give(settings, view, printer, asked, chosen, message)
    if refusal is not None:
        if where == "waiting":  # asked again by the service: say the new question first
            _end(printer, view, where, job, then_exit=False)
        _refused(printer, job, refusal)
        sys.exit(EXIT_CODES["worktree_changed"])
    if _at_terminal(as_json, no_wait):
        where = _ask_here(settings, view, printer, where)
    _end(printer, view, where, job)


def _give(
    settings: Settings, view: JobView, printer: _Printer, asked: Checkpoint, chosen: str,
    message: str | None,
) -> tuple[str, dict[str, Any] | None]:  # fmt: skip
    """Answer ``asked`` with ``chosen`` (and, for ``revise``, the flow's next
    question with ``message``) and follow the job: where it is then, and the
    refusal when the worktree changed since the checkpoint (the 409: checked
    here before sending, or said by the agents service)."""
    here = changed_here(settings, view.job_key, view.paused) or _changed_said(view)
    if here is not None:  # nothing is sent: the job still waits
        return "waiting", here
    refused_before = len(view.refusals)
    _answer(settings, view.job_key, asked, chosen)
    where = _follow_or_leave(settings, view, printer, until_closed=asked.interrupt_id)
    follow_up = view.checkpoint
    # revise: the flow then asks what to change (a question that takes any text)
    if chosen == REVISE and message and follow_up is not None and not follow_up.answers:
        _answer(settings, view.job_key, follow_up, message)
        where = _follow_or_leave(settings, view, printer, until_closed=follow_up.interrupt_id)
    said = view.refusals[refused_before:]
    if where == "waiting" and said and said[-1].get("route") == "changed":
        # The agents service made the check (this machine does not hold its
        # worktrees): it did not take the answer, and asks again.
        return where, said[-1]
    return where, None


def _at_terminal(as_json: bool, no_wait: bool) -> bool:
    """A person at a terminal (docs/coding.md, "On a terminal"): the
    checkpoint's question is asked here, unless ``--no-wait``."""
    return not as_json and not no_wait and sys.stdin.isatty() and sys.stdout.isatty()


def _ask_here(settings: Settings, view: JobView, printer: _Printer, where: str) -> str:
    """While the job waits at a checkpoint: its question, and the person's
    answer (an empty one leaves it waiting, as Ctrl-C does); where it is then."""
    while where == "waiting" and (asked := view.checkpoint) is not None:
        click.echo(f"checkpoint: {asked.question}")
        click.echo(f"answers: {', '.join(asked.answers) if asked.answers else '(any text)'}")
        try:
            said = click.prompt("answer (empty: leave it waiting)", default="",
                                show_default=False)  # fmt: skip
        except click.Abort:
            said = ""
        if not said.strip():
            click.echo(f"the job waits: lemongraph code resume {view.job_key} --response R")
            sys.exit(EXIT_CODES["waiting"])
        chosen = asked.allows(said)
        if chosen is None:
            click.echo(f"{said.strip()!r} is not one of {', '.join(asked.answers)}")
            continue
        message = click.prompt("what should change") if chosen == REVISE else None
        where, refusal = _give(settings, view, printer, asked, chosen, message)
        if refusal is not None:
            _refused(printer, view.job_key, refusal)
            # What the watch said since (the files put back): read before asking again.
            _follow(settings, view, printer.step, follow=False)
    return where


def changed_here(settings: Settings, job: str, paused: Any) -> dict[str, Any] | None:
    """The agents service's check of the worktree (docs/coding.md, "A changed
    worktree: the 409"), made before the answer is sent when this machine
    holds the service's data folder (``$LEMONGRAPH_DATA_DIR/agents/coding``,
    agents/service/state.py ``data_path``, or ``dev``'s under ``embedded``):
    the refusal when its files changed since the checkpoint, else None (a
    moved HEAD or branch is the flow's to fail)."""
    # The service's data folder: LEMONGRAPH_DATA_DIR's, or under `dev`'s embedded
    # broker its `embedded` folder (stream/cli/dev.py).
    folders = (settings.data_dir, settings.data_dir / "embedded")
    held = (Workspaces(d / "agents" / "coding").get(job) for d in folders)
    found = next((w for w in held if w is not None), None)
    if found is None or not isinstance(paused, dict):
        return None
    refusal = check_resume(found.path, cast(Fingerprint, paused))
    if refusal is None or refusal.fails:
        return None
    return {
        "route": refusal.reason, "why": f"The answer was not sent: {refusal.why}.",
        "expected": dict(refusal.expected), "actual": dict(refusal.actual or {}),
    }  # fmt: skip


def _changed_said(view: JobView) -> dict[str, Any] | None:
    """The agents service's watch says the worktree changed since the checkpoint
    (a ``journal.worktree`` ``changed``, what the gateway answers 409 from):
    the refusal, else None."""
    said = view.changed
    if said is None:
        return None
    return {
        "route": "changed", "why": f"The answer was not sent: {said.get('why')}.",
        "expected": said.get("expected"), "actual": said.get("found"),
    }  # fmt: skip


def _refused(printer: _Printer, job: str, said: dict[str, Any]) -> None:
    """The 409: the answer not taken, with both fingerprints."""
    printer.emit(
        "refused", key=job, status=409, code="worktree_changed", why=said.get("why"),
        expected=said.get("expected"), actual=said.get("actual"),
    )  # fmt: skip


def _allowed(asked: Checkpoint, response: str, message: str | None) -> str:
    """The allowed answer ``response`` names; else exit 2 listing them."""
    chosen = asked.allows(response)
    if chosen is None:
        click.echo(
            f"{response!r} is not an answer this checkpoint takes: one of "
            f"{', '.join(asked.answers)}",
            err=True,
        )
        sys.exit(ExitCode.USAGE)
    if chosen == REVISE and not (message or "").strip():
        click.echo("revise needs --message: what should change", err=True)
        sys.exit(ExitCode.USAGE)
    return chosen


def _answer(settings: Settings, job: str, asked: Checkpoint, answer: str) -> None:
    """The answer on ``messages``, as ``POST /v1/jobs/{key}/answers`` writes it."""
    record = MessageRecord(
        job_key=job, message_id=f"answer:{asked.interrupt_id}", direction="in", channel="cli",
        text=answer, at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        interrupt_id=asked.interrupt_id, answer=answer, by=_BY,
    )  # fmt: skip
    run(_send(settings, Topics(settings.topic_prefix).messages, job, encode(record)))


async def _send(settings: Settings, topic: str, key: str, value: bytes) -> None:
    async with producer(require_kafka(settings), security=settings.kafka_security) as client:
        await client.send_and_wait(topic, value, key=key.encode())
