"""The contract between lemongraph's producers and consumers: topic names and
the pydantic model of every message on every topic (SPEC §5).

Every message is a JSON object with a ``type`` and a ``schema`` version. A
consumer decodes with :func:`decode_inbox` (inbox) or the model's
``model_validate_json``; a producer encodes with :func:`encode`. Adding an
optional field keeps the schema version; anything else bumps it.

This package imports nothing of ours (``topics/ruff.toml`` makes that a lint rule).
"""

from ._codec import RecordError, decode_inbox, encode
from ._limits import MAX_DEPTH, MAX_RECORD_BYTES, LimitError, plain_json
from ._messages import (
    DEADLETTER_HEADERS,
    FORWARDED_FROM_HEADER,
    SCHEMA,
    ClockBound,
    DeadLetter,
    DecisionRecord,
    InboxEvent,
    InboxMessage,
    JobSnapshot,
    JobStart,
    MilestoneSnapshot,
    PlaybookRecord,
    RecordForward,
    RecordOrigin,
    TaskClosedRecord,
    TaskOpenedRecord,
    TaskRecord,
    TickRecord,
)
from ._names import TOPIC_NAMES, Topics
from ._vocab import (
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
    "ClockBound",
    "DeadLetter",
    "DecisionRecord",
    "InboxEvent",
    "InboxMessage",
    "JobSnapshot",
    "JobStart",
    "JobStatus",
    "LimitError",
    "MilestoneSnapshot",
    "MilestoneStatus",
    "PlaybookRecord",
    "RecordError",
    "RecordForward",
    "RecordOrigin",
    "Source",
    "TaskClosedRecord",
    "TaskOpenedRecord",
    "TaskOutcome",
    "TaskRecord",
    "TickRecord",
    "TimerKind",
    "Topics",
    "decode_inbox",
    "encode",
    "event_id",
    "plain_json",
]
