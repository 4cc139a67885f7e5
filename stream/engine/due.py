"""The engine's due-time index of timers, jobs' and schedules' alike
(docs/operations.md, "The due-time index"; its row keys are
stream/engine/timers.py): which timers of a partition are due at a tick, which
a tick could not decide (parked), and where the next tick starts reading (the
floor). A tick of either decider reads it the same way (stream/engine/engine.py):
:meth:`DueIndex.due`, then per timer :meth:`~DueIndex.parked` and, once its
state is read, :meth:`~DueIndex.fires`, then :meth:`~DueIndex.settle`."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from stream.engine.batch import Batch, TimerRef
from stream.engine.registry import Registry
from stream.engine.timers import clamp_due, due_key, due_range, parse_due_key
from stream.runtime.errors import StorageError

__all__ = ["PARKED_MAX", "DueIndex", "Scan", "no_rows"]

#: Reads the rows of a partition's table whose keys are in [low, high), in key
#: order: ``scan(partition, low, high)``.
Scan = Callable[[int, str, str], Iterable[tuple[str, bytes]]]

#: The most timers the index keeps parked (see ``DueIndex._parked``).
PARKED_MAX = 10_000


def no_rows(_partition: int, _low: str, _high: str) -> Iterable[tuple[str, bytes]]:
    """A table with no rows to scan."""
    return ()


class DueIndex:
    """The due-time index as the engine's ticks read it, over ``scan`` (the
    table), with the timers parked and the floors kept between batches."""

    def __init__(self, registry: Registry, scan: Scan) -> None:
        self.registry = registry
        self.scan = scan
        #: timer → (the due time a tick could not decide it at, the registry's
        #: size then, or -1 for a failure): not read again until the job (or
        #: schedule) is decided otherwise, a playbook is registered (for a job
        #: whose playbook was missing), or partitions are reassigned. Parked
        #: timers do not hold the floor back. At most PARKED_MAX, the oldest
        #: forgotten first (a forgotten one is read again after the next
        #: assignment or registration).
        self._parked: OrderedDict[TimerRef, tuple[int, int]] = OrderedDict()
        #: The registry's size when ticks last read the index.
        self._registered = len(registry)
        #: (partition, kind) → no row of the index is due before this: a tick
        #: reads from here, not over the deleted rows of the timers fired
        #: before (RocksDB tombstones, read until compaction drops them).
        #: Unknown after an assignment: the first tick reads from the start.
        self._floor: dict[tuple[int, str], int] = {}

    def clear(self) -> None:
        """Partitions were (re)assigned: forget what is parked and the floors."""
        self._parked.clear()
        self._floor.clear()

    def committed(self, batch: Batch) -> None:
        """The batch's writes are stored: its floors hold, lowered again for
        every timer the batch moved earlier."""
        floors = self._floor
        floors.update(batch.floors)
        for (p, kind, _name), (was, now) in batch.timers.items():
            if now is not None and now != was:
                where = (p, kind)
                known = floors.get(where)
                if known is not None and clamp_due(now) < known:
                    floors[where] = clamp_due(now)

    def due(
        self, partition: int, kind: str, now_ms: int, batch: Batch, limit: int = 0
    ) -> list[tuple[int, str, bool]]:
        """The timers of ``kind`` due at or before ``now_ms`` in ``partition``,
        as (due ms, name, read from the table), earliest first: the index rows
        of the table up to ``now_ms`` (only those are read), with this batch's
        own due times in place of the stored ones. Check each with
        :meth:`fires` once its state is read. With ``limit``, at most that many
        rows that are not parked are read: the rest stay due, and the floor
        stays behind them."""
        if len(self.registry) != self._registered:
            # A playbook was registered: the timers parked for want of one
            # (below every floor) are read again.
            self._registered = len(self.registry)
            self._floor.clear()
        low, high = due_range(kind, now_ms)
        floor = self._floor.get((partition, kind))
        if floor is not None:
            low = max(low, due_key(kind, floor, ""))
        timers = batch.timers
        out: list[tuple[int, str, bool]] = []
        try:
            read = 0
            for key, _value in self.scan(partition, low, high) if low < high else ():
                due, name = parse_due_key(key)
                if (partition, kind, name) in timers or self.parked(partition, kind, name, due):
                    continue  # the batch's own due time (below), or parked
                out.append((due, name, True))
                read += 1
                if read == limit:
                    # Rows due after this one wait for the next tick.
                    where = (partition, kind)
                    batch.floors[where] = min(due, batch.floors.get(where, due))
                    break
        except Exception as exc:
            raise StorageError(
                f"cannot read the due-time index of partition {partition}: {exc}"
            ) from exc
        for (p, k, name), (_was, now) in timers.items():
            if p == partition and k == kind and now is not None and now <= now_ms:
                out.append((clamp_due(now), name, False))
        out.sort()
        return out

    def settle(
        self,
        partition: int,
        kind: str,
        now_ms: int,
        candidates: list[tuple[int, str, bool]],
        batch: Batch,
    ) -> None:
        """After a tick decided ``candidates`` (of :meth:`due`): every timer of
        ``kind`` that was due is now at its current due time (fired and moved,
        or kept), and none is earlier than the first of those, or ``now_ms + 1``.
        That is where the next tick starts reading, once the batch is stored
        (``committed`` lowers it again for every row the batch writes)."""
        floor = clamp_due(now_ms + 1)
        for due, name, _from_table in candidates:
            if self.parked(partition, kind, name, due):
                continue  # read again after what unparks it (see ``_parked``)
            entry = batch.timers.get((partition, kind, name))
            if entry is None:  # not read: its row stays
                floor = min(floor, due)
            elif entry[1] is not None:
                floor = min(floor, clamp_due(entry[1]))
        where = (partition, kind)
        batch.floors[where] = min(floor, batch.floors.get(where, floor))

    def parked(self, partition: int, kind: str, name: str, due: int) -> bool:
        """Could a tick not decide this timer at this due time (and has nothing
        that unparks it happened since)?"""
        entry = self._parked.get((partition, kind, name))
        if entry is None or entry[0] != due:
            return False
        return entry[1] in (-1, len(self.registry))

    def park(
        self, partition: int, kind: str, name: str, due: int, *, missing: bool = False
    ) -> None:
        """A tick failed to decide this timer (``missing``: its playbook is not
        registered): leave it until it is decided otherwise (or registered)."""
        parked = self._parked
        parked[(partition, kind, name)] = (due, len(self.registry) if missing else -1)
        parked.move_to_end((partition, kind, name))
        while len(parked) > PARKED_MAX:
            parked.popitem(last=False)

    def unpark(self, partition: int, kind: str, name: str) -> None:
        """The timer was decided otherwise: a tick may fire it again."""
        self._parked.pop((partition, kind, name), None)

    def fires(
        self, partition: int, kind: str, name: str, due: int, from_table: bool, batch: Batch
    ) -> bool:
        """Is ``due`` (of :meth:`due`) the timer's due time, now that its state
        was read (``batch.timers`` has it)? A row of the table that is not is
        stale (a changelog applied part-way: stream/engine/timers.py), and deleted."""
        where = (partition, kind, name)
        entry = batch.timers.get(where)
        now = entry[1] if entry is not None else None
        if now is not None and clamp_due(now) == due:
            return True
        if from_table:
            stale = (due_key(kind, due, name), partition)
            if stale not in batch.stale:
                batch.stale.append(stale)
        return False

    # -- batches ----------------------------------------------------------------------
