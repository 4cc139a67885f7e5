"""What a coding job's records say (docs/coding.md, "`lemongraph code`"): one
line per step, the job's status and its open checkpoint, folded from the
``journal`` and ``decisions`` records of the job, and the loop that reads them
from Kafka until the job ends or waits at a checkpoint.

The fold (:class:`JobView`) is pure: records in, steps out. It reads only what
trusted code wrote (the worker's decisions, the agents service's journal); a
model's words reach a line only as the data a node of the flow kept (its plan,
its review), never as a status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiokafka.structs import TopicPartition
from stream.runtime.kafka import (
    KafkaSecurity,
    caught_up,
    new_consumer,
    partitions_of,
    start_consumer,
)
from stream.runtime.partitions import home_partition

__all__ = [
    "EXIT_CODES",
    "FLOW",
    "Checkpoint",
    "JobView",
    "Step",
    "follow_job",
    "from_the_end",
]

#: The flow that does a coding job's work (docs/coding.md, "How the parts join"),
#: the handler of it that runs the trusted validation, and its nodes whose
#: model answers are shown: (plan, review).
FLOW: Final = "coding-change"
VALIDATE_HANDLER: Final = "coding_validate"
#: The handlers around a checkpoint: the worktree's fingerprint as the job
#: paused, and the check of the worktree when an answer came (docs/coding.md,
#: "A changed worktree: the 409").
PAUSE_HANDLER: Final = "coding_pause"
#: The handler that ends a job whose worktree could not be opened (another
#: job holds the repository's lease): its ``refused`` is a step.
REFUSED_HANDLER: Final = "coding_refused"
RESUME_HANDLER: Final = "coding_resume"
#: The research step (docs/coding.md, "Research"): the handler that checks the
#: model's research answer, and the nodes whose tool calls are research's.
RESEARCH_HANDLER: Final = "coding_research"
RESEARCH_NODES: Final = ("research_check", "research_tools")
SHOWN_NODES: Final = ("plan", "review")
#: The exit codes of ``code run``, ``code resume`` and ``code status`` by where
#: the job is (docs/coding.md, "`lemongraph code`"); 3: still running.
EXIT_CODES: Final[Mapping[str, int]] = {
    "done": 0,
    "failed": 1,
    "refused": 1,
    "completed_with_override": 4,
    "waiting": 5,
    "running": 3,
    # An answer refused because the worktree changed since the checkpoint
    # (the API's 409 worktree_changed): the job still waits.
    "worktree_changed": 6,
}
#: The end statuses of a job.
ENDED: Final = frozenset({"done", "failed", "completed_with_override"})
#: How much of a model's answer a line shows.
_SHOWN: Final = 200


@dataclass(frozen=True)
class Step:
    """One line: ``kind`` (``plan``, ``research``, ``edit``, ``validation``, ``review``,
    ``checkpoint``, ``flow``, ``status``), its text, and the data it came from."""

    kind: str
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.kind}: {self.text}"


@dataclass(frozen=True)
class Checkpoint:
    """A question the job waits on: its interrupt id, the question and the
    allowed answers (empty: any text)."""

    interrupt_id: str
    node: str
    question: str
    answers: tuple[str, ...]

    def allows(self, response: str) -> str | None:
        """The allowed answer ``response`` names (trimmed, any case), or None."""
        if not self.answers:
            return response
        said = response.strip().casefold()
        return next((a for a in self.answers if a.strip().casefold() == said), None)


@dataclass
class JobView:
    """A job's steps, status and open checkpoints, from its records in order."""

    job_key: str
    status: str = "running"
    refused: str | None = None
    open: dict[str, Checkpoint] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    validations: int = 0
    #: The worktree's fingerprint as the job paused at its last checkpoint.
    paused: dict[str, Any] | None = None
    #: Each answer the service did not take because the worktree changed (or
    #: git moved it): ``coding_resume``'s result (``route``, ``why``,
    #: ``expected``, ``actual``), in order.
    refusals: list[dict[str, Any]] = field(default_factory=list)
    #: The agents service's watch of the worktree while the job waits: its
    #: ``journal.worktree`` ``changed`` record while the files differ from the
    #: checkpoint's (None: as they were, or no watch), and the last watch that
    #: ended (a record of it said later is stale).
    changed: dict[str, Any] | None = None
    watch_ended: str | None = None
    #: Where reading goes on: (topic, partition) → the next offset, so that a
    #: second follow of the same view reads only what came since.
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint asked last and not answered."""
        return next(reversed(self.open.values()), None) if self.open else None

    @property
    def where(self) -> str:
        """``done``, ``failed``, ``completed_with_override``, ``refused``,
        ``waiting`` (at a checkpoint) or ``running``."""
        if self.refused is not None:
            return "refused"
        if self.status in ENDED:
            return self.status
        return "waiting" if self.open else "running"

    def add(self, record: Mapping[str, Any]) -> list[Step]:
        """Fold one record of the job in: the steps it shows."""
        if record.get("job_key") != self.job_key:
            return []
        kind = record.get("type")
        if kind == "decision":
            return self._decision(record)
        if kind == "journal.interrupt":
            return self._interrupt(record)
        if kind == "journal.worktree":
            return self._worktree(record)
        if record.get("flow") != FLOW:
            return []
        if kind == "journal.model_call":
            return self._model(record)
        if kind == "journal.tool_call":
            return [_edit(record)]
        if kind == "journal.handler_call" and record.get("name") == VALIDATE_HANDLER:
            return self._validation(record)
        if kind == "journal.handler_call" and record.get("name") == RESEARCH_HANDLER:
            return _research(record)
        if kind == "journal.handler_call" and record.get("outcome") == "ok":
            return self._around_checkpoint(record)
        if kind == "journal.flow" and record.get("event") == "failed":
            text = f"failed at {record.get('node')}: {record.get('error')}"
            return [Step("flow", text, record)]
        return []

    def _decision(self, record: Mapping[str, Any]) -> list[Step]:
        if record.get("outcome") == "refused":
            if self.status == "running" and _input_kind(record) == "job.start":
                self.refused = str(record.get("refused") or "refused")
                return [Step("refused", self.refused, record)]
            return []
        status = record.get("status")
        if not isinstance(status, str) or status == self.status:
            return []
        self.status = status
        return [Step("status", status, record)] if status in ENDED else []

    def _interrupt(self, record: Mapping[str, Any]) -> list[Step]:
        interrupt_id = str(record.get("interrupt_id"))
        state = record.get("status")
        if state == "open" and interrupt_id not in self.closed:
            asked = Checkpoint(
                interrupt_id,
                str(record.get("node")),
                str(record.get("question") or ""),
                tuple(str(a) for a in record.get("answers") or ()),
            )
            self.open[interrupt_id] = asked
            return [Step("checkpoint", asked.question, record)]
        if state in ("answered", "expired", "cancelled"):
            self.closed.add(interrupt_id)
            self.open.pop(interrupt_id, None)
            if state == "answered":
                return [Step("answered", _text(record.get("answer")), record)]
        return []

    def _worktree(self, record: Mapping[str, Any]) -> list[Step]:
        """The watch of the worktree while the job waits (docs/coding.md, "A
        changed worktree: the 409"): a change is a step, and refuses an answer."""
        watch, status = str(record.get("watch")), record.get("status")
        before, self.changed = self.changed, None
        if status == "ended":
            self.watch_ended = watch
        elif watch == self.watch_ended:
            self.changed = before  # said after its watch ended: stale
        elif status == "changed":
            self.changed = dict(record)
            return [Step("worktree", str(record.get("why") or status), record)]
        elif status == "moved":
            return [Step("worktree", str(record.get("why") or status), record)]
        elif before is not None and before.get("watch") == watch:
            return [Step("worktree", "as at the checkpoint again", record)]
        return []

    def _model(self, record: Mapping[str, Any]) -> list[Step]:
        node = record.get("node")
        if node not in SHOWN_NODES or record.get("outcome") != "ok":
            return []
        said = _json(str(record.get("response") or ""))
        if node == SHOWN_NODES[0]:
            steps = said.get("steps") if isinstance(said, dict) else None
            text = "; ".join(map(str, steps)) if isinstance(steps, list) else _text(said)
            return [Step("plan", _cut(text), record)]
        verdict = said.get("verdict") if isinstance(said, dict) else None
        return [Step("review", _cut(_text(verdict if verdict is not None else said)), record)]

    def _validation(self, record: Mapping[str, Any]) -> list[Step]:
        if record.get("outcome") != "ok":
            return [Step("validation", f"did not run: {record.get('result')}", record)]
        self.validations += 1
        said = _json(str(record.get("result") or ""))
        said = said if isinstance(said, dict) else {}
        attempt = said.get("attempt", self.validations)
        codes = ", ".join("none" if c is None else str(c) for c in said.get("exit_codes") or ())
        text = f"{said.get('verdict', '?')}" + (f" (exit {codes})" if codes else "")
        if said.get("verdict") == "env_failed":
            text += ": the environment, not the change (no attempt used)"
        return [Step(f"validation {attempt}", text, said)]

    def _around_checkpoint(self, record: Mapping[str, Any]) -> list[Step]:
        said = _json(str(record.get("result") or ""))
        if not isinstance(said, dict):
            return []
        if record.get("name") == REFUSED_HANDLER and said.get("refused"):
            return [Step("refused", str(said["refused"]), said)]
        if record.get("name") == PAUSE_HANDLER and isinstance(said.get("fingerprint"), dict):
            self.paused = said["fingerprint"]
        elif record.get("name") == RESUME_HANDLER and said.get("route") in ("changed", "moved"):
            self.refusals.append(said)
            return [Step("refused", str(said.get("why") or said["route"]), said)]
        return []


def _input_kind(record: Mapping[str, Any]) -> str | None:
    given = record.get("input")
    return given.get("type") if isinstance(given, dict) else None


def _edit(record: Mapping[str, Any]) -> Step:
    """A workspace tool's call: the tool, the path, the outcome (a research
    step's own: ``research``)."""
    args = _json(str(record.get("arguments") or ""))
    path = args.get("path") if isinstance(args, dict) else None
    text = f"{record.get('tool')}" + (f" {path}" if path else "") + f" ({record.get('outcome')})"
    return Step("research" if record.get("node") in RESEARCH_NODES else "edit", text, record)


def _research(record: Mapping[str, Any]) -> list[Step]:
    """The research step's end (its answer asked for no more calls): how many
    findings, on which files (the model's own notes, docs/coding.md, "Research")."""
    result = str(record.get("result") or "")
    said = _json(result)
    if (
        record.get("outcome") == "ok"
        and result.startswith('{"asked":false')
        and not isinstance(said, dict)
    ):  # the journal keeps the opening of a long answer only
        return [Step("research", "notes taken (longer than the journal shows)", {})]
    if record.get("outcome") != "ok" or not isinstance(said, dict) or said.get("asked"):
        return []
    findings, files = said.get("findings") or [], said.get("files") or []
    text = f"{len(findings)} finding(s)" + (f" on {', '.join(map(str, files))}" if files else "")
    return [Step("research", _cut(text), said)]


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _cut(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _SHOWN else line[: _SHOWN - 1] + "…"


# -- reading the job's records ----------------------------------------------------------


async def _home_partitions(
    consumer: Any, topics: tuple[str, ...], key: str
) -> list[TopicPartition]:
    """The partition of each topic the job's records are on: its key's home
    (docs/kafka.md, "Partitioning"), so a long-lived broker's other jobs are
    never read."""
    tps = []
    for topic in topics:
        count = len(await partitions_of(consumer, topic))
        if count:
            tps.append(TopicPartition(topic, home_partition(key.encode(), count)))
    return tps


async def from_the_end(
    bootstrap: str,
    topics: tuple[str, ...],
    view: JobView,
    *,
    security: KafkaSecurity | None = None,
) -> None:
    """Start ``view``'s reading at the end of the job's partitions as they are
    now (a little before: the embedded broker's ListOffsets answer can be a
    batch short, stream/runtime/kafka.py): for a job about to start, whose
    records all come later."""
    consumer = new_consumer(bootstrap, security, offsets="earliest")
    await start_consumer(consumer)
    try:
        tps = await _home_partitions(consumer, topics, view.job_key)
        ends = await consumer.end_offsets(tps) if tps else {}
        for tp, end in ends.items():
            view.offsets[tp.topic, tp.partition] = max(0, end - 100)
    finally:
        await consumer.stop()


async def follow_job(
    bootstrap: str,
    topics: tuple[str, ...],
    view: JobView,
    on_step: Callable[[Step], None],
    *,
    follow: bool = True,
    until_closed: str | None = None,
    security: KafkaSecurity | None = None,
    poll: float = 0.2,
) -> str:
    """Read the job's records on ``topics`` (its ``decisions`` and ``journal``)
    from their beginning (of the job's home partitions; or from where
    ``view.offsets`` says: :func:`from_the_end`) into ``view``, calling
    ``on_step`` for each step, and return where the job is once everything
    written so far is read and the job ended or waits at a checkpoint (without
    ``follow``: once it is read, wherever the job is). ``until_closed``: an
    interrupt just answered: the job is not taken to wait on it until its
    answer is journaled."""
    key = view.job_key.encode()
    consumer = new_consumer(bootstrap, security, offsets="earliest")
    await start_consumer(consumer)
    try:
        tps = await _home_partitions(consumer, topics, view.job_key)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp in tps:
            if (tp.topic, tp.partition) in view.offsets:
                consumer.seek(tp, view.offsets[tp.topic, tp.partition])
        while True:
            batches = await consumer.getmany(timeout_ms=int(poll * 1000), max_records=5000)
            for tp, records in batches.items():
                for r in records:
                    view.offsets[tp.topic, tp.partition] = r.offset + 1
                    if r.key == key and r.value is not None:
                        for step in view.add(orjson.loads(r.value)):
                            on_step(step)
            if batches or not await caught_up(consumer, tps):
                continue
            where = view.where
            waiting_on_answer = until_closed is not None and until_closed not in view.closed
            if not follow or where in ("refused", *ENDED):
                return where
            if where == "waiting" and not waiting_on_answer:
                return where
            await asyncio.sleep(poll)
    finally:
        await consumer.stop()
