"""A worktree's fingerprint, and the check a resume makes with it
(docs/coding.md, "Worktrees").

The fingerprint is what git sees of the worktree: its HEAD, its branch, a
SHA-256 of ``git diff HEAD`` (binary, no renames, full index, fixed prefixes:
the same tree gives the same bytes whatever the user's config) and a SHA-256
of its untracked files that no ignore rule hides (their names and contents,
sorted). Ignored files are outside it. It is a dict, so it goes into a fact or
an answer as it is.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

from agents.workspace.gitrun import GitError, git

__all__ = [
    "DIFF_ARGS",
    "Fingerprint",
    "ResumeRefusal",
    "check_resume",
    "fingerprint",
    "fingerprint_text",
    "untracked",
]

#: How a diff is taken, whatever the user's git config says.
DIFF_ARGS = (
    "--binary", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
    "--full-index", "--src-prefix=a/", "--dst-prefix=b/",
)  # fmt: skip
_CHUNK = 1 << 16


class Fingerprint(TypedDict):
    """What git sees of a worktree (docs/coding.md, "Worktrees")."""

    head: str
    branch: str
    diff_sha256: str
    untracked_sha256: str


@dataclass(frozen=True)
class ResumeRefusal:
    """Why a job may not resume. ``fails``: the worktree's HEAD or branch moved
    (or it is gone), and the job fails; otherwise its files changed since the
    checkpoint, and the resume is refused (a 409 with both fingerprints)."""

    fails: bool
    why: str
    expected: Fingerprint
    actual: Fingerprint | None

    @property
    def reason(self) -> Literal["moved", "changed"]:
        return "moved" if self.fails else "changed"


def fingerprint(worktree: Path) -> Fingerprint:
    """The fingerprint of the worktree at ``worktree`` (:class:`GitError` when
    it is not one)."""
    head = git(["rev-parse", "--verify", "-q", "HEAD"], worktree, ok=(0, 1)).decode().strip()
    branch = git(["symbolic-ref", "-q", "HEAD"], worktree, ok=(0, 1)).decode().strip()
    diff = git(["diff", "HEAD", *DIFF_ARGS], worktree) if head else b""
    return Fingerprint(
        head=head,
        branch=branch.removeprefix("refs/heads/"),
        diff_sha256=hashlib.sha256(diff).hexdigest(),
        untracked_sha256=_untracked_hash(worktree),
    )


def untracked(worktree: Path) -> list[str]:
    """The worktree's untracked files that no ignore rule hides, sorted."""
    out = git(["ls-files", "-z", "--others", "--exclude-standard"], worktree)
    return sorted(name for name in out.decode("utf-8", "surrogateescape").split("\0") if name)


def _untracked_hash(worktree: Path) -> str:
    """SHA-256 over each untracked file's name and content (a link's target,
    a nested repository's name only), framed so no two sets hash alike."""
    digest = hashlib.sha256()
    for name in untracked(worktree):
        encoded = name.encode("utf-8", "surrogateescape")
        digest.update(b"%d:%s\0" % (len(encoded), encoded))
        path = worktree / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            digest.update(b"-")
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.fsencode(os.readlink(path))
            digest.update(b"L%d:%s" % (len(target), target))
        elif stat.S_ISREG(st.st_mode):
            digest.update(b"F%d:%o:" % (st.st_size, st.st_mode & 0o111))
            with path.open("rb") as file:
                while chunk := file.read(_CHUNK):
                    digest.update(chunk)
        else:
            digest.update(b"D")
    return digest.hexdigest()


def fingerprint_text(found: Fingerprint | None) -> str:
    """A fingerprint on one line, its hashes cut to 12 characters (what a
    person compares; the records keep them whole)."""
    if found is None:
        return "(no worktree)"
    return (
        f"head {found['head'][:12] or '(none)'}, branch {found['branch'] or '(none)'}, "
        f"diff {found['diff_sha256'][:12]}, untracked {found['untracked_sha256'][:12]}"
    )


def check_resume(worktree: Path, expected: Fingerprint) -> ResumeRefusal | None:
    """None when the worktree is as ``expected`` (the fingerprint taken at the
    checkpoint); else why not. A changed HEAD or branch, or a worktree that is
    gone, fails the job; changed files refuse the resume."""
    try:
        actual = fingerprint(worktree)
    except (GitError, OSError) as exc:
        why = f"the worktree {worktree} is gone or broken: {exc}"
        return ResumeRefusal(True, why, expected, None)
    moved = [
        f"{what} was {expected[what] or '(none)'}, now {actual[what] or '(none)'}"
        for what in ("head", "branch")
        if expected[what] != actual[what]
    ]
    if moved:
        why = "the worktree's " + "; ".join(moved) + ": git was run in it, and the job fails"
        return ResumeRefusal(True, why, expected, actual)
    changed = []
    if expected["diff_sha256"] != actual["diff_sha256"]:
        changed.append("tracked files")
    if expected["untracked_sha256"] != actual["untracked_sha256"]:
        changed.append("untracked files")
    if changed:
        why = f"the worktree changed since the checkpoint ({' and '.join(changed)})"
        return ResumeRefusal(False, why, expected, actual)
    return None
