"""``lemongraph code`` (docs/coding.md, "`lemongraph code`").

In process (the fold of a job's records into its lines: test_follow.py): the
subject a job starts with, from a real git repository's trusted AGENTS.md; a
repository with no validation command refused before anything is sent.

Against the real broker (one lane for the module, its worker and agents
service started once, the stand-in model on the example's script): `code
run` on a repository whose test fails runs the coding-task playbook end to
end: the stand-in first only claims the fix (validation fails), then writes it
with a workspace tool; validation passes (its fact names the exit code and the
fingerprint), the patch is applied to the source repository, exit 0 `done`.
A fix that never passes: after the attempts a checkpoint (exit 5, the question
and the allowed answers; the source repository untouched); a response it does
not take exits 2 listing them; `revise` with a message gives exactly one more
attempt; `accept_failed_validation` ends `completed_with_override` (exit 4),
and only then is the patch in the source repository. `abort` fails the job
(exit 1): nothing goes back, the lease and the worktree are let go. With
`--research` the job visits the read-only research step: a write there is
refused and journaled, and the model's findings reach the edit step's prompt,
labelled as its own notes; without it no research node runs."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import yaml

from agents.coding.cli import job_subject, new_job_key
from agents.coding.follow import FLOW
from agents.coding.validation import discover
from agents.dev.serving import AppThread
from agents.dev.standin import StandinScript, build_standin
from agents.workspace.fingerprint import fingerprint
from agents.workspace.worktree import safe_name
from stream.runtime.broker import free_port
from tests.agents.coding.repos import make_repo, sh_git, snapshot, write
from tests.inprocess import LEMONGRAPH, invoke
from tests.lanes import ROOT, Lane, wait_for
from tests.stream.gateway.conftest import GatewayProcess, launch_gateway
from topics import (
    Answerer,
    MessageRecord,
)


def test_the_subject_carries_the_trusted_commands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    write(repo, {"AGENTS.md": "# Notes\n\n## Tests\n\n- `python -m pytest -q`\n"})
    sh_git(repo, "add", "AGENTS.md")
    sh_git(repo, "commit", "--quiet", "-m", "agents")
    subject = job_subject(repo, "make answer() say 42", discover(repo), 3, "auto")
    assert subject == {
        "repo": str(repo),
        "task": "make answer() say 42",
        "validate": [
            {"text": "python -m pytest -q", "source": "AGENTS.md", "line": 5, "kind": "test"}
        ],
        "validation_source": "AGENTS.md",
        "max_attempts": 3,
        "review": "auto",
        "research": False,  # the research step only when the operator asks for it
    }
    operator = job_subject(repo, "t", discover(repo, ["make check"]), 1, "never", True)
    assert [c["text"] for c in operator["validate"]] == ["make check"]
    assert operator["research"] is True
    assert new_job_key().startswith("code-")
    assert new_job_key() != new_job_key()


def test_no_validation_command_starts_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    env = {"PATH": "/usr/bin:/bin", "LEMONGRAPH_KAFKA_URL": "kafka://127.0.0.1:1"}
    done = invoke(["code", "run", "--repo", str(repo), "--task", "t"], env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no validation command" in done.stderr
    assert "give --validate CMD" in done.stderr
    assert "job:" not in done.stdout


# -- end to end: the real worker, agents service and stand-in model ----------------------

#: The workspace tools by name and op (docs/coding.md, "The editor's tools").
OPS = {"read_file": "read", "write_file": "write", "edit_file": "replace",
       "list_files": "list", "search_files": "search"}  # fmt: skip
CATALOG = (
    f"integrations:\n  workspace: {{tools: [{', '.join(OPS)}]}}\n"
    "agents:\n  conversation: {instructions: You change repositories.}\ntools:\n"
    + "".join(
        f"  {name}: {{description: The op {op}., workspace: {{op: {op}}}}}\n"
        for name, op in OPS.items()
    )
)
BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n",
    "AGENTS.md": "# Calc\n\n## Tests\n\n- `python3 -B test_calc.py`\n",
}


#: What a model tries in the escape drill, and the fix it writes meanwhile.
ESCAPES = [
    ("up", "write_file", {"path": "../x", "content": "out\n"}),
    ("link", "write_file", {"path": "out/pwned.txt", "content": "out\n"}),
    ("read", "read_file", {"path": "out/secret.txt"}),
    ("git", "write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
    ("fix", "write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
]


def drills(root: Path) -> list[dict[str, Any]]:
    """The stand-in's rules for this module's drills, tried before the example's
    (first match wins), each keyed on its task's marker: ``ESCAPE-DRILL`` (the
    model tries paths out of its worktree and proposes a validation command that
    would write ``root/pwned``), ``REVIEW-CHANGES`` (a change the risk rule sends
    to review, whose reviewer asks for changes once, then approves) and
    ``REVIEW-PERSON`` (the reviewer asks a person) and ``RESEARCH-WRITE`` (a
    write tried in the research step)."""
    pwned = f"touch {root / 'pwned'}"
    fix = ESCAPES[-1][2]
    risky = [
        {"name": "write_file", "id": "fix", "args": fix},
        {"name": "write_file", "id": "conftest",
         "args": {"path": "conftest.py", "content": "x = 1\n"}},
    ]  # fmt: skip
    edit, review = {"flow": FLOW, "flow_node": "edit"}, {"flow": FLOW, "flow_node": "review"}
    why = {"path": "notes/reviewed.txt", "content": "why\n"}
    said = {"calls": [{"name": "write_file", "id": "why", "args": why}]}
    research = {"flow": FLOW, "flow_node": "research"}
    return [
        # RESEARCH-WRITE: a write among the research step's calls (refused),
        # then, told so, its findings.
        {"when": {**research, "prompt_contains": "the research step only reads"},
         "json": {"calls": [], "findings": ["RESEARCH-NOTE-1: add() subtracts"],
                  "files": ["calc.py"]}},
        {"when": {**research, "prompt_contains": "RESEARCH-WRITE"}, "json": {"calls": [
            {"name": "write_file", "id": "early", "args": fix},
            {"name": "read_file", "id": "look", "args": {"path": "calc.py"}}]}},
        {"when": {"flow": FLOW, "flow_node": "plan", "prompt_contains": "ESCAPE-DRILL"},
         "json": {"steps": ["fix add()"], "validate": [pwned]}},
        {"when": {**edit, "prompt_contains": "notes/reviewed.txt"}, "json": {"calls": []}},
        {"when": {**edit, "prompt_contains": "REVIEW-FINDING-1"}, "json": said},
        {"when": {**edit, "prompt_contains": "diff_sha256"}, "json": {"calls": []}},
        {"when": {**edit, "prompt_contains": "ESCAPE-DRILL"}, "json": {
            "calls": [{"name": "run_command", "id": "cmd", "args": {"command": pwned}}]
            + [{"name": tool, "id": i, "args": a} for i, tool, a in ESCAPES],
            "validate": [pwned]}},
        {"when": {**edit, "prompt_contains": "REVIEW-CHANGES"}, "json": {"calls": risky}},
        {"when": {**edit, "prompt_contains": "REVIEW-PERSON"}, "json": {"calls": risky}},
        {"when": {**review, "prompt_contains": "notes/reviewed.txt"},
         "json": {"verdict": "approve", "findings": []}},
        {"when": {**review, "prompt_contains": "REVIEW-CHANGES"},
         "json": {"verdict": "changes", "findings": ["REVIEW-FINDING-1: say why"]}},
        {"when": {**review, "prompt_contains": "REVIEW-PERSON"},
         "json": {"verdict": "person", "findings": ["conftest.py is new: a person decides"]}},
    ]  # fmt: skip


def coding_playbooks(lane: Lane) -> dict[str, Any]:
    """The lane's playbooks: only the coding playbook, its flow and a catalog of
    the workspace tools; the example flow's stand-in script, returned."""
    for path in lane.playbooks.glob("*.yaml"):
        path.unlink()
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    shutil.copy(ROOT / "examples" / "coding-task.yaml", lane.playbooks)
    (lane.playbooks / "flows").mkdir()
    shutil.copy(ROOT / "examples" / "flows" / "coding-change.yaml", lane.playbooks / "flows")
    script = yaml.safe_load((ROOT / "examples/flows/coding-change.standin.yaml").read_text())
    assert isinstance(script, dict)
    return script


