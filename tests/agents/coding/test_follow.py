"""The fold of a coding job's records into its lines, status and checkpoint
(agents/coding/follow.py, docs/coding.md, "`lemongraph code`"), in process,
from records made with the topics' own models."""

from __future__ import annotations

from typing import Any

import orjson

from agents.coding.follow import FLOW, JobView
from topics import (
    JournalHandlerCall,
    JournalInterrupt,
    JournalModelCall,
    JournalToolCall,
    JournalWorktree,
)

AT = "2026-12-06T22:00:00Z"
ANSWERS = ["revise", "accept_failed_validation", "abort"]


def _head(job: str) -> dict[str, Any]:
    return {"job_key": job, "run_id": f"{job}/change#1", "at": AT}


def _plan(job: str) -> dict[str, Any]:
    return JournalModelCall(
        **_head(job), agent="flow", request="...", latency_ms=3, outcome="ok", flow=FLOW,
        node="plan", response='{"steps": ["fix add()", "run the tests"], "files": ["calc.py"]}',
    ).model_dump(mode="json")  # fmt: skip


def _edit(job: str) -> dict[str, Any]:
    return JournalToolCall(
        **_head(job), agent="flow", tool="write_file", outcome="done", result="{}",
        arguments='{"content": "x", "path": "calc.py"}', latency_ms=2, flow=FLOW, node="tools",
    ).model_dump(mode="json")  # fmt: skip


def _validated(job: str, attempt: int, verdict: str, code: int) -> dict[str, Any]:
    result = {"verdict": verdict, "attempt": attempt, "exit_codes": [code]}
    return JournalHandlerCall(
        **_head(job), flow=FLOW, node="validate", kind="handler", name="coding_validate",
        call_id=f"{job}/change#1/validate/{attempt}/1", outcome="ok",
        result=orjson.dumps(result).decode(), latency_ms=40,
    ).model_dump(mode="json")  # fmt: skip


def _interrupt(job: str, status: str, **extra: Any) -> dict[str, Any]:
    return JournalInterrupt(
        **_head(job), flow=FLOW, node="checkpoint", interrupt_id=f"{job}/change#1/checkpoint/1",
        kind="ask", status=status, **extra,
    ).model_dump(mode="json")  # fmt: skip


def _decision(job: str, status: str) -> dict[str, Any]:
    """The fields of a decision record the fold reads."""
    return {"type": "decision", "job_key": job, "outcome": "applied", "status": status,
            "input": {"type": "event"}}  # fmt: skip


def test_the_fold_says_each_step_and_where_the_job_is() -> None:
    job = "code-1"
    view = JobView(job)
    records = [
        _decision(job, "running"),
        _plan(job),
        _edit(job),
        _validated(job, 1, "failed", 1),
        {**_plan("another-job")},  # another job's record: nothing
        _interrupt(job, "open", question="Validation failed 3 times. What now?", answers=ANSWERS),
    ]
    lines = [step.line() for r in records for step in view.add(r)]
    assert lines == [
        "plan: fix add(); run the tests",
        "edit: write_file calc.py (done)",
        "validation 1: failed (exit 1)",
        "checkpoint: Validation failed 3 times. What now?",
    ]
    assert view.where == "waiting"
    asked = view.checkpoint
    assert asked is not None
    assert asked.answers == tuple(ANSWERS)
    assert asked.allows(" Accept_Failed_Validation ") == "accept_failed_validation"
    assert asked.allows("accept") is None
    later = [
        _interrupt(job, "answered", answer="revise"),
        _validated(job, 2, "passed", 0),
        _decision(job, "done"),
    ]
    lines = [step.line() for r in later for step in view.add(r)]
    assert lines == ["answered: revise", "validation 2: passed (exit 0)", "status: done"]
    assert view.where == "done"
    assert view.checkpoint is None


def test_the_fold_keeps_what_the_watch_last_said_of_the_worktree() -> None:
    """docs/coding.md, "A changed worktree: the 409": a change is a step and
    refuses an answer; an answer taken ends the watch; a later word of it is stale."""
    job = "code-2"
    view = JobView(job)
    before, now = {"diff_sha256": "a" * 64}, {"diff_sha256": "b" * 64}

    def watch(status: str, name: str = "w-1") -> dict[str, Any]:
        return JournalWorktree(
            job_key=job, run_id=f"{job}/change#1", watch=name, at=AT, status=status,  # type: ignore[arg-type]
            expected=before, found=now if status == "changed" else None,
            why="the worktree changed since the checkpoint (tracked files)"
            if status == "changed" else "",
        ).model_dump(mode="json")  # fmt: skip

    steps = [s.line() for r in (watch("same"), watch("changed")) for s in view.add(r)]
    assert steps == ["worktree: the worktree changed since the checkpoint (tracked files)"]
    assert view.changed is not None
    assert (view.changed["expected"], view.changed["found"]) == (before, now)
    assert [s.line() for s in view.add(watch("same"))] == ["worktree: as at the checkpoint again"]
    assert view.changed is None
    view.add(watch("changed"))
    assert view.add(watch("ended")) == []
    assert view.changed is None
    assert view.add(watch("changed")) == []  # said after its watch ended: stale
    assert view.changed is None


def test_a_refused_start_is_said() -> None:
    view = JobView("code-2")
    steps = view.add(
        {"type": "decision", "job_key": "code-2", "outcome": "refused",
         "refused": "unknown playbook 'coding-task'", "input": {"type": "job.start"}}
    )  # fmt: skip
    assert [s.line() for s in steps] == ["refused: unknown playbook 'coding-task'"]
    assert view.where == "refused"


def test_the_fold_says_the_research_step() -> None:
    """docs/coding.md, "Research": its calls as research lines, then one line
    with the findings' count and the files, once the model asks for no more."""
    job = "code-3"
    view = JobView(job)

    def research(result: dict[str, Any]) -> dict[str, Any]:
        return JournalHandlerCall(
            **_head(job), flow=FLOW, node="research_check", kind="handler",
            name="coding_research", call_id=f"{job}/change#1/research_check/1/1", outcome="ok",
            result=orjson.dumps(result).decode(), latency_ms=1,
        ).model_dump(mode="json")  # fmt: skip

    refused = {**_edit(job), "node": "research_check", "outcome": "refused"}
    read = {**_edit(job), "node": "research_tools", "tool": "read_file"}
    records = [
        refused, research({"asked": True, "calls": [{"name": "read_file"}]}), read,
        research({"asked": False, "calls": [], "findings": ["a", "b"], "files": ["calc.py"]}),
        _edit(job),
    ]  # fmt: skip
    assert [s.line() for r in records for s in view.add(r)] == [
        "research: write_file calc.py (refused)",
        "research: read_file calc.py (done)",
        "research: 2 finding(s) on calc.py",
        "edit: write_file calc.py (done)",
    ]
    long = {**research({}), "result": '{"asked":false,"calls":[],"findings":["' + "x" * 2000}
    assert [s.line() for s in view.add(long)] == [
        "research: notes taken (longer than the journal shows)"
    ]
