"""The words every layer shares: who vouches for an event, where a milestone
and a job stand, how a task ended, and how an event is named when it has no
idempotency key. Declared once, here (docs/decisions.md says what each means).

The statuses and outcomes are ``StrEnum``s: each member *is* its wire string
(``MilestoneStatus.OPEN == "open"``), so records, state and hashes read and
write the same bytes as plain strings did, while code that builds them names a
member instead of spelling a string.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal, TypeAlias

__all__ = [
    "SCHEMA",
    "SOURCES",
    "JobStatus",
    "MilestoneStatus",
    "Source",
    "TaskOutcome",
    "TimerKind",
    "event_id",
]

#: The schema version of every record this code writes and reads (a record
#: says it in its ``schema`` field; docs/kafka.md, "Records the worker writes").
SCHEMA: Final = 1

#: Who vouches for an event: ``world`` (an inbound event), ``tool`` (a result
#: recorded by trusted code) or ``agent`` (what a model said: never evidence).
Source: TypeAlias = Literal["world", "tool", "agent"]
SOURCES: tuple[Source, ...] = ("world", "tool", "agent")


class MilestoneStatus(StrEnum):
    """Where a milestone stands. ``pending`` and ``open`` can move; the other
    four never change again (settled)."""

    PENDING = "pending"
    OPEN = "open"
    DONE = "done"
    KNOCKED = "knocked"
    DROPPED = "dropped"
    UNREACHABLE = "unreachable"


class JobStatus(StrEnum):
    """Where a job stands: running until its goals are met (done) or cannot be
    (failed). A job whose goals were met through a milestone marked ``ends:
    completed_with_override`` ends ``completed_with_override``, never ``done``
    (docs/playbooks.md, "Ending with an override"). The three last are terminal."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    COMPLETED_WITH_OVERRIDE = "completed_with_override"


class TaskOutcome(StrEnum):
    """How a milestone's task (and the milestone) ended: its condition held
    (``done``), failed while the world was open (``knocked``) or when the
    window closed (``timed_out``), or it stopped mattering (``dropped``)."""

    DONE = "done"
    KNOCKED = "knocked"
    TIMED_OUT = "timed_out"
    DROPPED = "dropped"


#: A job timer: ``settle`` closes a milestone's window, ``due`` emits its task.
TimerKind: TypeAlias = Literal["settle", "due"]


def event_id(partition: int, offset: int) -> str:
    """The id of an event without an idempotency key: where its producer put it
    on the inbox, ``p<partition>@<offset>`` (verdict explanations cite it)."""
    return f"p{partition}@{offset}"
