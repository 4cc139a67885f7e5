"""One writer per repository: a lease per repository path (docs/coding.md,
"One writer per repository").

A lease is a file under the data folder, ``leases/<hash of the repository's
top folder>.json``, holding ``{repo, job_key, pid, host, state, since}``:
the job that edits the repository, and the process that runs it. While it is
there, every other job is refused with the holder's job key. A ``running``
lease whose process is dead (on this host: no such pid, a zombie, or a pid
reused by a process that started later) is reclaimed by the next job; a
``paused`` lease (a job waiting at a checkpoint) never is, whatever became of
its process: only its job resumes or releases it.

Every change is made under an exclusive ``flock`` of the lease's lock file and
written by rename, so that two processes racing for one repository see one
winner; the lease itself is never half written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from agents.errors import AgentsError
from agents.workspace.worktree import WorktreeError, source_top

__all__ = ["Lease", "LeaseError", "LeaseHeld", "Leases", "pid_alive", "process_start"]

LEASES = "leases"


@dataclass(frozen=True)
class Lease:
    """Who edits a repository: the job, its process (``pid`` on ``host``,
    started at ``pid_start`` clock ticks after boot, when known), ``running``
    or ``paused``, and since when (ISO 8601, UTC)."""

    repo: str
    job_key: str
    pid: int
    host: str
    state: Literal["running", "paused"]
    since: str
    pid_start: int | None = None


class LeaseError(AgentsError):
    """A lease cannot be changed as asked (the job holds none)."""


class LeaseHeld(LeaseError):
    """Another job holds the repository's lease: :attr:`holder` says which."""

    def __init__(self, holder: Lease, why: str = "") -> None:
        self.holder = holder
        said = why or (
            f"the repository {holder.repo} is being edited by job {holder.job_key} "
            f"({holder.state} since {holder.since}, pid {holder.pid} on {holder.host})"
        )
        super().__init__(said)


class Leases:
    """The leases kept under ``data_dir``, taken for this process (``pid`` on
    ``host``: by default, this one)."""

    def __init__(self, data_dir: Path, *, pid: int | None = None, host: str | None = None) -> None:
        self.folder = data_dir / LEASES
        self.pid = os.getpid() if pid is None else pid
        self.host = socket.gethostname() if host is None else host

    # -- reading ------------------------------------------------------------------------------

    def path(self, repo: Path) -> Path:
        """The lease file of ``repo`` (keyed by its top folder's resolved path)."""
        return self.folder / f"{hashlib.sha256(str(_top(repo)).encode()).hexdigest()[:32]}.json"

    def holder(self, repo: Path) -> Lease | None:
        """The lease held on ``repo``, or None."""
        return _read(self.path(repo))

    # -- changing -----------------------------------------------------------------------------

    def acquire(self, repo: Path, job_key: str) -> Lease:
        """Take ``repo``'s lease for ``job_key`` (``running``, this process).
        :class:`LeaseHeld` while another job holds it; a running lease of a
        dead process on this host is taken over. The job's own lease is taken
        again (a job resumed after a restart, or a pause ended)."""
        path = self.path(repo)
        with self._locked(path):
            held = _read(path)
            if held is not None and held.job_key != job_key:
                self._check_stale(held)
            lease = Lease(
                repo=str(_top(repo)),
                job_key=job_key,
                pid=self.pid,
                host=self.host,
                state="running",
                since=_now(),
                pid_start=process_start(self.pid),
            )
            _write(path, lease)
            return lease

    def resume(self, repo: Path, job_key: str) -> Lease:
        """The job's paused lease running again, in this process (or taken anew
        when it has none): as :meth:`acquire`."""
        return self.acquire(repo, job_key)

    def pause(self, repo: Path, job_key: str) -> Lease:
        """Mark the job's lease ``paused`` (the job waits at a checkpoint): no
        one reclaims it. :class:`LeaseHeld` when another job holds it,
        :class:`LeaseError` when none does."""
        path = self.path(repo)
        with self._locked(path):
            held = self._own(path, repo, job_key)
            lease = replace(held, state="paused", since=_now())
            _write(path, lease)
            return lease

    def release(self, repo: Path, job_key: str) -> bool:
        """Give up the job's lease; whether it held one."""
        path = self.path(repo)
        with self._locked(path):
            held = _read(path)
            if held is None or held.job_key != job_key:
                return False
            path.unlink()
            return True

    # -- steps ---------------------------------------------------------------------------------

    def _check_stale(self, held: Lease) -> None:
        """Refuse (:class:`LeaseHeld`) unless ``held`` is a running lease of a
        dead process on this host: that one may be taken over."""
        if held.state == "paused":
            raise LeaseHeld(held)
        if held.host != self.host:
            raise LeaseHeld(
                held,
                f"the repository {held.repo} is being edited by job {held.job_key} "
                f"(running on another host, {held.host}: its process cannot be checked "
                f"from here, so its lease is not taken over)",
            )
        if pid_alive(held.pid, held.pid_start):
            raise LeaseHeld(held)

    def _own(self, path: Path, repo: Path, job_key: str) -> Lease:
        held = _read(path)
        if held is None:
            raise LeaseError(f"job {job_key} holds no lease on {_top(repo)}")
        if held.job_key != job_key:
            raise LeaseHeld(held)
        return held

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """Hold the exclusive lock of the lease at ``path`` (its ``.lock`` file)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing it drops the lock


def _top(repo: Path) -> Path:
    """The repository's top folder (its path, resolved, when it is no git one)."""
    try:
        return source_top(repo)
    except WorktreeError:
        return repo.resolve()


def _read(path: Path) -> Lease | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return Lease(**json.loads(raw))


def _write(path: Path, lease: Lease) -> None:
    """Write ``lease`` whole: a temporary file, then a rename over ``path``."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as file:
        file.write(json.dumps(asdict(lease), indent=1).encode())
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def process_start(pid: int) -> int | None:
    """When the process ``pid`` started (clock ticks after boot, from
    ``/proc``), or None when that cannot be read (no such process, no /proc)."""
    stat = _proc_stat(pid)
    return int(stat[19]) if stat is not None and len(stat) > 19 else None


def pid_alive(pid: int, started: int | None = None) -> bool:
    """Whether the process ``pid`` runs on this host: not when there is no
    such process, when it is a zombie, or when ``started`` says it is another
    process that got the same pid."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    stat = _proc_stat(pid)
    if stat is None:
        return True
    if stat[0] in ("Z", "X"):
        return False
    return started is None or len(stat) <= 19 or int(stat[19]) == started


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (the
    state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()
