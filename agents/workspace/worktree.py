"""An isolated worktree per job, and its patch back (docs/coding.md, "Worktrees").

:func:`open_worktree` makes ``<data>/worktrees/<job>``: a linked ``git
worktree`` on the branch ``lemongraph/<job>`` at the source repository's HEAD,
seeded with what the user has and git does not (the uncommitted changes to
tracked files, the untracked files no ignore rule hides) and that seed
committed on the job's branch, so that the job's patch is its own changes
only. A repository with no commit gets a standalone copy in a fresh ``git
init`` with one base commit. A record beside the worktree (``<job>.json``,
written last) says it is whole: opening a job's worktree again returns it, and
a half-made one (a crash while it was made) is made again.

:func:`apply_back` checks the job's patch against the source repository and
applies it to its working tree (never its index or its commits): all of it or,
on a conflict, nothing, the worktree kept and the reason returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agents.errors import AgentsError
from agents.workspace.fingerprint import DIFF_ARGS
from agents.workspace.gitrun import GitError, git

__all__ = [
    "Applied",
    "Workspaces",
    "Worktree",
    "WorktreeError",
    "apply_back",
    "close_worktree",
    "job_patch",
    "open_worktree",
    "safe_name",
    "source_top",
    "write_atomic",
]

#: Where the worktrees are, under the service's data folder.
WORKTREES = "worktrees"
#: The branch prefix of a job's worktree.
BRANCH_PREFIX = "lemongraph/"
#: What never goes in a job's patch, ignored or not (pathspecs): Python's
#: bytecode caches, which a validation run writes when the repository does not
#: ignore them (docs/coding.md, "Files the validation writes").
NOT_IN_PATCH = (":(exclude,glob)**/__pycache__/**",)


class WorktreeError(AgentsError):
    """The worktree cannot be made (not a git repository, another job's ...)."""


@dataclass(frozen=True)
class Worktree:
    """A job's worktree: where it is, its branch, the commit its patch is
    taken against (``base``: the source's HEAD, or the seed committed over
    it), the source repository's top folder, and whether it is a standalone
    copy (a source with no commit)."""

    job_key: str
    path: Path
    branch: str
    base: str
    source: Path
    standalone: bool

    @property
    def record(self) -> Path:
        """The record that says the worktree is whole (beside it)."""
        return self.path.with_name(self.path.name + ".json")

    def to_json(self) -> bytes:
        data = asdict(self)
        data.update(path=str(self.path), source=str(self.source))
        return json.dumps(data, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Worktree:
        data: dict[str, Any] = json.loads(raw)
        data.update(path=Path(data["path"]), source=Path(data["source"]))
        return cls(**data)


@dataclass(frozen=True)
class Applied:
    """How a patch back went: ``ok`` (applied, or nothing to apply), the
    files it touches, the patch's SHA-256, and why it was not applied."""

    ok: bool
    files: tuple[str, ...]
    patch_sha256: str
    why: str = ""


def safe_name(job_key: str) -> str:
    """A folder and branch name for a job key: its letters and digits (cut),
    and a hash of the whole key, so two keys never share one."""
    readable = re.sub(r"[^A-Za-z0-9_]+", "-", job_key).strip("-")[:48] or "job"
    return f"{readable}-{hashlib.sha256(job_key.encode()).hexdigest()[:12]}"


def source_top(repo: Path) -> Path:
    """The top folder of the git repository ``repo`` is in."""
    try:
        top = git(["rev-parse", "--show-toplevel"], repo).decode().strip()
    except (GitError, OSError) as exc:
        raise WorktreeError(f"{repo} is not in a git repository: {exc}") from None
    return Path(top).resolve()


class Workspaces:
    """The job → worktree mapping over a data folder: what the executor asks
    for a workspace tool's root (docs/coding.md, "The editor's tools")."""

    def __init__(self, data_dir: Path) -> None:
        self.folder = data_dir / WORKTREES

    def get(self, job_key: str) -> Worktree | None:
        """The job's worktree, if it was made whole and is there."""
        found = _recorded(self.folder / safe_name(job_key))
        if found is None or found.job_key != job_key or not found.path.is_dir():
            return None
        return found

    def root(self, job_key: str) -> Path | None:
        """Where the job's worktree is, or None."""
        found = self.get(job_key)
        return found.path if found is not None else None


def _recorded(path: Path) -> Worktree | None:
    """The worktree the record beside ``path`` describes (None: no record)."""
    try:
        return Worktree.from_json(path.with_name(path.name + ".json").read_bytes())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def open_worktree(repo: Path, job_key: str, data_dir: Path) -> Worktree:
    """The job's worktree of ``repo``: made, seeded and recorded, or, when it
    was made before (a resume), as it is (docs/coding.md, "Worktrees")."""
    top = source_top(repo)
    name = safe_name(job_key)
    path = (data_dir / WORKTREES).resolve() / name
    existing = _recorded(path)
    if existing is not None:
        if existing.job_key != job_key or existing.source != top:
            raise WorktreeError(
                f"{path} is job {existing.job_key}'s worktree of {existing.source}, "
                f"not job {job_key}'s of {top}"
            )
        if not existing.path.is_dir():
            raise WorktreeError(f"job {job_key}'s worktree {path} is gone")
        return existing
    branch = BRANCH_PREFIX + name
    try:
        _discard(top, path, branch)
        path.parent.mkdir(parents=True, exist_ok=True)
        head = git(["rev-parse", "--verify", "-q", "HEAD"], top, ok=(0, 1)).decode().strip()
        if head:
            base = _linked(top, path, branch, head, job_key)
        else:
            base = _standalone(top, path, branch, job_key)
    except (GitError, OSError) as exc:  # no record: the next open starts afresh
        raise WorktreeError(f"job {job_key}'s worktree of {top} could not be made: {exc}") from exc
    made = Worktree(job_key, path, branch, base, top, standalone=not head)
    write_atomic(made.record, made.to_json())
    return made


def _discard(top: Path, path: Path, branch: str) -> None:
    """Remove what a crash left of a worktree that was being made."""
    path.with_name(path.name + ".json").unlink(missing_ok=True)
    if path.exists() or path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    git(["worktree", "prune"], top)
    git(["branch", "-D", branch], top, ok=(0, 1))


def _linked(top: Path, path: Path, branch: str, head: str, job_key: str) -> str:
    """A linked worktree at ``head``, seeded; the commit its patch is against."""
    git(["worktree", "add", "--quiet", "-b", branch, str(path), head], top)
    diff = git(["diff", "HEAD", "--ignore-submodules=all", *DIFF_ARGS], top)
    if diff:
        git(["apply", "--binary", "--whitespace=nowarn", "-"], path, stdin=diff)
    _copy_all(top, path, _names(top, ["--others", "--exclude-standard"]))
    return _commit_seed(path, job_key, allow_empty=False)


def _standalone(top: Path, path: Path, branch: str, job_key: str) -> str:
    """A fresh repository holding a copy of the source's non-ignored files, on
    the job's branch, with one base commit."""
    path.mkdir(parents=True)
    git(["init", "--quiet"], path)
    git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], path)
    _copy_all(top, path, _names(top, ["--cached", "--others", "--exclude-standard"]))
    return _commit_seed(path, job_key, allow_empty=True)


