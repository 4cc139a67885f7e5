"""Watching the worktree of a job that waits at a checkpoint (docs/coding.md,
"A changed worktree: the 409").

The checkpoint's ``pause`` handler begins a watch: a file under the agents
service's data folder, ``agents/coding/watches/<job>.json``, holding the job,
the run and the worktree's fingerprint at the checkpoint; it says so on the
journal (a ``journal.worktree`` ``same``). Every :data:`WATCH_EVERY` seconds
the agents service fingerprints each watched worktree again and, when what it
finds is no longer what it last said, says the new state on the journal:
``changed`` (its files changed: both fingerprints), ``same`` (they came back),
``moved`` (git moved its HEAD or branch). The gateway keeps the newest of a
job's and answers an answer to that run's open question 409
``worktree_changed`` while it says ``changed`` (stream/gateway/routes/answers.py).
The ``resume`` handler ends the watch when an answer is taken (``ended``).

The file outlives the process: a restarted service goes on watching a job
that still waits, and a watch is said (published) before the file records it,
so a crash in between says it again, never not at all.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, cast

from topics import JournalWorktree

from agents.workspace.fingerprint import Fingerprint, check_resume
from agents.workspace.worktree import Workspaces, safe_name, write_atomic

__all__ = ["WATCH_EVERY", "Watch", "Watches", "watch_worktrees"]

#: How often the agents service looks at the worktrees of waiting jobs
#: (seconds): a fingerprint is ``git diff`` and the untracked files' hashes.
WATCH_EVERY: Final = 2.0
#: The folder of the watches, under the coding data folder.
WATCHES: Final = "watches"

Status = Literal["same", "changed", "moved", "ended"]
Publish = Callable[[Literal["journal"], str, JournalWorktree], Awaitable[None]]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Watch:
    """One waiting job's watch as its file holds it: the job, the run, the
    watch's id (the ``pause`` call's), the fingerprint at the checkpoint and
    the state last said."""

    job_key: str
    run_id: str
    watch: str
    expected: Fingerprint
    status: Status

    def record(self, status: Status, found: Fingerprint | None, why: str = "") -> JournalWorktree:
        return JournalWorktree(
            job_key=self.job_key, run_id=self.run_id, watch=self.watch, at=_now(), status=status,
            expected=dict(self.expected), found=dict(found) if found is not None else None,
            why=why,
        )  # fmt: skip


class Watches:
    """The watches under a coding data folder (``<data>/agents/coding``)."""

    def __init__(self, data_dir: Path) -> None:
        self.folder = data_dir / WATCHES

    def path(self, job_key: str) -> Path:
        return self.folder / (safe_name(job_key) + ".json")

    def begin(self, watch: Watch) -> JournalWorktree:
        """The watch of a job that is about to wait: recorded, and what says so."""
        self._write(watch)
        return watch.record("same", watch.expected)

    def end(self, watch: Watch) -> JournalWorktree:
        """An answer was taken: the watch is over, and what says so."""
        self.path(watch.job_key).unlink(missing_ok=True)
        return watch.record("ended", None)

    def held(self, job_key: str) -> Watch | None:
        """The job's watch, if one is on."""
        return self._read(self.path(job_key))

    def mark(self, record: JournalWorktree) -> None:
        """``record`` was said: the watch's file says it too (unless the watch
        ended meanwhile)."""
        watch = self.held(record.job_key)
        if watch is not None and watch.watch == record.watch:
            self._write(replace(watch, status=record.status))

    def look(self, workspaces: Workspaces) -> list[JournalWorktree]:
        """Each watched worktree whose state is not the one last said: the record
        that says it (not yet marked). A watch whose worktree is gone (its job
        ended) is dropped."""
        said: list[JournalWorktree] = []
        for path in sorted(self.folder.glob("*.json")):
            watch = self._read(path)
            worktree = workspaces.get(watch.job_key) if watch is not None else None
            if watch is None or worktree is None:
                path.unlink(missing_ok=True)
                continue
            refusal = check_resume(worktree.path, watch.expected)
            if refusal is None:
                status: Status = "same"
            else:
                status = "moved" if refusal.fails else "changed"
            if status != watch.status:
                why = refusal.why if refusal is not None else ""
                said.append(watch.record(status, refusal.actual if refusal else None, why))
        return said

    def _write(self, watch: Watch) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {
            "job_key": watch.job_key, "run_id": watch.run_id, "watch": watch.watch,
            "expected": dict(watch.expected), "status": watch.status,
        }  # fmt: skip
        write_atomic(self.path(watch.job_key), json.dumps(data).encode())

    @staticmethod
    def _read(path: Path) -> Watch | None:
        try:
            data: dict[str, Any] = json.loads(path.read_bytes())
            return Watch(
                str(data["job_key"]), str(data["run_id"]), str(data["watch"]),
                cast(Fingerprint, data["expected"]), data["status"],
            )  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None


async def watch_worktrees(workspaces: Workspaces, publish: Publish) -> int:
    """The agents service's timer (agents/app.py): look at every watched
    worktree (git, off the event loop) and say each change on the journal,
    then record it. How many were said."""
    watches = Watches(Path(workspaces.folder).parent)
    if not watches.folder.is_dir():
        return 0  # no coding job ever waited here
    said = await asyncio.to_thread(watches.look, workspaces)
    for record in said:
        watch = watches.held(record.job_key)
        if watch is None or watch.watch != record.watch:
            continue  # an answer was taken meanwhile: the watch ended
        await publish("journal", record.job_key, record)
        watches.mark(record)
    return len(said)
