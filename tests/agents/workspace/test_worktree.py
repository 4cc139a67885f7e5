"""A worktree per job (docs/coding.md, "Worktrees"), with real git: seeded
with what the user has (tracked, uncommitted, untracked not ignored), a
standalone copy for a repository with no commit, a fingerprint that moves
with the files and nothing else, the patch back (applied whole, or on a
conflict not at all), the resume check, and the worktree's removal."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agents.workspace.fingerprint import check_resume, fingerprint
from agents.workspace.worktree import (
    Workspaces,
    WorktreeError,
    apply_back,
    close_worktree,
    job_patch,
    open_worktree,
    safe_name,
)
from tests.agents.coding.repos import COMMITTED, make_repo, sh_git, snapshot, write

JOB = "coding-task/fix #7"


def user_work(repo: Path) -> None:
    """What a user has in the repository and has not committed."""
    write(repo, {"src/app.py": "def answer():\n    return 42\n", "notes/todo.md": "- fix\n"})
    write(repo, {"staged.txt": "staged\n"})
    sh_git(repo, "add", "staged.txt")
    (repo / "src/util.py").unlink()
    write(repo, {"build/out.txt": "built\n", "debug.log": "noise\n"})  # ignored


def test_seeded_with_tracked_uncommitted_and_untracked_files_not_ignored(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    user_work(repo)
    status = sh_git(repo, "status", "--porcelain")
    head = sh_git(repo, "rev-parse", "HEAD")

    wt = open_worktree(repo, JOB, tmp_path / "data")

    assert wt.path == (tmp_path / "data" / "worktrees" / safe_name(JOB)).resolve()
    assert wt.branch == f"lemongraph/{safe_name(JOB)}"
    assert not wt.standalone
    files = snapshot(wt.path)
    assert files == {
        ".gitignore": COMMITTED[".gitignore"].encode(),
        "README.md": COMMITTED["README.md"].encode(),
        "src/app.py": b"def answer():\n    return 42\n",
        "notes/todo.md": b"- fix\n",
        "staged.txt": b"staged\n",
    }  # util.py deleted, build/ and debug.log ignored: as the user has it
    # the seed is committed on the job's branch over the source's HEAD: the
    # job's own patch and fingerprint start empty
    assert sh_git(wt.path, "rev-parse", "HEAD^") == head
    assert sh_git(wt.path, "branch", "--show-current").strip() == wt.branch
    assert job_patch(wt) == (b"", ())
    assert fingerprint(wt.path)["diff_sha256"] == fingerprint(wt.path)["untracked_sha256"]
    # the source repository is as it was
    assert sh_git(repo, "status", "--porcelain") == status
    assert sh_git(repo, "rev-parse", "HEAD") == head
    # opening it again (a resume) returns the same worktree, made once
    assert open_worktree(repo, JOB, tmp_path / "data") == wt
    assert Workspaces(tmp_path / "data").root(JOB) == wt.path
    assert sh_git(wt.path, "rev-parse", "HEAD").strip() == wt.base


def test_a_clean_repository_gives_a_worktree_at_its_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wt = open_worktree(repo, JOB, tmp_path / "data")
    assert wt.base == sh_git(repo, "rev-parse", "HEAD").strip()  # nothing to seed


def test_a_repository_with_no_commit_gets_a_standalone_copy(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", commit=False)
    write(repo, {"debug.log": "ignored\n"})
    wt = open_worktree(repo, JOB, tmp_path / "data")
    assert wt.standalone
    files = snapshot(wt.path)
    assert files == {name: text.encode() for name, text in COMMITTED.items()}
    assert sh_git(wt.path, "rev-parse", "HEAD").strip() == wt.base  # one base commit
    assert sh_git(wt.path, "branch", "--show-current").strip() == wt.branch
    # diffs work: a change is the job's patch, and it applies to the source
    write(wt.path, {"src/app.py": "def answer():\n    return 42\n"})
    assert job_patch(wt)[1] == ("src/app.py",)
    applied = apply_back(wt)
    assert applied.ok
    assert applied.files == ("src/app.py",)
    assert (repo / "src/app.py").read_text() == "def answer():\n    return 42\n"
    close_worktree(wt)
    assert not wt.path.exists()
    assert Workspaces(tmp_path / "data").get(JOB) is None


def test_the_fingerprint_moves_with_the_files_and_nothing_else(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wt = open_worktree(repo, JOB, tmp_path / "data")
    first = fingerprint(wt.path)
    assert fingerprint(wt.path) == first  # deterministic
    assert first["head"] == wt.base
    assert first["branch"] == wt.branch
    app = wt.path / "src/app.py"
    later = time.time() + 5
    os.utime(app, (later, later))
    write(wt.path, {"build/x.o": "ignored\n"})
    assert fingerprint(wt.path) == first  # a touch and an ignored file: no change
    write(wt.path, {"src/app.py": "def answer():\n    return 42\n"})
    edited = fingerprint(wt.path)
    assert edited["diff_sha256"] != first["diff_sha256"]
    assert edited["untracked_sha256"] == first["untracked_sha256"]
    write(wt.path, {"src/new.py": "x = 1\n"})
    added = fingerprint(wt.path)
    assert added["untracked_sha256"] != edited["untracked_sha256"]
    write(wt.path, {"src/new.py": "x = 2\n"})
    assert fingerprint(wt.path)["untracked_sha256"] != added["untracked_sha256"]
    (wt.path / "src/new.py").unlink()
    write(wt.path, {"src/app.py": COMMITTED["src/app.py"]})
    assert fingerprint(wt.path) == first  # back as it was


def test_the_patch_back_applies_the_jobs_changes_only(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    write(repo, {"README.md": "# Demo\n\nHello, user.\n"})  # the user's, uncommitted
    wt = open_worktree(repo, JOB, tmp_path / "data")
    write(wt.path, {"src/app.py": "def answer():\n    return 42\n", "tests/test_app.py": "ok\n"})
    (wt.path / "src/util.py").unlink()
    # Bytecode caches (not ignored here) never go back (docs/coding.md).
    write(wt.path, {"src/__pycache__/app.cpython-311.pyc": "x", "__pycache__/t.pyc": "y"})
    applied = apply_back(wt)
    assert applied.ok, applied.why
    assert applied.files == ("src/app.py", "src/util.py", "tests/test_app.py")
    assert (repo / "src/app.py").read_text() == "def answer():\n    return 42\n"
    assert (repo / "tests/test_app.py").read_text() == "ok\n"
    assert not (repo / "src/util.py").exists()
    assert not (repo / "src/__pycache__").exists()
    assert (repo / "README.md").read_text() == "# Demo\n\nHello, user.\n"  # once
    # the working tree only: the user's index and commits are theirs
    assert sh_git(repo, "diff", "--cached", "--name-only") == ""
    assert sh_git(repo, "log", "--format=%s") == "init\n"
    assert wt.path.is_dir()  # closing it is the caller's step


def test_a_conflicting_patch_fails_safely(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wt = open_worktree(repo, JOB, tmp_path / "data")
    write(wt.path, {"src/app.py": "def answer():\n    return 42\n", "added.txt": "new\n"})
    write(repo, {"src/app.py": "def answer():\n    return 40 + 1\n"})  # the user, meanwhile
    before = snapshot(repo)
    applied = apply_back(wt)
    assert not applied.ok
    assert "does not apply" in applied.why
    assert "src/app.py" in applied.why
    assert snapshot(repo) == before  # all or nothing: added.txt is not there either
    assert (wt.path / "src/app.py").read_text() == "def answer():\n    return 42\n"  # kept


def test_the_resume_check(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wt = open_worktree(repo, JOB, tmp_path / "data")
    write(wt.path, {"src/app.py": "def answer():\n    return 42\n"})
    at_checkpoint = fingerprint(wt.path)
    assert check_resume(wt.path, at_checkpoint) is None
    write(wt.path, {"README.md": "changed by hand\n"})
    refused = check_resume(wt.path, at_checkpoint)
    assert refused is not None
    assert not refused.fails
    assert refused.reason == "changed"
    assert refused.expected == at_checkpoint
    assert refused.actual == fingerprint(wt.path)
    assert "tracked files" in refused.why
    sh_git(wt.path, "commit", "--quiet", "-am", "someone ran git")
    moved = check_resume(wt.path, at_checkpoint)
    assert moved is not None
    assert moved.fails
    assert "head was" in moved.why
    sh_git(wt.path, "switch", "--quiet", "-c", "elsewhere")
    moved = check_resume(wt.path, at_checkpoint)
    assert moved is not None
    assert moved.fails
    assert "branch was" in moved.why
    close_worktree(wt)
    gone = check_resume(wt.path, at_checkpoint)
    assert gone is not None
    assert gone.fails
    assert gone.actual is None


def test_closing_removes_the_worktree_its_branch_and_its_record(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wt = open_worktree(repo, JOB, tmp_path / "data")
    write(wt.path, {"scratch.txt": "left over\n"})
    close_worktree(wt)
    assert not wt.path.exists()
    assert not wt.record.exists()
    assert wt.branch not in sh_git(repo, "branch", "--list")
    assert str(wt.path) not in sh_git(repo, "worktree", "list")
    close_worktree(wt)  # again: nothing left to do


def test_a_half_made_worktree_is_made_again_and_a_gone_one_is_an_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    data = tmp_path / "data"
    half = data / "worktrees" / safe_name(JOB)
    write(half, {"junk.txt": "a crash left this\n"})  # no record: never made whole
    wt = open_worktree(repo, JOB, data)
    assert not (wt.path / "junk.txt").exists()
    assert (wt.path / "src/app.py").exists()
    with pytest.raises(WorktreeError, match=r"worktree of .*repo, not job"):
        open_worktree(make_repo(tmp_path / "other"), JOB, data)  # another repository
    sh_git(repo, "worktree", "remove", "--force", str(wt.path))
    with pytest.raises(WorktreeError, match="is gone"):
        open_worktree(repo, JOB, data)
