"""The timer index: which jobs of a partition are due, without scanning the
jobs that are merely pending.

Per partition, a min-heap of ``(due_ms, job_key)`` and a map of each job's
current earliest due time. An entry is valid only while it matches the map, so
rescheduling a job costs one push and no search (stale entries are skipped
when they surface). Popping what is due costs O(k log n) for k due of n
pending: flat in what is pending.

The index is derived state: the earliest due time is written in every stored
job's header (see ``stream/store.py``), and the index is rebuilt from those
headers when partitions are assigned.
"""

from __future__ import annotations

import heapq

__all__ = ["TimerIndex"]


class TimerIndex:
    """Earliest due time per job, by partition."""

    def __init__(self) -> None:
        self._heaps: dict[int, list[tuple[int, str]]] = {}
        self._due: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._due)

    def clear(self) -> None:
        """Forget everything (before a rebuild)."""
        self._heaps.clear()
        self._due.clear()

    def set(self, partition: int, job: str, due_ms: int | None) -> None:
        """Job ``job`` next wakes at ``due_ms`` (None: no timer)."""
        if due_ms is None:
            self._due.pop(job, None)
            return
        if self._due.get(job) == due_ms:
            return
        self._due[job] = due_ms
        heapq.heappush(self._heaps.setdefault(partition, []), (due_ms, job))

    def pop_due(self, partition: int, now_ms: int) -> list[str]:
        """Jobs of ``partition`` due at or before ``now_ms``, earliest first.
        They leave the index; the caller sets their next due time."""
        heap = self._heaps.get(partition)
        out: list[str] = []
        while heap and heap[0][0] <= now_ms:
            due, job = heapq.heappop(heap)
            if self._due.get(job) == due:
                del self._due[job]
                out.append(job)
        return out

    def next_due(self, job: str) -> int | None:
        """The job's earliest due time, if it has one."""
        return self._due.get(job)
