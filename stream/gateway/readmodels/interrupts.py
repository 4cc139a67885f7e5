"""The flows' open questions the gateway's read model keeps, per job (docs/api.md,
"Approvals"): what ``POST /v1/jobs/{key}/answers`` accepts; and a coding job's
worktree changed while it waits, which refuses them (docs/coding.md, "A changed
worktree: the 409")."""

from __future__ import annotations

from typing import Any

from topics import JournalInterrupt, JournalWorktree

__all__ = ["OpenQuestions"]


class OpenQuestions(dict[str, dict[str, dict[str, Any]]]):
    """Per job, by interrupt id: each ``journal.interrupt`` open and not yet
    answered, expired or cancelled, and no answer on ``messages``. Kept when a job
    is evicted (an open question is small and closes in time)."""

    def __init__(self) -> None:
        super().__init__()
        #: Per job: the ``journal.worktree`` ``changed`` of the watch on now.
        self.changed: dict[str, dict[str, Any]] = {}
        #: Per job: the last watch that ended (a record of it said later is stale).
        self.ended: dict[str, str] = {}

    def worktree(self, record: JournalWorktree) -> None:
        """A coding job's worktree as the agents service watching it says: while
        it is ``changed``, an answer to the run's open question is refused."""
        key = record.job_key
        if record.status == "ended":
            self.ended[key] = record.watch
            self.changed.pop(key, None)
        elif self.ended.get(key) == record.watch:
            return  # said by the watcher after its watch ended: stale
        elif record.status == "changed":
            self.changed[key] = record.dump()
        else:
            self.changed.pop(key, None)

    def worktree_changed(self, key: str, asked: dict[str, Any]) -> dict[str, Any] | None:
        """The ``changed`` record that refuses an answer to ``asked``, if any."""
        found = self.changed.get(key)
        return found if found is not None and found["run_id"] == asked.get("run_id") else None

    def read(self, record: JournalInterrupt) -> None:
        """Track a flow's question: open, or closed (answered, expired, cancelled);
        a refused answer leaves it open."""
        held = self.setdefault(record.job_key, {})
        if record.status == "open":
            held[record.interrupt_id] = record.dump()
        elif record.status != "refused":  # refused: from someone who may not answer
            held.pop(record.interrupt_id, None)
        if not held:
            self.pop(record.job_key, None)

    def answered(self, key: str, interrupt_id: str) -> None:
        """An answer to ``interrupt_id`` was written (or read on ``messages``):
        it is no longer open, so a second answer is refused."""
        held = self.get(key)
        if held is not None:
            held.pop(interrupt_id, None)
            if not held:
                self.pop(key, None)
