"""The due-time index: which jobs and schedules of a partition are due, read
from the table itself, so that a tick reads what is due and nothing else.

Every job with a timer, and every schedule with a due time, has one row of the
job table (the same RocksDB database per partition, the same changelog) whose
key orders it by due time::

    \\x00due/j/<due ms, 15 digits>/<job key>
    \\x00due/s/<due ms, 15 digits>/<schedule id>

A tick of partition p at ``now`` reads the keys of p's database from
``\\x00due/j/`` up to ``\\x00due/j/<now + 1>/``: the due ones, in (due, key)
order, whatever the number of jobs merely pending. Nothing is rebuilt when
partitions are assigned, and the rows survive what the job state survives
(docs/operations.md, "The due-time index"): Faust's changelog recovery on
another machine restores them like any other row.

The index is kept exact by the batch that changes a due time: ``Batch.writes``
(stream/engine/engine.py) puts the new row and deletes the old one in the same table
write as the state, and orders a batch's rows so that any prefix of them (a
changelog applied part-way, see ``JobTable.catch_up``) leaves every due time
in the index, perhaps with a stale row beside it: new rows first, then the
states, then the deletions. A stale row is recognised when a tick reads it (its
due time is not the one in the stored job's header) and deleted then.

The due time in a key is clamped to [0, 10^15 - 1] ms, so that keys sort as
numbers (every instant a decision can be made at is within).
"""

from __future__ import annotations

__all__ = [
    "DUE_PREFIX",
    "DUE_VALUE",
    "INDEX_MARK",
    "JOBS",
    "SCHEDULES",
    "clamp_due",
    "due_key",
    "due_range",
    "parse_due_key",
]

#: Every row of the index starts with this (a key no job can have).
DUE_PREFIX = "\x00due/"
#: The kinds of timers, each a range of its own.
JOBS = "j"
SCHEDULES = "s"
#: The value of an index row (the key says everything; a Kafka record's empty
#: value is not a tombstone, but one byte is plainly not one).
DUE_VALUE = b"1"
#: Present in a partition's database once its index is complete: written,
#: through the changelog, when a partition without it is assigned, with the
#: index rows of what it stores (none, for a new one): ``Engine.index_rows``.
INDEX_MARK = "\x00due-index"

_WIDTH = 15
_LAST = 10**_WIDTH - 1


def clamp_due(due_ms: int) -> int:
    """The due time as its key orders it."""
    return 0 if due_ms < 0 else _LAST if due_ms > _LAST else due_ms


def due_key(kind: str, due_ms: int, name: str) -> str:
    """The index row of ``name`` (a job key or a schedule id) due at ``due_ms``."""
    return f"{DUE_PREFIX}{kind}/{clamp_due(due_ms):015d}/{name}"


def due_range(kind: str, now_ms: int) -> tuple[str, str]:
    """[low, high): the keys of ``kind``'s rows due at or before ``now_ms``."""
    low = f"{DUE_PREFIX}{kind}/"
    if now_ms >= _LAST:
        return low, f"{DUE_PREFIX}{kind}0"  # "0" follows "/": the whole kind
    return low, f"{DUE_PREFIX}{kind}/{clamp_due(now_ms + 1):015d}/"


def parse_due_key(key: str) -> tuple[int, str]:
    """(due ms, name) of an index row's key."""
    start = len(DUE_PREFIX) + 2
    return int(key[start : start + _WIDTH]), key[start + _WIDTH + 1 :]
