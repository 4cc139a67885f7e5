"""The coding flow's handlers and router (docs/coding.md, "How the parts join"):
trusted code the flow ``coding-change`` calls by name, registered under the
entry-point group ``lemongraph.handlers`` (pyproject.toml).

The model never reaches them: they read only channels the flow's inputs (the
job's subject) and trusted code wrote, and they record the facts that settle
the playbook's milestones: validation's (``source: tool``, from
``run_validation``), ``patch_applied`` (``source: tool``), and a person's
checkpoint answer (``failed_validation_accepted``, ``coding_aborted``:
``source: world``, as the agents service records a person's message).
The research step's handlers (agents/coding/research.py) are registered here
too, by their import.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Final, cast

from topics import InboxEvent, JournalWorktree

from agents.coding.research import coding_research, coding_research_calls
from agents.coding.validation import Validation, ValidationCommand, run_validation
from agents.coding.watch import Watch, Watches
from agents.flows.handlers import HandlerContext, handler, router
from agents.workspace.fingerprint import (
    Fingerprint,
    check_resume,
    fingerprint,
    fingerprint_text,
)
from agents.workspace.lease import Leases
from agents.workspace.worktree import (
    Worktree,
    apply_back,
    close_worktree,
    job_patch,
    open_worktree,
)

__all__ = [
    "after_validation",
    "coding_abort",
    "coding_accept",
    "coding_accept_review",
    "coding_apply",
    "coding_calls",
    "coding_open",
    "coding_pause",
    "coding_refused",
    "coding_research",
    "coding_research_calls",
    "coding_resume",
    "coding_risk",
    "coding_validate",
]

#: How much of a failure the next edit is told (docs/coding.md, "Validation").
EXCERPT: Final = 2000
#: The review rule (docs/coding.md, "How the parts join"): with ``--review auto``
#: a change is reviewed when it touches more files than this, or a file that
#: decides how the repository is built, checked or validated.
REVIEW_OVER_FILES: Final = 5
REVIEW_GLOBS: Final = (
    "AGENTS.md", ".lemongraph.json", ".github/*", ".gitlab-ci.yml", ".gitattributes",
    ".gitmodules", "Makefile", "setup.py", "setup.cfg", "pyproject.toml", "tox.ini",
    "noxfile.py", "conftest.py", "*/conftest.py", "package.json", "*.lock",
    "package-lock.json", "Dockerfile", "*.sh",
)  # fmt: skip
#: How much of the patch the review is shown.
REVIEW_DIFF: Final = 12000


def _data_dir(context: HandlerContext) -> Path:
    """The agents service's coding folder: where its workspaces live."""
    workspaces = getattr(context.tools, "workspaces", None)
    if workspaces is None:
        raise RuntimeError("this runner keeps no workspaces (no agents service data folder)")
    return Path(workspaces.folder).parent


def _job(context: HandlerContext) -> str:
    if context.job_key is None:
        raise RuntimeError("the coding flow runs for a job")
    return context.job_key


def _worktree(context: HandlerContext) -> Worktree:
    found = context.tools.workspaces.get(_job(context))
    if found is None:
        raise RuntimeError(f"job {_job(context)} has no worktree")
    assert isinstance(found, Worktree)
    return found


async def _record(
    context: HandlerContext, action: str, properties: dict[str, Any], source: str = "tool"
) -> None:
    """A fact for the job, keyed by the call (made from the run's own data)."""
    event = InboxEvent(
        key=_job(context), action=action, properties=properties,
        idempotency_key=f"{context.call_id}/{action}", source=source,
    )  # fmt: skip
    if context.publish is not None:
        await context.publish("inbox", _job(context), event)


