"""How a job is stored: a small text header, then the state's canonical JSON.

    LG2 <partition> <next due ms or -> <p>:<offset>[,<p>:<offset>...]\\n{...state...}

The header says which due-time index row the job has (stream/engine/timers.py: the
row is moved in the same table write, and a row that disagrees with the header
is stale), and lets a worker recognise a re-delivered inbox record, without
parsing the state. It is written in the same table write as the state, so the
two never disagree.

The last field is the job's :class:`Applied` positions: per inbox partition,
the last offset applied *from* that partition. A job is decided only on its
home partition, but a record a producer put on another partition reaches it
there as a forwarded copy (see ``stream/engine/engine.py``), so one job can have
applied records from several partitions; an offset is only ever compared with
an offset of the same partition. ``LG1 <partition> <offset> <due>`` (one
position, the home partition's) is still read.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import JobState

__all__ = [
    "NOTHING_APPLIED",
    "Applied",
    "Stored",
    "decode_stored",
    "encode_stored",
    "next_due_ms",
    "peek_header",
]

_MAGIC = b"LG2"
_MAGIC_V1 = b"LG1"


class Applied:
    """Where a job's inbox records came from: the last applied offset per
    inbox partition. Immutable: :meth:`after` returns a new one.

    The only way to compare an offset with this is :meth:`covers`, which
    compares it with the offset of its own partition; an offset of one
    partition can never be compared with an offset of another."""

    __slots__ = ("_last",)

    def __init__(self, last: dict[int, int] | None = None) -> None:
        self._last: dict[int, int] = last if last is not None else {}

    def covers(self, partition: int, offset: int) -> bool:
        """Has the record at ``partition``/``offset`` (or a later one of that
        partition) been applied to this job?"""
        return self._last.get(partition, -1) >= offset

    def after(self, partition: int, offset: int) -> Applied:
        """These positions with ``partition`` advanced to ``offset``."""
        last = dict(self._last)
        last[partition] = offset
        return Applied(last)

    def items(self) -> list[tuple[int, int]]:
        """(partition, last offset) pairs, by partition."""
        return sorted(self._last.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Applied) and self._last == other._last

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        return f"Applied({self._last!r})"

    def encode(self) -> bytes:
        """``p:o,p:o`` (``-`` when empty)."""
        if not self._last:
            return b"-"
        return b",".join(b"%d:%d" % (p, o) for p, o in self.items())

    @classmethod
    def decode(cls, raw: bytes) -> Applied:
        """The inverse of :meth:`encode`."""
        if raw == b"-":
            return cls()
        last: dict[int, int] = {}
        for part in raw.split(b","):
            partition, offset = part.split(b":")
            last[int(partition)] = int(offset)
        return cls(last)


NOTHING_APPLIED = Applied()


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored job: its home partition, the inbox records applied, its state."""

    partition: int
    applied: Applied
    next_due_ms: int | None
    state: JobState


def next_due_ms(state: JobState) -> int | None:
    """The job's earliest timer in epoch milliseconds."""
    if state.status != "running" or not state.timers:
        return None
    return int(state.timers[0].at.timestamp() * 1000)


def encode_stored(partition: int, applied: Applied, state: JobState) -> bytes:
    """Header and state as bytes."""
    due = next_due_ms(state)
    header = b"%s %d %s %s\n" % (
        _MAGIC,
        partition,
        b"-" if due is None else b"%d" % due,
        applied.encode(),
    )
    return header + state.to_bytes()


def _header(raw: bytes) -> tuple[int, int | None, Applied]:
    end = raw.index(b"\n")
    fields = raw[:end].split(b" ")
    if fields[0] == _MAGIC and len(fields) == 4:
        _, partition, due, applied = fields
        return int(partition), None if due == b"-" else int(due), Applied.decode(applied)
    if fields[0] == _MAGIC_V1 and len(fields) == 4:
        _, partition, offset, due = fields
        home = int(partition)
        last = {home: int(offset)} if int(offset) >= 0 else {}
        return home, None if due == b"-" else int(due), Applied(last)
    raise ValueError(f"not a stored job (header {raw[:end]!r})")


def peek_header(raw: bytes) -> tuple[int, int | None]:
    """(partition, next due ms) without parsing the state."""
    partition, due, _applied = _header(raw)
    return partition, due


def decode_stored(raw: bytes) -> Stored:
    """The inverse of :func:`encode_stored`."""
    partition, due, applied = _header(raw)
    return Stored(partition, applied, due, JobState.from_bytes(raw[raw.index(b"\n") + 1 :]))
