"""The coding flow's handlers (agents/coding/handlers.py), in process, on real
git repositories and the real worktrees, leases and validation: a second job
on a repository is refused with the first's key; a validation's facts go to
the inbox as ``source: tool`` with the fingerprint; at a checkpoint the lease is
paused, and an answer after a person changed the worktree is not taken (both
fingerprints said), after git moved its HEAD the route is ``moved`` (the job
fails); the worktree is watched while the job waits (``journal.worktree``:
each change said once, both fingerprints); the router counts attempts, and
``revise`` grants exactly one; the review rule is the operator's or
deterministic (a changed AGENTS.md is reviewed); the research step lets only
the catalog's read-only tools through, refuses and journals the others, and
bounds the model's notes."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.coding.cli import changed_here
from agents.coding.handlers import (
    after_validation,
    coding_open,
    coding_pause,
    coding_resume,
    coding_revise,
    coding_risk,
    coding_validate,
    review_required,
)
from agents.coding.research import MAX_FINDINGS, coding_research, coding_research_calls
from agents.coding.watch import Watches, watch_worktrees
from agents.flows.handlers import HandlerContext
from agents.workspace.fingerprint import fingerprint
from agents.workspace.lease import LeaseHeld, Leases
from agents.workspace.worktree import Workspaces
from stream.runtime.config import Settings
from tests.agents.coding.repos import make_repo, sh_git
from topics import JournalToolCall, JournalWorktree

VALIDATE = [{"text": "test -f answer.txt", "source": "operator", "line": 1, "kind": "validate"}]


def context(data: Path, job: str, sent: list[tuple[str, BaseModel]]) -> HandlerContext:
    async def publish(topic: str, key: str, record: BaseModel) -> None:
        sent.append((topic, record))

    workspaces = SimpleNamespace(workspaces=Workspaces(data))  # what the executor carries
    return HandlerContext(job, f"{job}/change#1", f"{job}/change#1/n/1/1", "coding-change",
                          "n", publish, workspaces)  # fmt: skip


def test_open_validate_and_the_lease(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    data = tmp_path / "data"
    sent: list[tuple[str, BaseModel]] = []
    first = context(data, "code-1", sent)
    opened = coding_open({"repo": str(repo)}, first)
    assert Path(opened["path"]).is_dir()
    assert set(opened["fingerprint"]) == {"head", "branch", "diff_sha256", "untracked_sha256"}
    with pytest.raises(LeaseHeld, match="code-1"):
        coding_open({"repo": str(repo)}, context(data, "code-2", []))
    assert coding_open({"repo": str(repo)}, first)["path"] == opened["path"]  # a resume

    view: dict[str, Any] = {"validate": VALIDATE, "validation_source": "operator"}
    failed = asyncio.run(coding_validate(view, first))
    assert (failed["verdict"], failed["attempt"], failed["exit_codes"]) == ("failed", 1, [1])
    (Path(opened["path"]) / "answer.txt").write_text("42\n")
    passed = asyncio.run(coding_validate({**view, "validation": failed}, first))
    assert (passed["verdict"], passed["attempt"], passed["exit_codes"]) == ("passed", 2, [0])
    facts: list[Any] = [r for topic, r in sent if topic == "inbox"]
    assert [(f.action, f.source) for f in facts] == [
        ("validation_failed", "tool"), ("validation_passed", "tool")
    ]  # fmt: skip
    assert facts[1].properties["fingerprint"] == passed["fingerprint"]
    assert facts[1].properties["fingerprint"] != failed["fingerprint"]


def test_attempts_and_revise() -> None:
    def route(attempt: int, extra: int = 0, verdict: str = "failed") -> str:
        view = {"validation": {"verdict": verdict, "attempt": attempt}, "max_attempts": 2,
                "extra_attempts": extra}  # fmt: skip
        return after_validation(view)

    assert [route(1), route(2), route(1, verdict="passed")] == ["retry", "checkpoint", "passed"]
    assert route(1, verdict="env_failed") == "checkpoint"  # uses up no attempt
    extra = coding_revise({"validation": {"attempt": 2}, "max_attempts": 2})
    assert (extra, route(3, extra), route(4, extra)) == (1, "checkpoint", "checkpoint")
    assert route(2, extra) == "retry"
    # revised again after attempt 3: exactly one more again (attempt 4, the last)
    again = coding_revise({"validation": {"attempt": 3}, "max_attempts": 2})
    assert (again, route(4, again)) == (2, "checkpoint")


def test_an_environment_failure_uses_no_attempt(tmp_path: Path) -> None:
    """docs/coding.md, "Environment failures": its own fact, a checkpoint at
    once, and the run after it is the same attempt again, with facts of its own."""
    repo = make_repo(tmp_path / "repo")
    sent: list[tuple[str, BaseModel]] = []
    job = context(tmp_path / "data", "code-6", sent)
    worktree = Path(coding_open({"repo": str(repo)}, job)["path"])
    check = [{"text": "./check.sh", "source": "operator", "line": 1, "kind": "validate"}]
    view: dict[str, Any] = {"validate": check, "validation_source": "operator", "max_attempts": 2}
    broken = asyncio.run(coding_validate(view, job))  # ./check.sh: not found (exit 127)
    assert {k: broken[k] for k in ("verdict", "attempt", "used", "run")} == {
        "verdict": "env_failed", "attempt": 1, "used": 0, "run": 1
    }  # fmt: skip
    assert after_validation({**view, "validation": broken}) == "checkpoint"  # at once
    (worktree / "check.sh").write_text("#!/bin/sh\nexit 1\n")  # the environment fixed
    (worktree / "check.sh").chmod(0o755)
    failed = asyncio.run(coding_validate({**view, "validation": broken}, job))
    assert {k: failed[k] for k in ("verdict", "attempt", "used", "run")} == {
        "verdict": "failed", "attempt": 1, "used": 1, "run": 2
    }  # fmt: skip
    assert after_validation({**view, "validation": failed}) == "retry"  # one attempt left
    facts: list[Any] = [r for topic, r in sent if topic == "inbox"]
    assert [f.action for f in facts] == ["validation_env_failed", "validation_failed"]
    assert len({f.idempotency_key for f in facts}) == 2  # each run's own


def _opened(
    tmp_path: Path, key: str
) -> tuple[Path, Path, HandlerContext, Path, list[tuple[str, BaseModel]]]:
    """A repository, a data folder, a job's context, its worktree opened, what it sent."""
    repo = make_repo(tmp_path / "repo")
    data = tmp_path / "data"
    sent: list[tuple[str, BaseModel]] = []
    job = context(data, key, sent)
    return repo, data, job, Path(coding_open({"repo": str(repo)}, job)["path"]), sent


