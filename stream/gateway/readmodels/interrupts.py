"""The flows' open questions the gateway's read model keeps, per job (docs/api.md,
"Approvals"): what ``POST /v1/jobs/{key}/answers`` accepts."""

from __future__ import annotations

from typing import Any

from topics import JournalInterrupt

__all__ = ["OpenQuestions"]


class OpenQuestions(dict[str, dict[str, dict[str, Any]]]):
    """Per job, by interrupt id: each ``journal.interrupt`` open and not yet
    answered, expired or cancelled, and no answer on ``messages``. Kept when a job
    is evicted (an open question is small and closes in time)."""

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
