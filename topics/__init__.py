"""The contract between lemongraph's producers and consumers: topic names and
the pydantic model of every message on every topic (SPEC §5).

Every message is a JSON object with a ``type`` and a ``schema`` version. A
consumer decodes with :func:`decode_inbox` (inbox) or the model's
``model_validate_json``; a producer encodes with :func:`encode`. Adding an
optional field keeps the schema version; anything else bumps it.

Hot paths that build records by the thousand use :mod:`topics.build`: plain
data with exactly each model's fields, proven to agree with the models by
``tests/topics/test_builders.py``.

This package imports nothing of ours (``topics/ruff.toml`` makes that a lint rule).
"""

from . import build
from ._codec import RecordError, decode_inbox, encode
from ._limits import MAX_DEPTH, MAX_RECORD_BYTES, LimitError, plain_json
from ._messages import (
    DEADLETTER_HEADERS,
    FORWARDED_FROM_HEADER,
    AtomVerdict,
    ClockBound,
    DeadLetter,
    DecisionInput,
    DecisionRecord,
    Effect,
    EventInput,
    ExplanationRecord,
    Headers,
    InboxEvent,
    InboxMessage,
    JobFinishedEffect,
    JobSnapshot,
    JobStart,
    JournalModelCall,
    JournalRecord,
    JournalRun,
    JournalToolCall,
    MessageRecord,
    MilestoneSnapshot,
    PlaybookRecord,
    RecordForward,
    RecordOrigin,
    StartInput,
    TaskClosedEffect,
    TaskClosedRecord,
    TaskOpenedEffect,
    TaskOpenedRecord,
    TaskRecord,
    TickInput,
    TickRecord,
    TimerCancelledEffect,
    TimerRecord,
    TimerSetEffect,
    Tokens,
    TransitionRecord,
    VerdictRecord,
    inbound_message,
)
from ._names import TOPIC_NAMES, Topics
from ._vocab import (
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
    "DEADLETTER_HEADERS",
    "FORWARDED_FROM_HEADER",
    "MAX_DEPTH",
    "MAX_RECORD_BYTES",
    "SCHEMA",
    "SOURCES",
    "TOPIC_NAMES",
    "AtomVerdict",
    "ClockBound",
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
    "JobSnapshot",
    "JobStart",
    "JobStatus",
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
    "decode_inbox",
    "encode",
    "event_id",
    "inbound_message",
    "plain_json",
]