@handler("coding_open", context=True)
def coding_open(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """Take the repository's lease (a second job is refused with the first's
    key) and open the job's worktree (again, as it is, on a resume)."""
    data = _data_dir(context)
    repo = Path(str(view["repo"]))
    Leases(data).acquire(repo, _job(context))
    made = open_worktree(repo, _job(context), data)
    return {"path": str(made.path), "branch": made.branch, "fingerprint": fingerprint(made.path)}


@handler("coding_refused", context=True)
async def coding_refused(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """``open`` failed (its ``onError``): another job holds the repository's
    lease (``last_error`` names its key), or the worktree could not be made.
    The job ends: ``coding_aborted`` with the ``reason`` (``source: tool``:
    trusted code's word), nothing touched but this job's own lease, if it took
    one (docs/coding.md, "One writer per repository")."""
    error = view.get("last_error")
    said = error.get("message") if isinstance(error, dict) else error
    # The exception's class is the machinery's word, not the person's.
    reason = re.sub(r"^[A-Z]\w*: ", "", str(said or "the job's worktree could not be opened"))
    await _record(context, "coding_aborted", {"reason": reason[:2000]}, "tool")
    Leases(_data_dir(context)).release(Path(str(view["repo"])), _job(context))
    return {"refused": reason}


def _validation(view: dict[str, Any]) -> Validation:
    commands = tuple(
        ValidationCommand(str(c["text"]), str(c["source"]), int(c["line"]), c["kind"])
        for c in view.get("validate") or ()
    )
    source = view.get("validation_source")
    return Validation(commands, str(source) if source else None)


@handler("coding_validate", context=True)
async def coding_validate(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """Run the job's trusted validation once on the worktree as it is now; its
    facts go to the inbox (``source: tool``). The attempt is the one after
    those used up (``validation.used``); ``run`` counts every run."""
    worktree = _worktree(context)
    # The job's own lease, as this process: after a restart (the agents service
    # killed) the lease still names the dead process until it is taken again
    # here; another job that took it over meanwhile refuses the run
    # (docs/coding.md, "A restart of the agents service").
    Leases(_data_dir(context)).acquire(worktree.source, _job(context))
    last = view.get("validation") or {}
    used = _used(last)
    # The run's number keys its facts (a run repeated after a crash records
    # them once); the attempt is the one after those used up: an environment
    # failure uses none, so the run after it is the same attempt again.
    run = int(last.get("run") or last.get("attempt") or 0) + 1
    state = fingerprint(worktree.path)
    ran = await run_validation(
        _validation(view), worktree.path, state,
        job_key=_job(context), task_id=context.run_id, attempt=run,
    )  # fmt: skip
    for fact in ran.facts:
        if context.publish is not None:
            await context.publish("inbox", fact.key, fact)
    return {
        "verdict": ran.verdict,
        "attempt": used + 1,
        "used": used + 1 if ran.verdict in ("passed", "failed") else used,
        "run": run,
        "exit_codes": list(ran.exit_codes),
        "fingerprint": dict(state),
        "excerpt": ran.excerpt(EXCERPT),
    }


def _used(validation: dict[str, Any]) -> int:
    """The attempts used up by the validations so far (an environment failure
    uses none: docs/coding.md, "Environment failures")."""
    return int(validation.get("used", validation.get("attempt")) or 0)


@router("coding_after_validation")
def after_validation(view: dict[str, Any]) -> str:
    """``passed``; ``retry`` while attempts are left (``max_attempts``, plus one
    per ``revise``); else ``checkpoint`` (at once for an environment failure,
    which uses up no attempt; and for no validation at all)."""
    validation = view.get("validation") or {}
    verdict = validation.get("verdict")
    if verdict == "passed":
        return "passed"
    if verdict != "failed":
        return "checkpoint"
    allowed = int(view.get("max_attempts") or 1) + int(view.get("extra_attempts") or 0)
    return "retry" if _used(validation) < allowed else "checkpoint"


@handler("coding_pause", context=True)
async def coding_pause(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """Before the checkpoint's question: the worktree's fingerprint, the lease
    paused (no one reclaims it while the job waits for a person), and the
    worktree watched while the job waits (``journal.worktree``: the gateway
    refuses an answer while its files differ, docs/coding.md, "A changed
    worktree: the 409"), said before the question is asked."""
    worktree = _worktree(context)
    Leases(_data_dir(context)).pause(worktree.source, _job(context))
    state = fingerprint(worktree.path)
    watch = Watch(_job(context), context.run_id, context.call_id, state, "same")
    await _journal(context, Watches(_data_dir(context)).begin(watch))
    return {"fingerprint": dict(state), "watch": context.call_id}


async def _journal(context: HandlerContext, record: JournalWorktree) -> None:
    if context.publish is not None:
        await context.publish("journal", _job(context), record)


@handler("coding_resume", context=True)
async def coding_resume(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """After the answer: the route. The person's answer when the worktree is as
    it was at the checkpoint (the lease running again); ``changed`` when its
    files changed meanwhile (the resume refused with both fingerprints: asked
    again, under a new watch); ``moved`` when git moved its HEAD or branch (the
    job fails). The check is made here, at once, whatever the watch last said:
    an answer taken before the watch saw a change is refused here."""
    worktree = _worktree(context)
    paused = view.get("paused") or {}
    expected = cast(Fingerprint, paused.get("fingerprint") or {})
    refusal = check_resume(worktree.path, expected)
    if refusal is None or refusal.fails:  # the answer is taken: the watch ends
        watch = Watch(_job(context), context.run_id, str(paused.get("watch") or ""),
                      expected, "ended")  # fmt: skip
        await _journal(context, Watches(_data_dir(context)).end(watch))
    if refusal is None:
        Leases(_data_dir(context)).resume(worktree.source, _job(context))
        return {"route": str(view.get("decision")), "why": ""}
    actual = dict(refusal.actual) if refusal.actual is not None else None
    # Both fingerprints in the words too: the question asked again shows them
    # to whoever answers through the API (docs/coding.md, "A changed worktree").
    why = (
        f"The answer was not taken: {refusal.why} (at the checkpoint: "
        f"{fingerprint_text(refusal.expected)}; now: {fingerprint_text(refusal.actual)})."
    )
    if not refusal.fails:
        why += " Answer again to go on from the worktree as it is now."
    return {
        "route": refusal.reason,
        "why": why,
        "expected": dict(refusal.expected),
        "actual": actual,
    }


def review_required(review: str, files: list[str]) -> tuple[bool, str]:
    """Whether the change must be reviewed, and why: the operator's ``always``
    or ``never``; with ``auto``, more than :data:`REVIEW_OVER_FILES` files, or a
    file matching :data:`REVIEW_GLOBS`. Deterministic: no model has a say."""
    if review in ("always", "never"):
        return review == "always", f"--review {review}"
    risky = [f for f in files if any(fnmatch(f, g) for g in REVIEW_GLOBS)]
    if risky:
        return True, f"it changes {', '.join(risky[:5])}"
    if len(files) > REVIEW_OVER_FILES:
        return True, f"it touches {len(files)} files, over {REVIEW_OVER_FILES}"
    return False, f"it touches {len(files)} file(s), none that needs a review"


@handler("coding_risk", context=True)
def coding_risk(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """After validation passed: the files the job's patch touches, the patch
    (bounded, for the review) and whether a review is required."""
    patch, files = job_patch(_worktree(context))
    required, why = review_required(str(view.get("review") or "auto"), list(files))
    text = patch.decode("utf-8", "replace")
    if len(text) > REVIEW_DIFF:
        text = text[:REVIEW_DIFF] + f"\n… ({len(text) - REVIEW_DIFF} more characters)"
    return {"files": list(files), "required": required, "why": why, "diff": text}


@handler("coding_calls")
def coding_calls(view: dict[str, Any]) -> list[Any]:
    """The tool calls of the model's edit answer (``{calls: [...]}``, checked by
    its schema), as the list the ``tools`` node reads."""
    calls = (view.get("edit_out") or {}).get("calls")
    return list(calls) if isinstance(calls, list) else []


@handler("coding_revise")
def coding_revise(view: dict[str, Any]) -> int:
    """``revise``: exactly one more attempt than were used."""
    return _used(view.get("validation") or {}) + 1 - int(view.get("max_attempts") or 1)


async def _finish(
    context: HandlerContext, worktree: Worktree, fact: str, source: str
) -> dict[str, Any]:
    """Apply the job's patch back; then the fact, the lease and the worktree
    released. A patch that does not apply fails (the worktree is kept)."""
    applied = apply_back(worktree)
    if not applied.ok:
        raise RuntimeError(applied.why or "the patch does not apply")
    properties = {"files": list(applied.files), "patch_sha256": applied.patch_sha256}
    await _record(context, fact, properties, source)
    Leases(_data_dir(context)).release(worktree.source, _job(context))
    close_worktree(worktree)
    return properties


@handler("coding_apply", context=True)
async def coding_apply(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """Validation passed: the patch goes to the source repository
    (``patch_applied``, ``source: tool``)."""
    if (view.get("validation") or {}).get("verdict") != "passed":
        raise RuntimeError("validation has not passed")
    return await _finish(context, _worktree(context), "patch_applied", "tool")


@handler("coding_accept", context=True)
async def coding_accept(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """A person accepted the failed validation: the patch goes back, and the
    fact that settles the override (``source: world``: the person's answer)."""
    return await _finish(context, _worktree(context), "failed_validation_accepted", "world")


@handler("coding_accept_review", context=True)
async def coding_accept_review(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """A person accepted the review's findings as they are: the patch goes
    back, and the fact that settles the override (``source: world``)."""
    return await _finish(context, _worktree(context), "review_findings_accepted", "world")


@handler("coding_abort", context=True)
async def coding_abort(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """A person aborted: nothing goes back; the lease and the worktree are let go."""
    worktree = _worktree(context)
    await _record(context, "coding_aborted", {}, "world")
    Leases(_data_dir(context)).release(worktree.source, _job(context))
    close_worktree(worktree)
    return {"aborted": True}
