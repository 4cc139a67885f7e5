"""A decision and what it produces (docs/kafka.md): its input, verdicts,
transitions and effects, where its record was read, the tasks on the tasks
topic, a job's snapshot (the view read models build of its state: a job's row on
the workers' table changelog, which ``stored_job_state`` reads) and a registered
playbook.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topics._memory import FactRememberedEffect
from topics._messages import Scalar, TopicRecord
from topics._vocab import JobStatus, MilestoneStatus, Source, TaskOutcome, TimerKind

__all__ = [
    "FORWARDED_FROM_HEADER",
    "AtomVerdict",
    "ClockBound",
    "DecisionIdentity",
    "DecisionInput",
    "DecisionRecord",
    "Effect",
    "EventInput",
    "ExplanationRecord",
    "JobFinishedEffect",
    "JobSnapshot",
    "MilestoneSnapshot",
    "PlaybookRecord",
    "RecordForward",
    "RecordOrigin",
    "ScheduleCommandTask",
    "SchedulePromptTask",
    "StartInput",
    "TaskClosedEffect",
    "TaskClosedRecord",
    "TaskOpenedEffect",
    "TaskOpenedRecord",
    "TaskRecord",
    "TickInput",
    "TimerCancelledEffect",
    "TimerRecord",
    "TimerSetEffect",
    "TransitionRecord",
    "VerdictRecord",
    "stored_job_state",
]


# -- a decision's parts ------------------------------------------------------------


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartInput(_Part):
    """A decision's input: the job.start it applied (the record key is the job key)."""

    type: Literal["job.start"] = "job.start"
    key: str
    playbook_key: str
    subject: dict[str, Any]
    contacts: list[Any]


class EventInput(_Part):
    """A decision's input: an event. ``id`` names the occurrence in verdicts
    (its inbox position, ``p<partition>@<offset>``, when it has no idempotency key)."""

    type: Literal["event"] = "event"
    action: str
    value: Scalar = None
    properties: dict[str, Any]
    source: Source
    idempotency_key: str | None = None
    id: str | None = None


class TickInput(_Part):
    """A decision's input: the clock moved."""

    type: Literal["tick"] = "tick"


DecisionInput = Annotated[StartInput | EventInput | TickInput, Field(discriminator="type")]


class TimerRecord(_Part):
    """A job timer: ``settle`` closes a milestone's window, ``due`` emits its task."""

    at: str
    kind: TimerKind
    milestone: str


class AtomVerdict(_Part):
    """One atom's part in a verdict: its verdict, its match count, the evidence ids."""

    atom: str
    verdict: Literal["TRUE", "FALSE", "UNKNOWN"]
    count: int
    evidence: list[str]


class ExplanationRecord(_Part):
    """Why a condition said what it said (``closed``: at its window's close).

    ``condition``, the condition's text, is the playbook's: records written
    since issue 35 leave it out (the milestone and the playbook version name
    it); records written before carry it (docs/kafka.md, "What a record no
    longer carries")."""

    condition: str | None = None
    verdict: Literal["TRUE", "FALSE", "UNKNOWN"]
    closed: bool
    atoms: list[AtomVerdict]


class VerdictRecord(ExplanationRecord):
    """What one open milestone's condition said at one instant: ``at``, absent
    (None) when it is the decision's ``now`` (since issue 35: docs/kafka.md)."""

    milestone: str
    at: str | None = None


class TransitionRecord(_Part):
    """A milestone moved from one status to another, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    milestone: str
    from_: MilestoneStatus = Field(alias="from")
    to: MilestoneStatus
    #: Absent (None) when it is the decision's ``now`` (since issue 35: docs/kafka.md).
    at: str | None = None
    reason: str


class TaskOpenedEffect(_Part):
    """A milestone's task is open (in a decision's effects): which task, when,
    and its deadline. What it asks for is the playbook's and the frontier is
    the decision's; the task record on ``tasks`` (:class:`TaskOpenedRecord`)
    carries both. Decisions written before issue 35 carry them here too (the
    four optional fields), and are still read."""

    type: Literal["task.opened"] = "task.opened"
    task_id: str
    job_key: str
    milestone: str
    at: str
    deadline: str
    # Only in decisions written before issue 35 (docs/kafka.md, "What a record
    # no longer carries").
    instructions: str | None = None
    playbook_instructions: str | None = None
    integrations: list[str] | None = None
    frontier: list[str] | None = None


class TaskClosedEffect(_Part):
    """A task is over."""

    type: Literal["task.closed"] = "task.closed"
    task_id: str
    job_key: str
    milestone: str
    at: str
    outcome: TaskOutcome


class TimerSetEffect(TimerRecord):
    """Remember to wake the job at ``at``."""

    type: Literal["timer.set"] = "timer.set"


class TimerCancelledEffect(TimerRecord):
    """Forget a timer that was set."""

    type: Literal["timer.cancelled"] = "timer.cancelled"


class JobFinishedEffect(_Part):
    """The job is over."""

    type: Literal["job.finished"] = "job.finished"
    job_key: str
    status: Literal[JobStatus.DONE, JobStatus.FAILED, JobStatus.COMPLETED_WITH_OVERRIDE]
    at: str


Effect = Annotated[
    FactRememberedEffect
    | TaskOpenedEffect
    | TaskClosedEffect
    | TimerSetEffect
    | TimerCancelledEffect
    | JobFinishedEffect,
    Field(discriminator="type"),
]


# -- tasks ----------------------------------------------------------------------


class TaskOpenedRecord(TaskOpenedEffect, TopicRecord):
    """The task.opened effect on the tasks topic, with what the task asks for,
    the frontier (every open milestone in rank order) and what a channel
    service needs to talk to the job's contacts."""

    instructions: str
    playbook_instructions: str
    integrations: list[str]
    frontier: list[str]
    playbook_key: str
    subject: dict[str, Any] = Field(default_factory=dict)
    contacts: list[Any] = Field(default_factory=list)