def test_a_checkpoint_pauses_the_lease_and_checks_the_worktree(tmp_path: Path) -> None:
    repo, data, job, worktree, sent = _opened(tmp_path, "code-3")
    paused = asyncio.run(coding_pause({}, job))
    assert Leases(data).holder(repo).state == "paused"  # type: ignore[union-attr]
    assert paused["watch"] == job.call_id
    taken = asyncio.run(coding_resume({"decision": "revise", "paused": paused}, job))
    assert taken == {"route": "revise", "why": ""}
    assert Leases(data).holder(repo).state == "running"  # type: ignore[union-attr]
    # The watch began before the question and ended with the answer taken.
    said = [r for topic, r in sent if topic == "journal"]
    assert [(r.status, r.watch) for r in said] == [("same", job.call_id), ("ended", job.call_id)]
    assert said[0].expected == paused["fingerprint"]
    assert Watches(data).held("code-3") is None

    paused = asyncio.run(coding_pause({}, job))
    (worktree / "src" / "app.py").write_text("def answer():\n    return 42\n")  # by hand
    refused = asyncio.run(
        coding_resume({"decision": "accept_failed_validation", "paused": paused}, job)
    )
    assert refused["route"] == "changed"
    assert "the worktree changed since the checkpoint (tracked files)" in refused["why"]
    assert refused["expected"] == paused["fingerprint"]
    assert refused["actual"]["diff_sha256"] != paused["fingerprint"]["diff_sha256"]
    assert Leases(data).holder(repo).state == "paused"  # type: ignore[union-attr]
    assert Watches(data).held("code-3") is not None  # not taken: still watched

    paused = asyncio.run(coding_pause({}, job))  # asked again: from the worktree as it is now
    sh_git(worktree, "commit", "--quiet", "-am", "someone ran git")
    moved = asyncio.run(coding_resume({"decision": "revise", "paused": paused}, job))
    assert moved["route"] == "moved"
    assert "git was run in it" in moved["why"]
    assert Watches(data).held("code-3") is None  # taken (the job fails): the watch ended


def test_the_watch_says_each_change_of_a_waiting_jobs_worktree_once(tmp_path: Path) -> None:
    _, data, job, worktree, sent = _opened(tmp_path, "code-5")
    workspaces = Workspaces(data)

    async def publish(topic: str, key: str, record: JournalWorktree) -> None:
        sent.append((topic, record))

    def look() -> list[tuple[str, str | None]]:
        before = len(sent)
        asyncio.run(watch_worktrees(workspaces, publish))
        return [(r.status, (r.found or {}).get("diff_sha256"))  # type: ignore[attr-defined]
                for _, r in sent[before:]]  # fmt: skip

    assert look() == []  # no job waits: nothing to look at
    paused = asyncio.run(coding_pause({}, job))
    expected = paused["fingerprint"]
    assert look() == []  # as at the checkpoint: nothing new to say
    app = worktree / "src" / "app.py"
    kept = app.read_text()
    app.write_text("def answer():\n    return 42\n")  # by hand
    changed = fingerprint(worktree)
    assert look() == [("changed", changed["diff_sha256"])]
    said = sent[-1][1]
    assert isinstance(said, JournalWorktree)
    assert (said.expected, said.found, said.watch) == (expected, dict(changed), job.call_id)
    assert look() == []  # said once
    app.write_text(kept)  # back as it was
    assert look() == [("same", None)]
    sh_git(worktree, "commit", "--quiet", "--allow-empty", "-m", "someone ran git")
    assert look()[0][0] == "moved"
    # A watch whose worktree is gone (its job ended) is dropped, saying nothing.
    shutil.rmtree(worktree)
    assert look() == []
    assert Watches(data).held("code-5") is None