def _names(top: Path, which: list[str]) -> list[str]:
    out = git(["ls-files", "-z", *which], top)
    return sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})


def _copy_all(top: Path, path: Path, names: list[str]) -> None:
    """Copy each named file: a regular file with its mode, a link as a link
    (the editor never follows one out); a nested repository is not copied."""
    for name in names:
        if name.endswith("/"):
            continue
        source, target = top / name, path / name
        try:
            st = os.lstat(source)
        except FileNotFoundError:  # deleted, not yet staged
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(st.st_mode):
            target.unlink(missing_ok=True)
            os.symlink(os.readlink(source), target)
        elif stat.S_ISREG(st.st_mode):
            shutil.copy2(source, target)


def _commit_seed(path: Path, job_key: str, *, allow_empty: bool) -> str:
    """Commit what was seeded (if anything, or always with ``allow_empty``);
    the commit the job's patch is taken against."""
    git(["add", "-A"], path)
    if allow_empty or _staged(path):
        message = f"lemongraph: the base of job {job_key}"
        git(["commit", "--quiet", "--no-verify", "--allow-empty", "-m", message], path)
    return git(["rev-parse", "HEAD"], path).decode().strip()


def _staged(path: Path) -> bool:
    """Whether the index differs from HEAD."""
    try:
        git(["diff", "--cached", "--quiet", "HEAD"], path)
    except GitError as exc:
        if exc.code == 1:
            return True
        raise
    return False


def job_patch(worktree: Worktree) -> tuple[bytes, tuple[str, ...]]:
    """The job's patch: every change in the worktree since its base, new files
    (not ignored) and deletions included, and the files it touches; never
    Python's bytecode caches (:data:`NOT_IN_PATCH`). Taken through a private
    index: the worktree's own index is not touched."""
    with tempfile.TemporaryDirectory(prefix="lemongraph-patch-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", worktree.base], worktree.path, env=env)
        git(["add", "-A", "--", ".", *NOT_IN_PATCH], worktree.path, env=env)
        diff = ["diff", "--cached", worktree.base]
        patch = git([*diff, *DIFF_ARGS], worktree.path, env=env)
        names = git([*diff, "--no-renames", "--name-only", "-z"], worktree.path, env=env)
    files = tuple(n for n in names.decode("utf-8", "surrogateescape").split("\0") if n)
    return patch, files


def apply_back(worktree: Worktree, repo: Path | None = None) -> Applied:
    """Apply the job's patch to the working tree of ``repo`` (by default the
    source): checked first, then applied whole; on a conflict nothing is
    written and the reason is returned. The worktree is kept either way."""
    patch, files = job_patch(worktree)
    digest = hashlib.sha256(patch).hexdigest()
    if not patch:
        return Applied(True, (), digest)
    try:
        target = source_top(repo or worktree.source)
    except WorktreeError as exc:
        return Applied(False, files, digest, str(exc))
    command = ["apply", "--binary", "--whitespace=nowarn"]
    try:
        git([*command, "--check", "-"], target, stdin=patch)
    except GitError as exc:
        return Applied(False, files, digest, f"the patch does not apply to {target}: {exc.said}")
    git([*command, "-"], target, stdin=patch)
    return Applied(True, files, digest)


def close_worktree(worktree: Worktree) -> None:
    """Remove the job's worktree, its branch and its record (the job ended)."""
    worktree.record.unlink(missing_ok=True)
    linked = not worktree.standalone and worktree.source.is_dir()
    if linked:
        try:
            git(["worktree", "remove", "--force", "--force", str(worktree.path)], worktree.source)
        except GitError:
            shutil.rmtree(worktree.path, ignore_errors=True)
            git(["worktree", "prune"], worktree.source)
        git(["branch", "-D", worktree.branch], worktree.source, ok=(0, 1))
    shutil.rmtree(worktree.path, ignore_errors=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file renamed)."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