class TaskClosedRecord(TaskClosedEffect, TopicRecord):
    """The task.closed effect on the tasks topic."""


class SchedulePromptTask(TopicRecord):
    """A prompt schedule's run for the agents service (docs/schedules.md): run
    ``agent`` on ``prompt`` once per ``run_id`` and report on ``schedule-runs``
    (:class:`ScheduleReport`) by ``deadline``. The record key is the schedule id."""

    type: Literal["schedule.prompt"] = "schedule.prompt"
    schedule_id: str
    run_id: str
    agent: str
    prompt: str
    context: dict[str, Any] | None = None
    slot: str | None = None  # the nominal slot (ISO UTC); None: a wake run
    attempt: int = 0
    deadline: str
    triggered_by: Literal["schedule", "manual", "wake", "retry"] = "schedule"
    at: str | None = None  # when it was dispatched
    #: A wake run's origin: the prompt runs it comes from (docs/schedules.md,
    #: "Wake loops"); the run's tool calls carry it and the run's own link.
    origin: list[str] = Field(default_factory=list, max_length=8)


class ScheduleCommandTask(TopicRecord):
    """A command schedule's run for the agents service (docs/schedules.md,
    "Command jobs"): call the catalog tool ``tool`` with ``args`` once per
    ``run_id`` through the trusted executor and report on ``schedule-runs``
    (:class:`ScheduleReport`) by ``deadline``. The record key is the schedule id."""

    type: Literal["schedule.command"] = "schedule.command"
    schedule_id: str
    run_id: str
    tool: str = Field(min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] | None = None  # a wake's: recorded, not given to the tool
    slot: str | None = None  # the nominal slot (ISO UTC); None: a wake run
    attempt: int = 0
    deadline: str
    triggered_by: Literal["schedule", "manual", "wake", "retry"] = "schedule"
    at: str | None = None  # when it was dispatched
    #: A wake run's origin (docs/schedules.md, "Wake loops"): an HTTP tool's
    #: call carries it and the run's own link.
    origin: list[str] = Field(default_factory=list, max_length=8)


TaskRecord = Annotated[
    TaskOpenedRecord | TaskClosedRecord | SchedulePromptTask | ScheduleCommandTask,
    Field(discriminator="type"),
]


# -- decisions --------------------------------------------------------------------


#: The header a worker puts on an inbox record it forwards to the record's home
#: partition (its key's murmur2 partition): ``p<partition>@<offset>``, where
#: the producer's client put it. See docs/kafka.md, "Partitioning".
FORWARDED_FROM_HEADER = "lemongraph.forwarded-from"


class RecordForward(BaseModel):
    """Where the forwarded copy of an inbox record was read (its home partition)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int
    offset: int


class RecordOrigin(BaseModel):
    """Where a decision's input was produced: the topic, partition and offset the
    producer's client wrote it to. When that was not the record's home
    partition, ``forwarded`` says where the worker's copy of it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    partition: int
    offset: int
    forwarded: RecordForward | None = None