@pytest.fixture(scope="module")
def coding(module_lane: Lane) -> Iterator[Lane]:
    """The module's worker and agents service, with the coding-task playbook,
    its flow and a catalog of the workspace tools; the stand-in model on the
    example flow's script."""
    lane = module_lane
    script = coding_playbooks(lane)
    script["rules"] = drills(lane.root) + script["rules"]
    model = AppThread(
        build_standin(StandinScript.model_validate(script)), "127.0.0.1", free_port(), "stand-in"
    ).start()
    lane.start_worker()
    agents = lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{model.url}/v1", OPENAI_API_KEY="sk-test"
    )
    assert any("1 milestones run by flows" in line for line in agents.lines), agents.lines
    yield lane
    model.stop()


def calc_repo(root: Path, **files: str) -> Path:
    repo = root / "calc"
    repo.mkdir(parents=True)
    sh_git(repo, "init", "--quiet")
    write(repo, {**BUGGY, **files})
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "--quiet", "-m", "add() is wrong")
    return repo


@pytest.mark.timeout(240)
def test_code_run_fixes_the_repository_end_to_end(coding: Lane) -> None:
    repo = calc_repo(coding.root / "repos")
    done = coding.cli("code", "run", "--repo", str(repo), "--task", "make the test pass",
                      check=False)  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith("job: code-")
    job = lines[0].removeprefix("job: ")
    assert lines[1:] == [
        "plan: fix add() in calc.py; let the tests decide",
        "validation 1: failed (exit 1)",  # the claim alone: no change, the test fails
        "edit: write_file calc.py (done)",
        "validation 2: passed (exit 0)",
        "status: done",
    ], done.stdout
    # The patch is in the source repository's working tree (not committed).
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert sh_git(repo, "status", "--porcelain") == " M calc.py\n"
    facts = {
        r["value"]["input"]["action"]: r["value"]["input"]
        for r in coding.read("decisions")
        if r["key"] == job and r["value"]["input"].get("type") == "event"
    }
    passed = facts["validation_passed"]
    assert passed["source"] == "tool"
    assert passed["properties"]["exit_code"] == 0
    # -B: no __pycache__, whose stale .pyc (a fix of the same size, written in
    # the same second) Python would run instead of the fix; and which would be
    # a new file of the job's patch, as any file the validation writes is.
    assert passed["properties"]["command"] == "python3 -B test_calc.py"
    assert set(passed["properties"]["fingerprint"]) == {
        "head", "branch", "diff_sha256", "untracked_sha256"
    }  # fmt: skip
    assert facts["validation_failed"]["properties"]["exit_code"] == 1
    assert facts["patch_applied"]["properties"]["files"] == ["calc.py"]
    assert snapshot(repo)["calc.py"] == (repo / "calc.py").read_bytes()
    # No --research: the flow went from plan straight to edit.
    nodes = {r.get("node") for r in _journal(coding, job, "journal.model_call")}
    assert nodes == {"plan", "edit"}