def test_the_review_rule_is_the_operators_or_deterministic(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    data = tmp_path / "data"
    job = context(data, "code-4", [])
    worktree = Path(coding_open({"repo": str(repo)}, job)["path"])
    (worktree / "src" / "app.py").write_text("def answer():\n    return 42\n")
    plain = coding_risk({"review": "auto"}, job)
    assert (plain["files"], plain["required"]) == (["src/app.py"], False)
    assert "+    return 42" in plain["diff"]
    assert coding_risk({"review": "always"}, job)["required"] is True
    # The model changing what validates the repository is always reviewed under auto.
    (worktree / "AGENTS.md").write_text("## Tests\n\n- `true`\n")
    risky = coding_risk({"review": "auto"}, job)
    assert risky["required"] is True
    assert risky["why"] == "it changes AGENTS.md"
    assert coding_risk({"review": "never"}, job)["required"] is False
    many = [f"src/m{i}.py" for i in range(6)]
    assert review_required("auto", many) == (True, "it touches 6 files, over 5")


@pytest.mark.parametrize("layout", ["agents", "embedded/agents"])
def test_code_resume_checks_the_worktree_where_the_service_keeps_it(
    tmp_path: Path, layout: str
) -> None:
    """`lemongraph code resume`'s own check (agents/coding/cli.py): under
    LEMONGRAPH_DATA_DIR, or under `dev`'s `embedded` folder."""
    data = tmp_path / "data"
    repo = make_repo(tmp_path / "repo")
    job = context(data / layout / "coding", "code-7", [])
    worktree = Path(coding_open({"repo": str(repo)}, job)["path"])
    paused = asyncio.run(coding_pause({}, job))["fingerprint"]
    settings = Settings(data_dir=data)
    assert changed_here(settings, "code-7", paused) is None
    (worktree / "src" / "app.py").write_text("def answer():\n    return 42\n")  # by hand
    refused = changed_here(settings, "code-7", paused)
    assert refused is not None
    assert (refused["route"], refused["expected"]) == ("changed", paused)
    assert refused["actual"] == dict(fingerprint(worktree))


def test_research_lets_only_reads_through(tmp_path: Path) -> None:
    """docs/coding.md, "Research": a call of a tool that writes, or of one the
    catalog does not have, is refused and journaled; the notes are bounded."""
    catalog = load_catalog(
        "agents:\n  conversation: {instructions: You change repositories.}\ntools:\n"
        "  read_file: {description: Read., workspace: {op: read}}\n"
        "  write_file: {description: Write., workspace: {op: write}}\n"
        "  peek: {description: Read too., workspace: {op: read}, writes: true}\n"
    )
    sent: list[tuple[str, BaseModel]] = []
    ctx = context(tmp_path, "code-9", sent)
    ctx.tools.catalog = catalog
    ctx = HandlerContext(**{**vars(ctx), "node": "research_check"})
    read = {"name": "read_file", "id": "r", "args": {"path": "a.py"}}
    write = {"name": "write_file", "id": "w", "args": {"path": "a.py", "content": "x"}}
    calls = [read, write, {"name": "peek", "id": "p", "args": {}}, {"name": "rm", "id": "x"}]
    said = {"calls": calls, "findings": [f"f{i}" for i in range(30)], "files": ["a.py"]}
    notes = asyncio.run(coding_research({"research_out": said}, ctx))
    assert notes["asked"] is True
    assert notes["calls"] == [read]
    assert [r["name"] for r in notes["refused"]] == ["write_file", "peek", "rm"]
    assert len(notes["findings"]) == MAX_FINDINGS
    assert coding_research_calls({"notes": notes}) == [read]
    journaled: list[Any] = [r for topic, r in sent if topic == "journal"]
    assert all(isinstance(r, JournalToolCall) for r in journaled)
    assert [(r.tool, r.outcome, r.node) for r in journaled] == [
        ("write_file", "refused", "research_check"), ("peek", "refused", "research_check"),
        ("rm", "refused", "research_check"),
    ]  # fmt: skip
    assert not [r for topic, r in sent if topic == "inbox"]  # no fact: notes are a claim
    done = asyncio.run(coding_research({"research_out": {"calls": []}}, ctx))
    assert (done["asked"], done["calls"], done["findings"]) == (False, [], [])