class ClockBound(BaseModel):
    """A decision whose ``now`` is not its record's timestamp, and why: the
    timestamp was ahead of the worker's clock by more than the allowed skew
    (``worker_clock``), behind the job's own clock (``job_clock``), or missing
    (``no_timestamp``: the worker's clock was used)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record_timestamp: int  # epoch ms, as the record carried it
    bound: Literal["worker_clock", "job_clock", "no_timestamp"]


class DecisionRecord(TopicRecord):
    """One decision: enough to replay it through the pure core and compare."""

    type: Literal["decision"] = "decision"
    job_key: str
    playbook_key: str | None
    playbook_version: int | None
    origin: RecordOrigin | None
    now: str
    input: DecisionInput
    outcome: Literal["applied", "duplicate", "refused", "noop"]
    refused: str | None = None
    seq: int | None = None
    fired: list[TimerRecord] = Field(default_factory=list)
    verdicts: list[VerdictRecord] = Field(default_factory=list)
    transitions: list[TransitionRecord] = Field(default_factory=list)
    effects: list[Effect] = Field(default_factory=list)
    frontier: list[str] = Field(default_factory=list)
    status: JobStatus | None = None
    state_hash: str | None = None
    prev_state_hash: str | None = None
    clock: ClockBound | None = None

    @property
    def identity(self) -> DecisionIdentity:
        """What names this decision on the ``decisions`` topic, the key a consumer
        de-duplicates by (docs/kafka.md, "Duplicates"): the job and the record
        the worker decided, as ``origin`` says with its ``forwarded`` part. A
        record re-decided after a crash makes the same decision under the same
        identity; ``seq`` is not unique (a refused decision keeps the seq of the
        state it left alone, and a job that does not exist has none)."""
        origin = self.origin
        if origin is None:  # not read from Kafka (a scenario, a simulation)
            return (self.job_key, None, None, None, None, None)
        forwarded = origin.forwarded
        return (
            self.job_key,
            origin.topic,
            origin.partition,
            origin.offset,
            forwarded.partition if forwarded is not None else None,
            forwarded.offset if forwarded is not None else None,
        )


#: :attr:`DecisionRecord.identity`: job key, origin topic, partition and offset,
#: and the forwarded copy's partition and offset (None when not forwarded).
DecisionIdentity: TypeAlias = tuple[str, str | None, int | None, int | None, int | None, int | None]


# -- jobs -------------------------------------------------------------------------


class MilestoneSnapshot(BaseModel):
    """One milestone in a job snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: MilestoneStatus
    opened_at: str | None = None
    deadline: str | None = None
    #: When its task went out or goes out: absent (null) when that is
    #: ``opened_at`` (no ``due`` held it back), in snapshots since issue 35.
    task_at: str | None = None
    settled_at: str | None = None
    outcome: TaskOutcome | None = None
    explanation: ExplanationRecord | None = None


class JobSnapshot(TopicRecord):
    """A job as read models see it. ``milestones`` (id → state) is read from
    ``detail``; ``state_hash`` is on the decisions only. Snapshots written
    before issue 35 carry both (docs/kafka.md, "What a record no longer
    carries"): ``milestones`` is dropped when read (``detail`` says the same),
    ``state_hash`` is kept."""

    type: Literal["job.snapshot"] = "job.snapshot"
    key: str
    status: JobStatus
    playbook_key: str
    playbook_version: int
    seq: int
    started_at: str
    updated_at: str | None
    ended_at: str | None = None
    events: int = 0
    detail: dict[str, MilestoneSnapshot]
    frontier: list[str]
    timers: list[TimerRecord]
    state_hash: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _older(cls, data: Any) -> Any:
        """A snapshot written before issue 35: its ``milestones`` map repeats
        ``detail``'s states, which the model reads instead."""
        if isinstance(data, dict) and "milestones" in data:
            data = {k: v for k, v in data.items() if k != "milestones"}
        return data

    @property
    def milestones(self) -> dict[str, MilestoneStatus]:
        """Each milestone's state, by id (``detail``'s, in its order)."""
        return {mid: part.state for mid, part in self.detail.items()}


# -- a job's state on the workers' table changelog (docs/kafka.md, "The job table's changelog") --
#
# Each record is one row of the workers' table, keyed by the table key. A job's
# row (keyed by the job key) is a text header, a newline and the job's state as
# canonical JSON (stream/engine/store.py writes it):
# ``LG2 <partition> <next due ms or -> <p>:<offset>[,...]`` (``LG1 <partition>
# <offset> <due>`` before it). The workers' own rows (the schedules', the
# watermarks, the due-time index) have keys that start with NUL; a tombstone (no
# value) deletes a row. Only the workers write it.

_HEADERS = (b"LG2 ", b"LG1 ")


def stored_job_state(key: bytes | None, value: bytes | None) -> bytes | None:
    """The state JSON of a job's row; None for a worker's own row, a tombstone,
    or a row in no format this code reads."""
    if not key or key[0] == 0 or value is None or value[:4] not in _HEADERS:
        return None
    end = value.find(b"\n")
    return None if end < 0 else value[end + 1 :]


# -- playbooks ----------------------------------------------------------------------


class PlaybookRecord(TopicRecord):
    """A registered playbook version (the spec as validated)."""

    type: Literal["playbook"] = "playbook"
    key: str
    version: int
    spec: dict[str, Any]

    @property
    def record_key(self) -> bytes:
        """The Kafka key, ``KEY@vN``: one per version, so that compaction of the
        ``playbooks`` topic keeps every version a job may be pinned to
        (docs/kafka.md). ``@`` is not allowed in playbook keys."""
        return f"{self.key}@v{self.version}".encode()
