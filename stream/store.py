"""How a job is stored: a small text header, then the state's canonical JSON.

    LG1 <partition> <last inbox offset> <next due ms or ->\\n{...state...}

The header lets a worker rebuild its timer index, and recognise a re-delivered
inbox record, without parsing the state. It is written in the same table write
as the state, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import JobState

__all__ = ["Stored", "decode_stored", "encode_stored", "next_due_ms", "peek_header"]

_MAGIC = b"LG1"


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored job: where it lives, the last inbox offset applied, and its state."""

    partition: int
    offset: int  # the last inbox offset applied to this job (-1: none)
    next_due_ms: int | None
    state: JobState


def next_due_ms(state: JobState) -> int | None:
    """The job's earliest timer in epoch milliseconds."""
    if state.status != "running" or not state.timers:
        return None
    return int(state.timers[0].at.timestamp() * 1000)


def encode_stored(partition: int, offset: int, state: JobState) -> bytes:
    """Header and state as bytes."""
    due = next_due_ms(state)
    header = b"%s %d %d %s\n" % (_MAGIC, partition, offset, b"-" if due is None else b"%d" % due)
    return header + state.to_bytes()


def peek_header(raw: bytes) -> tuple[int, int, int | None]:
    """(partition, offset, next due ms) without parsing the state."""
    end = raw.index(b"\n")
    magic, partition, offset, due = raw[:end].split(b" ")
    if magic != _MAGIC:
        raise ValueError(f"not a stored job (header {raw[:end]!r})")
    return int(partition), int(offset), None if due == b"-" else int(due)


def decode_stored(raw: bytes) -> Stored:
    """The inverse of :func:`encode_stored`."""
    partition, offset, due = peek_header(raw)
    return Stored(partition, offset, due, JobState.from_bytes(raw[raw.index(b"\n") + 1 :]))