@pytest.mark.timeout(240)
def test_research_only_reads_and_its_findings_reach_the_edit(coding: Lane, tmp_path: Path) -> None:
    """docs/coding.md, "Research": with --research the job visits the research
    step; its write is refused and journaled (validation 1 fails: the fix it
    tried to write there is not in the worktree), its read is made, and its
    findings reach the edit step's prompt as its own notes."""
    repo = calc_repo(tmp_path)
    done = coding.cli("code", "run", "--repo", str(repo), "--task", "RESEARCH-WRITE: fix add()",
                      "--research", check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    job = done.stdout.splitlines()[0].removeprefix("job: ")
    assert done.stdout.splitlines()[1:] == [
        "plan: fix add() in calc.py; let the tests decide",
        "research: write_file calc.py (refused)",
        "research: read_file calc.py (done)",
        "research: 1 finding(s) on calc.py",
        "validation 1: failed (exit 1)",  # the refused write changed nothing
        "edit: write_file calc.py (done)",
        "validation 2: passed (exit 0)",
        "status: done",
    ], done.stdout
    calls = _journal(coding, job, "journal.tool_call")
    refused = [c for c in calls if c["outcome"] == "refused"]
    assert [(c["tool"], c["node"]) for c in refused] == [("write_file", "research_check")]
    assert "the research step only reads" in refused[0]["result"]
    said = [r for r in _journal(coding, job, "journal.model_call") if r["node"] != "plan"]
    assert [r["node"] for r in said][:2] == ["research", "research"]
    assert "the research step only reads" in said[1]["request"]  # the model is told
    edit = next(r for r in said if r["node"] == "edit")
    assert "Your own notes from the research step (a claim of yours" in edit["request"]
    assert "RESEARCH-NOTE-1: add() subtracts" in edit["request"]
    # The notes are no fact: the job's facts are the validations' and the patch's.
    actions = {r["value"]["input"]["action"] for r in coding.read("decisions")
               if r["key"] == job and r["value"]["input"].get("type") == "event"}  # fmt: skip
    assert actions == {"validation_failed", "validation_passed", "patch_applied"}


@pytest.mark.timeout(240)
def test_a_fix_that_never_passes_waits_then_ends_by_override(coding: Lane, tmp_path: Path) -> None:
    never = "from calc import add\n\nassert add(2, 3) == 6, add(2, 3)\n"  # a + b is not it
    repo = calc_repo(tmp_path, **{"test_calc.py": never})
    before = snapshot(repo)
    run = coding.cli("code", "run", "--repo", str(repo), "--task", "make the test pass",
                     "--max-attempts", "2", check=False)  # fmt: skip
    assert run.returncode == 5, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    job = lines[0].removeprefix("job: ")
    assert lines[1:5] == [
        "plan: fix add() in calc.py; let the tests decide",
        "validation 1: failed (exit 1)",
        "edit: write_file calc.py (done)",
        "validation 2: failed (exit 1)",
    ], run.stdout
    assert lines[5].startswith("checkpoint: The validation did not pass (failed, attempt 2)")
    # The question ends with the failure's excerpt (its lines), then the answers.
    assert "AssertionError: 5" in run.stdout
    assert lines[-2] == "answers: revise, accept_failed_validation, abort"
    assert snapshot(repo) == before  # nothing goes back before a person says so

    status = coding.cli("code", "status", job, check=False)
    assert status.returncode == 5
    assert "answers: revise, accept_failed_validation, abort" in status.stdout
    wrong = coding.cli("code", "resume", job, "--response", "ship-it", check=False)
    assert wrong.returncode == 2
    assert "one of revise, accept_failed_validation, abort" in wrong.stderr
    bare = coding.cli("code", "resume", job, "--response", "revise", check=False)
    assert bare.returncode == 2
    assert "revise needs --message" in bare.stderr

    revised = coding.cli("code", "resume", job, "--response", "revise",
                         "--message", "6 is what the test wants", check=False)  # fmt: skip
    assert revised.returncode == 5, revised.stdout + revised.stderr
    # Exactly one more attempt, then the checkpoint again; resume says only
    # what came after the checkpoint it answered.
    steps = revised.stdout.splitlines()
    assert steps[1:4] == [
        "answered: revise",
        "answered: 6 is what the test wants",
        "validation 3: failed (exit 1)",
    ], revised.stdout
    assert "checkpoint: The validation did not pass (failed, attempt 3)" in revised.stdout
    assert snapshot(repo) == before

    accepted = coding.cli("code", "resume", job, "--response", "ACCEPT_failed_validation",
                          "--json", check=False)  # fmt: skip
    assert accepted.returncode == 4, accepted.stdout + accepted.stderr
    said = [orjson.loads(line) for line in accepted.stdout.splitlines()]
    assert said[0] == {"kind": "job", "key": job}
    assert said[-1]["kind"] == "end"
    assert said[-1]["status"] == "completed_with_override"
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    answers = [
        MessageRecord.model_validate(r["value"]) for r in coding.read("messages")
        if r["key"] == job and r["value"]["direction"] == "in"
    ]  # fmt: skip
    assert [(m.answer, m.message_id.startswith("answer:")) for m in answers] == [
        ("revise", True), ("6 is what the test wants", True), ("accept_failed_validation", True)
    ]  # fmt: skip
    assert {m.by.source for m in answers if m.by is not None} == {"world"}
    again = coding.cli("code", "resume", job, "--response", "abort", check=False)
    assert again.returncode == 1
    assert "waits at no checkpoint" in again.stderr


@pytest.mark.timeout(240)
def test_an_abort_fails_the_job_and_changes_nothing(coding: Lane, tmp_path: Path) -> None:
    never = "from calc import add\n\nassert add(2, 3) == 7, add(2, 3)\n"
    repo = calc_repo(tmp_path, **{"test_calc.py": never})
    before = snapshot(repo)
    run = coding.cli("code", "run", "--repo", str(repo), "--task", "make the test pass",
                     "--max-attempts", "1", check=False)  # fmt: skip
    assert run.returncode == 5, run.stdout + run.stderr
    job = run.stdout.splitlines()[0].removeprefix("job: ")
    leases = coding.root / "data" / "agents" / "coding" / "leases"
    assert [p.name for p in leases.glob("*.json")]  # held, paused, while the job waits
    # A second job on the repository is refused with the first's key, and ends.
    second = coding.cli("code", "run", "--repo", str(repo), "--task", "another change",
                        check=False)  # fmt: skip
    assert second.returncode == 1, second.stdout + second.stderr
    said = second.stdout.splitlines()
    assert said[0].startswith("job: code-")
    assert said[0] != f"job: {job}"
    assert f"refused: the repository {repo} is being edited by job {job} (paused" in said[1]
    assert said[-1] == "status: failed"
    assert coding.cli("code", "status", job, check=False).returncode == 5  # the first waits on
    aborted = coding.cli("code", "resume", job, "--response", "abort", check=False)
    assert aborted.returncode == 1, aborted.stdout + aborted.stderr
    assert aborted.stdout.splitlines()[-1] == "status: failed"
    assert snapshot(repo) == before
    assert not list(leases.glob("*.json"))  # let go: the next job may edit the repository
    assert sh_git(repo, "branch", "--list", "lemongraph/*") == ""  # the worktree closed


def _worktree(coding: Lane, job: str) -> Path:
    path = coding.root / "data" / "agents" / "coding" / "worktrees" / safe_name(job)
    assert path.is_dir(), path
    return path


def _watched(gateway: GatewayProcess, token: str, job: str, status: str) -> dict[str, Any]:
    """The gateway's journal of the job once it holds the watch's ``status``."""

    def seen() -> dict[str, Any] | None:
        with gateway.client(token) as client:
            records = client.get(f"/v1/jobs/{job}/journal").json().get("records") or []
        said = [r for r in records if r["type"] == "journal.worktree"]
        return said[-1] if said and said[-1]["status"] == status else None

    found: dict[str, Any] = wait_for(seen, timeout=60, what=f"the watch to say {status}")
    return found


@pytest.mark.timeout(240)
def test_a_resume_on_a_changed_worktree_is_refused_with_both_fingerprints(
    coding: Lane, tmp_path: Path
) -> None:
    never = "from calc import add\n\nassert add(2, 3) == 8, add(2, 3)\n"
    repo = calc_repo(tmp_path, **{"test_calc.py": never})
    run = coding.cli("code", "run", "--repo", str(repo), "--task", "make the test pass",
                     "--max-attempts", "1", check=False)  # fmt: skip
    assert run.returncode == 5, run.stdout + run.stderr
    job = run.stdout.splitlines()[0].removeprefix("job: ")
    worktree = _worktree(coding, job)
    paused = fingerprint(worktree)
    gateway = launch_gateway(coding)
    try:
        _changed_then_answered(coding, gateway, job, worktree, paused, tmp_path)
    finally:
        gateway.stop()
    assert (repo / "calc.py").read_text() == BUGGY["calc.py"]  # nothing went back


def _changed_then_answered(
    coding: Lane, gateway: GatewayProcess, job: str, worktree: Path, paused: Any, tmp_path: Path
) -> None:
    token = gateway.token(name="person")
    _watched(gateway, token, job, "same")  # the watch began with the checkpoint
    with gateway.client(token) as client:
        [asked] = client.get(f"/v1/jobs/{job}/interrupts").json()["interrupts"]
    (worktree / "calc.py").write_text("def add(a, b):\n    return 0\n")  # by hand
    changed = fingerprint(worktree)
    said = _watched(gateway, token, job, "changed")  # the agents service saw it
    assert (said["expected"], said["found"]) == (dict(paused), dict(changed))

    # Through the API: 409 worktree_changed with both fingerprints, nothing written.
    answer = {"interrupt_id": asked["interrupt_id"], "answer": "abort"}
    with gateway.client(token) as client:
        refused = client.post(f"/v1/jobs/{job}/answers", json=answer)
        document = client.get("/openapi.json").json()
        still = client.get(f"/v1/jobs/{job}/interrupts").json()["interrupts"]
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "worktree_changed"
    assert (error["expected"], error["found"]) == (dict(paused), dict(changed))
    documented = document["paths"]["/v1/jobs/{key}/answers"]["post"]["responses"]["409"]
    assert "`worktree_changed`" in documented["description"]
    schema = documented["content"]["application/json"]["schema"]
    jsonschema.validate(refused.json(), {**schema, "components": document["components"]})
    assert [q["interrupt_id"] for q in still] == [asked["interrupt_id"]]  # still open

    # The CLI on the service's data folder checks the worktree itself; elsewhere
    # it reads the watch's word: either way nothing is sent.
    here = coding.cli("code", "resume", job, "--response", "abort", check=False)
    assert here.returncode == 6, here.stdout + here.stderr
    assert "refused: 409 worktree_changed: The answer was not sent" in here.stderr
    assert f"diff_sha256={paused['diff_sha256']}" in here.stderr  # at the checkpoint
    assert f"diff_sha256={changed['diff_sha256']}" in here.stderr  # now
    elsewhere = invoke(["code", "resume", job, "--response", "abort", "--json"],
                       env=coding.env(LEMONGRAPH_DATA_DIR=str(tmp_path / "elsewhere")),
                       cwd=coding.root)  # fmt: skip
    assert elsewhere.returncode == 6, elsewhere.stdout + elsewhere.stderr
    refusal = orjson.loads(elsewhere.stdout.splitlines()[-1])
    assert (refusal["kind"], refusal["status"]) == ("refused", 409)
    assert (refusal["expected"], refusal["actual"]) == (dict(paused), dict(changed))
    waiting = coding.cli("code", "status", job, check=False)
    assert waiting.returncode == 5, waiting.stdout  # nothing was sent: it still waits
    assert "answered" not in waiting.stdout
    assert "worktree: the worktree changed since the checkpoint (tracked files)" in waiting.stdout

    # An answer that reaches the service all the same (written before the watch
    # saw the change, or by a client past the gateway): the service checks the
    # worktree before it takes it, does not, and asks again from the worktree
    # as it is now, under a new watch.
    raw = MessageRecord(
        job_key=job, message_id=f"answer:{asked['interrupt_id']}", direction="in",
        channel="web", text="abort", at="2026-12-07T00:00:00Z",
        interrupt_id=asked["interrupt_id"], answer="abort",
        by=Answerer(source="world", name="past the gateway"),
    )  # fmt: skip
    coding.produce([(job.encode(), raw.model_dump_json(by_alias=True).encode())], "messages")

    def asked_again() -> list[dict[str, Any]]:
        with gateway.client(token) as client:
            found = client.get(f"/v1/jobs/{job}/interrupts").json()["interrupts"]
        return [q for q in found if q["interrupt_id"] != asked["interrupt_id"]]

    [again] = wait_for(asked_again, timeout=60, what="the checkpoint asked again")
    assert again["question"].startswith("The validation did not pass")
    assert (
        "The answer was not taken: the worktree changed since the checkpoint" in again["question"]
    )
    assert changed["diff_sha256"][:12] in again["question"]
    # git moved the worktree's HEAD: the next answer is taken (202) and fails the job.
    sh_git(worktree, "commit", "--quiet", "-am", "by hand")
    _watched(gateway, token, job, "moved")
    with gateway.client(token) as client:
        taken = client.post(
            f"/v1/jobs/{job}/answers",
            json={"interrupt_id": again["interrupt_id"], "answer": "accept_failed_validation"},
        )
    assert taken.status_code == 202, taken.text

    def status() -> bool:
        with gateway.client(token) as client:
            return client.get(f"/v1/jobs/{job}").json().get("status") == "failed"

    wait_for(status, timeout=60, what="the job to fail")
    ended = coding.cli("code", "status", job, check=False)
    assert "git was run in it" in ended.stdout
    assert ended.stdout.splitlines()[-1] == "status: failed"


def _journal(coding: Lane, job: str, kind: str) -> list[dict[str, Any]]:
    return [r["value"] for r in coding.read("journal")
            if r["key"] == job and r["value"]["type"] == kind]  # fmt: skip


@pytest.mark.timeout(240)
def test_escape_attempts_are_refused_and_journaled_and_the_job_goes_on(
    coding: Lane, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    repo = tmp_path / "calc"
    calc_repo(tmp_path)
    (repo / "out").symlink_to(outside)  # a link pointing out of the repository
    sh_git(repo, "add", "out")
    sh_git(repo, "commit", "--quiet", "-m", "a link out")
    done = coding.cli("code", "run", "--repo", str(repo), "--task", "ESCAPE-DRILL: fix add()",
                      check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    job = done.stdout.splitlines()[0].removeprefix("job: ")
    assert done.stdout.splitlines()[1:] == [
        "plan: fix add()",
        "edit: write_file ../x (refused)",
        "edit: write_file out/pwned.txt (refused)",
        "edit: read_file out/secret.txt (refused)",
        "edit: write_file .git/hooks/pre-commit (refused)",
        "edit: write_file calc.py (done)",
        "validation 1: passed (exit 0)",
        "status: done",
    ], done.stdout
    calls = {r["tool"] + " " + orjson.loads(r["arguments"]).get("path", ""): r
             for r in _journal(coding, job, "journal.tool_call")}  # fmt: skip
    assert "goes up ('..')" in calls["write_file ../x"]["result"]
    assert "a symbolic link" in calls["write_file out/pwned.txt"]["result"]
    assert "outside the worktree" in calls["read_file out/secret.txt"]["result"]
    assert "secret" not in calls["read_file out/secret.txt"]["result"].replace("secret.txt", "")
    assert "in .git" in calls["write_file .git/hooks/pre-commit"]["result"]
    assert not (tmp_path / "x").exists()
    assert [p.name for p in outside.iterdir()] == ["secret.txt"]
    # The commands it proposed (a tool of its own, a `validate` in its answers)
    # are journaled as what it said, and never run: the flow refuses a tool it
    # does not have (the model is told so), and nothing reads `validate`.
    said = {r["node"]: r for r in _journal(coding, job, "journal.model_call")}
    assert "pwned" in said["plan"]["response"]
    edits = [r for r in _journal(coding, job, "journal.model_call") if r["node"] == "edit"]
    assert "run_command" in edits[0]["response"]
    assert "tool 'run_command' is not in the flow's tools" in edits[1]["request"]
    assert not (coding.root / "pwned").exists()
    passed = [r["value"]["input"] for r in coding.read("decisions") if r["key"] == job
              and r["value"]["input"].get("action") == "validation_passed"]  # fmt: skip
    assert [p["properties"]["command"] for p in passed] == ["python3 -B test_calc.py"]
    assert (repo / "calc.py").read_text() == ESCAPES[-1][2]["content"]


@pytest.mark.timeout(240)
def test_the_review_asks_for_changes_then_approves(coding: Lane, tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    done = coding.cli("code", "run", "--repo", str(repo), "--task", "REVIEW-CHANGES: fix add()",
                      check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[2:] == [
        "edit: write_file calc.py (done)",
        "edit: write_file conftest.py (done)",
        "validation 1: passed (exit 0)",
        "review: changes",  # conftest.py: the risk rule's glob sends it to review
        "edit: write_file notes/reviewed.txt (done)",
        "validation 2: passed (exit 0)",
        "review: approve",
        "status: done",
    ], done.stdout
    assert (repo / "notes" / "reviewed.txt").read_text() == "why\n"


@pytest.mark.timeout(240)
def test_the_review_asks_a_person_who_accepts_its_findings(coding: Lane, tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    before = snapshot(repo)
    run = coding.cli("code", "run", "--repo", str(repo), "--task", "REVIEW-PERSON: fix add()",
                     check=False)  # fmt: skip
    assert run.returncode == 5, run.stdout + run.stderr
    job = run.stdout.splitlines()[0].removeprefix("job: ")
    assert "review: person" in run.stdout
    assert "checkpoint: The review asks a person (it changes conftest.py)" in run.stdout
    assert "answers: revise, accept_failed_validation, abort, accept_review_findings" in run.stdout
    assert snapshot(repo) == before
    accepted = coding.cli("code", "resume", job, "--response", "accept_review_findings",
                          check=False)  # fmt: skip
    assert accepted.returncode == 4, accepted.stdout + accepted.stderr
    assert accepted.stdout.splitlines()[-1] == "status: completed_with_override"
    assert (repo / "conftest.py").read_text() == "x = 1\n"


def _read_until(fd: int, text: str, seen: bytearray, timeout: float = 120) -> str:
    """What the terminal showed, once it shows ``text`` (or the process ended)."""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never showed {text!r}:\n{seen.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the process ended: the terminal is closed
                break
            if not chunk:
                break
            seen.extend(chunk)
    return seen.decode(errors="replace")


@contextlib.contextmanager
def _terminal(coding: Lane, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``lemongraph ARGS`` on a pseudo-terminal (its input and output): the
    process and the terminal's end to read and write; killed if still running."""
    main, child = pty.openpty()
    proc = subprocess.Popen([str(LEMONGRAPH), *args], stdin=child, stdout=child, stderr=child,
                            env=coding.env(), cwd=coding.root)  # fmt: skip
    os.close(child)
    try:
        yield proc, main
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


def _code_run(repo: Path) -> list[str]:
    return ["code", "run", "--repo", str(repo), "--task", "make the test pass",
            "--max-attempts", "1"]  # fmt: skip


@pytest.mark.timeout(240)
def test_on_a_terminal_code_run_asks_the_checkpoint_itself(coding: Lane, tmp_path: Path) -> None:
    never = "from calc import add\n\nassert add(2, 3) == 9, add(2, 3)\n"
    repo = calc_repo(tmp_path, **{"test_calc.py": never})
    seen = bytearray()
    with _terminal(coding, *_code_run(repo)) as (proc, main):
        shown = _read_until(main, "answer (empty: leave it waiting):", seen)
        assert "answers: revise, accept_failed_validation, abort" in shown
        os.write(main, b"ship it\n")
        _read_until(main, "'ship it' is not one of", seen)
        os.write(main, b"abort\n")
        shown = _read_until(main, "status: failed", seen)
        assert proc.wait(60) == 1, shown
    assert (repo / "calc.py").read_text() == BUGGY["calc.py"]


@pytest.mark.timeout(240)
def test_ctrl_c_leaves_the_job_running_and_no_wait_never_asks(coding: Lane, tmp_path: Path) -> None:
    # The validation waits for the test's word, so that the Ctrl-C surely lands while
    # the CLI follows the job: on a loaded machine the terminal's "plan:" could be
    # read only once the job already waited at its checkpoint, where the CLI asks.
    gate = tmp_path / "go"
    never = (
        "import os, time\nfrom calc import add\n\n"
        f"deadline = time.monotonic() + 120\nwhile not os.path.exists({str(gate)!r}) "
        "and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
        "assert add(2, 3) == 10, add(2, 3)\n"
    )
    repo = calc_repo(tmp_path, **{"test_calc.py": never})
    seen = bytearray()
    with _terminal(coding, *_code_run(repo)) as (proc, main):
        job = _read_until(main, "plan:", seen).splitlines()[0].removeprefix("job: ").strip()
        proc.send_signal(signal.SIGINT)  # Ctrl-C while it follows the job
        shown = _read_until(main, "says where it is", seen)
        assert f"the job goes on: lemongraph code status {job} says where it is" in shown
        assert "validation 1" not in shown  # it was still following
        assert proc.wait(60) == 130, shown
    gate.touch()
    # It went on without the CLI, to its checkpoint.
    wait_for(lambda: coding.cli("code", "status", job, check=False).returncode == 5,
             timeout=90, interval=1, what="the job to wait at its checkpoint")  # fmt: skip

    # On a terminal, --no-wait asks nothing: it returns at the next checkpoint.
    seen = bytearray()
    answer = ["code", "resume", job, "--response", "revise", "--message", "again", "--no-wait"]
    with _terminal(coding, *answer) as (proc, main):
        shown = _read_until(main, "answer: lemongraph code resume", seen)
        assert proc.wait(60) == 5, shown
        assert "validation 2: failed (exit 1)" in shown
        assert "answers: revise, accept_failed_validation, abort" in shown
        assert "answer (empty" not in _read_until(main, "\0", seen, timeout=1)
    aborted = coding.cli("code", "resume", job, "--response", "abort", check=False)
    assert aborted.returncode == 1, aborted.stdout + aborted.stderr
