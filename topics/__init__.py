"""The contract between lemongraph's producers and consumers: topic names and
the pydantic model of every message on every topic (docs/kafka.md).

Every message is a JSON object with a ``type`` and a ``schema`` version. A
consumer decodes with :func:`decode_inbox` (inbox) or the model's
``model_validate_json``; a producer encodes with :func:`encode`. Adding an
optional field keeps the schema version; anything else bumps it.

Hot paths that build records by the thousand use :mod:`topics.build`: plain
data with exactly each model's fields, proven to agree with the models by
``tests/topics/test_builders.py``.

This package imports nothing of ours (``topics/ruff.toml`` makes that a lint rule).
"""

from topics import build, mail, replies
from topics._codec import RecordError, decode_inbox, encode
from topics._contract import ContractError
from topics._deadletter import (
    DEADLETTER_HEADERS,
    DeadLetter,
    Headers,
)
from topics._decisions import (
    FORWARDED_FROM_HEADER,
    AtomVerdict,
    ClockBound,
    DecisionInput,
    DecisionRecord,
    Effect,
    EventInput,
    ExplanationRecord,
    JobFinishedEffect,
    JobSnapshot,
    MilestoneSnapshot,
    PlaybookRecord,
    RecordForward,
    RecordOrigin,
    SchedulePromptTask,
    StartInput,
    TaskClosedEffect,
    TaskClosedRecord,
    TaskOpenedEffect,
    TaskOpenedRecord,
    TaskRecord,
    TickInput,
    TimerCancelledEffect,
    TimerRecord,
    TimerSetEffect,
    TransitionRecord,
    VerdictRecord,
)
from topics._errors import describe_errors, first_error
from topics._journal import (
    APPROVERS_DEFAULT,
    Answerer,
    Approver,
    JournalFlow,
    JournalHandlerCall,
    JournalInterrupt,
    JournalMail,
    JournalModelCall,
    JournalRecord,
    JournalRun,
    JournalToolCall,
    MessageRecord,
    ShownField,
    Tokens,
    inbound_message,
)
from topics._keys import MAX_KEY_LENGTH, JobKey, JobKeyError, check_key
from topics._limits import MAX_DEPTH, MAX_RECORD_BYTES, LimitError, plain_json
from topics._messages import (
    InboxEvent,
    InboxMessage,
    JobStart,
    ScheduleId,
    ScheduleWake,
    TickRecord,
)
from topics._names import TOPIC_NAMES, Topics
from topics._schedules import (
    SCHEDULE_HEADER,
    SCHEDULE_RUN_HEADER,
    AuditRecord,
    ScheduleRecord,
    ScheduleReport,
    ScheduleRunRecord,
    ScheduleRunsRecord,
)
from topics._vocab import (
    SCHEMA,
    SOURCES,
    JobStatus,
    MilestoneStatus,
    Source,
    TaskOutcome,
    TimerKind,
    event_id,
)

__all__ = [
    "APPROVERS_DEFAULT",
    "DEADLETTER_HEADERS",
    "FORWARDED_FROM_HEADER",
    "MAX_DEPTH",
    "MAX_KEY_LENGTH",
    "MAX_RECORD_BYTES",
    "SCHEDULE_HEADER",
    "SCHEDULE_RUN_HEADER",
    "SCHEMA",
    "SOURCES",
    "TOPIC_NAMES",
    "Answerer",
    "Approver",
    "AtomVerdict",
    "AuditRecord",
    "ClockBound",
    "ContractError",
    "DeadLetter",
    "DecisionInput",
    "DecisionRecord",
    "Effect",
    "EventInput",
    "ExplanationRecord",
    "Headers",
    "InboxEvent",
    "InboxMessage",
    "JobFinishedEffect",
    "JobKey",
    "JobKeyError",
    "JobSnapshot",
    "JobStart",
    "JobStatus",
    "JournalFlow",
    "JournalHandlerCall",
    "JournalInterrupt",
    "JournalMail",
    "JournalModelCall",
    "JournalRecord",
    "JournalRun",
    "JournalToolCall",
    "LimitError",
    "MessageRecord",
    "MilestoneSnapshot",
    "MilestoneStatus",
    "PlaybookRecord",
    "RecordError",
    "RecordForward",
    "RecordOrigin",
    "ScheduleId",
    "SchedulePromptTask",
    "ScheduleRecord",
    "ScheduleReport",
    "ScheduleRunRecord",
    "ScheduleRunsRecord",
    "ScheduleWake",
    "ShownField",
    "Source",
    "StartInput",
    "TaskClosedEffect",
    "TaskClosedRecord",
    "TaskOpenedEffect",
    "TaskOpenedRecord",
    "TaskOutcome",
    "TaskRecord",
    "TickInput",
    "TickRecord",
    "TimerCancelledEffect",
    "TimerKind",
    "TimerRecord",
    "TimerSetEffect",
    "Tokens",
    "Topics",
    "TransitionRecord",
    "VerdictRecord",
    "build",
    "check_key",
    "decode_inbox",
    "describe_errors",
    "encode",
    "event_id",
    "first_error",
    "inbound_message",
    "mail",
    "plain_json",
    "replies",
]
