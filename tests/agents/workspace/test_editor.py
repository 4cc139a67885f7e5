"""The editor's tools through the real trusted executor (docs/coding.md, "The
editor's tools"): read, write, replace, list and search work in the job's
worktree, and every way out — ``..``, an absolute path, a symbolic link that
leads out (read, or written through), ``.git`` — is refused with the reason
and changes nothing, inside or outside. A write is a result, not evidence."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from pydantic import BaseModel

from agents.catalog import CatalogError, load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.model import Model, ModelSettings
from agents.run import Conversation, Outbox, Runner
from agents.tools.executor import Executor, Outcome
from agents.workspace.fingerprint import fingerprint
from agents.workspace.ops import MAX_FILE_BYTES, OP_PARAMETERS
from agents.workspace.worktree import Workspaces, Worktree, open_worktree
from tests.agents.coding.repos import COMMITTED, make_repo, snapshot, write
from topics import InboxEvent, JournalToolCall, TaskOpenedRecord

JOB = "coding-task-42"

CATALOG = load_catalog(
    """\
integrations:
  code: {tools: [read_file, write_file, edit_file, list_files, search_files]}
agents:
  conversation: {instructions: Edit the code.}
tools:
  read_file: {description: Read a file., workspace: {op: read}}
  write_file: {description: Write a whole file., workspace: {op: write}}
  edit_file: {description: Replace one piece of text in a file., workspace: {op: replace}}
  list_files: {description: List a folder., workspace: {op: list}}
  search_files: {description: Search the files., workspace: {op: search}}
  write_noted:
    description: Write a file, and record that it was written.
    workspace: {op: write}
    records: {fact: file_written, properties: {path: "$.path", bytes: "$.bytes"}}
"""
)
GRANTED = tuple(CATALOG.tools)


def made(tmp_path: Path) -> Worktree:
    """A job's worktree of a fresh repository, with links pointing out of it,
    into it and into its .git, and a folder outside it with a secret."""
    outside = tmp_path / "outside"
    write(outside, {"secret.txt": "the secret\n"})
    wt = open_worktree(make_repo(tmp_path / "repo"), JOB, tmp_path / "data")
    os.symlink(outside / "secret.txt", wt.path / "leak.txt")
    os.symlink(outside, wt.path / "out")
    os.symlink("src/app.py", wt.path / "inner.py")
    os.symlink(".git", wt.path / "gitlink")
    return wt


@pytest.fixture
def job(tmp_path: Path) -> Worktree:
    return made(tmp_path)


@pytest.fixture(scope="module")
def unchanging(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Worktree]:
    """One worktree for the calls that must change nothing (each checks it)."""
    tmp_path = tmp_path_factory.mktemp("unchanging")
    return tmp_path, made(tmp_path)


def call(
    tmp_path: Path, name: str, args: dict[str, Any], *, job_key: str = JOB, workspaces: bool = True
) -> Outcome:
    async def go() -> Outcome:
        async with httpx2.AsyncClient() as client:
            found = Workspaces(tmp_path / "data") if workspaces else None
            executor = Executor(CATALOG, client, {}, workspaces=found)
            return await executor.run(
                job_key=job_key,
                task_id=f"{job_key}/edit",
                name=name,
                arguments=orjson.dumps(args).decode(),
                granted=GRANTED,
                occurrence=1,
            )

    return asyncio.run(go())


def told(outcome: Outcome) -> Any:
    return orjson.loads(outcome.output)


def test_the_ops_imply_their_parameters_and_the_catalog_checks_given_ones() -> None:
    assert CATALOG.tools["edit_file"].parameters == OP_PARAMETERS["replace"]
    read, write_ = CATALOG.tools["read_file"], CATALOG.tools["write_file"]
    assert (read.writes, read.idempotent, write_.writes) == (False, True, True)
    assert not CATALOG.tools["edit_file"].idempotent  # a replace twice is not the same
    text = """\
tools:
  narrowed:
    description: Read Python files only.
    workspace: {op: read}
    parameters:
      type: object
      properties: {path: {type: string, pattern: "\\\\.py$"}}
      required: [path]
  wrong:
    description: Misses what the op needs.
    workspace: {op: replace}
    parameters: {type: object, properties: {path: {type: string}, how: {type: string}}}
"""
    with pytest.raises(CatalogError) as caught:
        load_catalog(text, "c.yaml")
    problems = [p.split(": ", 1)[1] for p in caught.value.problems]
    assert [p for p in problems if p.startswith("tools.")] == [
        "tools.wrong.parameters: the op replace needs 'path': name it in properties and required",
        "tools.wrong.parameters: the op replace needs 'old': name it in properties and required",
        "tools.wrong.parameters: the op replace needs 'new': name it in properties and required",
        "tools.wrong.parameters: 'how' is not an argument of the op replace (new, old, path)",
    ]
    assert not any("narrowed" in p for p in problems)
    with pytest.raises(CatalogError, match=r"nothing\.workspace\.op: Input should be 'read'"):
        load_catalog("tools:\n  nothing: {description: No op., workspace: {op: delete}}\n")


def test_read_write_replace_list_and_search(tmp_path: Path, job: Worktree) -> None:
    read = call(tmp_path, "read_file", {"path": "src/app.py"})
    assert read.status == "done"
    assert read.fact is None
    assert read.data["text"] == COMMITTED["src/app.py"]
    assert read.data["total_lines"] == 2
    ranged = call(tmp_path, "read_file", {"path": "src/app.py", "start_line": 2, "end_line": 2})
    assert ranged.data["text"] == "    return 41\n"
    assert call(tmp_path, "read_file", {"path": "inner.py"}).data["text"] == COMMITTED["src/app.py"]

    before = fingerprint(job.path)
    wrote = call(tmp_path, "write_file", {"path": "tests/test_app.py", "content": "ok = 1\n"})
    assert wrote.status == "done"
    assert wrote.fact is None
    assert (job.path / "tests/test_app.py").read_text() == "ok = 1\n"
    after = fingerprint(job.path)
    assert told(wrote)["result"] == {
        "path": "tests/test_app.py",
        "bytes": 7,
        "created": True,
        "bytes_before": None,
        "diff_sha256": after["diff_sha256"],
        "untracked_sha256": after["untracked_sha256"],
    }
    assert after["untracked_sha256"] != before["untracked_sha256"]

    edited = call(tmp_path, "edit_file", {"path": "src/app.py", "old": "41", "new": "42"})
    assert edited.status == "done"
    assert edited.data["line"] == 2
    assert (job.path / "src/app.py").read_text() == "def answer():\n    return 42\n"
    assert (
        edited.data["diff_sha256"] == fingerprint(job.path)["diff_sha256"] != after["diff_sha256"]
    )

    listed = call(tmp_path, "list_files", {})
    assert listed.data["entries"] == [
        ".gitignore", "README.md", "gitlink@", "inner.py@", "leak.txt@", "out@", "src/", "tests/"
    ]  # fmt: skip
    deep = call(tmp_path, "list_files", {"path": "src", "recursive": True})
    assert deep.data["entries"] == ["src/app.py", "src/util.py"]

    found = call(tmp_path, "search_files", {"pattern": "return x"})
    assert found.data["matches"] == [{"path": "src/util.py", "line": 2, "text": "    return x + x"}]
    found = call(tmp_path, "search_files", {"pattern": "^ok = [0-9]$", "regex": True})
    assert found.data["matches"] == [{"path": "tests/test_app.py", "line": 1, "text": "ok = 1"}]
    dash = call(tmp_path, "search_files", {"pattern": "--output=/tmp/x", "path": "src"})
    assert dash.status == "done"
    assert dash.data["matches"] == []
    bad = call(tmp_path, "search_files", {"pattern": "(", "regex": True})
    assert bad.status == "failed"
    assert "the search did not run" in told(bad)["error"]


@pytest.mark.parametrize(
    ("name", "args", "why"),
    [
        ("write_file", {"path": "../x", "content": "x"}, "goes up ('..')"),
        ("read_file", {"path": "src/../../repo/README.md"}, "goes up ('..')"),
        ("read_file", {"path": "/etc/passwd"}, "is absolute"),
        ("write_file", {"path": "/tmp/x", "content": "x"}, "is absolute"),
        ("read_file", {"path": "leak.txt"}, "leak.txt is a symbolic link that leads outside"),
        ("read_file", {"path": "out/secret.txt"}, "out is a symbolic link that leads outside"),
        ("list_files", {"path": "out"}, "out is a symbolic link that leads outside"),
        ("search_files", {"pattern": "secret", "path": "out"}, "leads outside"),
        ("write_file", {"path": "leak.txt", "content": "x"}, "does not write through one"),
        ("write_file", {"path": "out/new.txt", "content": "x"}, "does not write through one"),
        ("edit_file", {"path": "leak.txt", "old": "the", "new": "a"}, "through one"),
        ("write_file", {"path": "inner.py", "content": "x"}, "inner.py is a symbolic link"),
        ("read_file", {"path": ".git/config"}, "is in .git"),
        ("read_file", {"path": ".git"}, "is in .git"),
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}, "is in .git"),
        ("write_file", {"path": "src/.GIT/x", "content": "x"}, "is in .git"),
        ("read_file", {"path": "gitlink"}, "leads into .git"),
        ("edit_file", {"path": "src/app.py", "old": "nope", "new": "x"}, "is not in the file"),
        ("edit_file", {"path": "src/util.py", "old": "x", "new": "y"}, "there 3 times"),
        ("write_file", {"path": "bin.dat", "content": "a\u0000b"}, "binary"),
    ],
)
def test_each_way_out_is_refused_with_why_and_nothing_changes(
    unchanging: tuple[Path, Worktree], name: str, args: dict[str, Any], why: str
) -> None:
    tmp_path, job = unchanging
    inside, outside = snapshot(job.path), snapshot(tmp_path / "outside")
    git_dir = snapshot(job.source / ".git")
    before = fingerprint(job.path)
    outcome = call(tmp_path, name, args)
    assert outcome.status == "refused", outcome.output
    assert why in told(outcome)["error"]
    assert outcome.fact is None
    assert snapshot(job.path) == inside
    assert snapshot(tmp_path / "outside") == outside
    assert fingerprint(job.path) == before
    assert snapshot(job.source / ".git") == git_dir


def test_bounds_and_no_workspace(tmp_path: Path, job: Worktree) -> None:
    big = job.path / "big.txt"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    refused = call(tmp_path, "read_file", {"path": "big.txt"})
    assert refused.status == "refused"
    assert "over the editor's" in told(refused)["error"]
    lines = "".join(f"line {n:05d}\n" for n in range(1, 5001))  # 55 kB
    write(job.path, {"long.txt": lines})
    first = call(tmp_path, "read_file", {"path": "long.txt"})
    assert first.data["truncated"]
    assert first.data["start_line"] == 1
    more = call(tmp_path, "read_file", {"path": "long.txt", "start_line": first.data["next_line"]})
    assert more.data["text"].startswith(f"line {first.data['next_line']:05d}\n")
    assert len(first.output) < 16_000
    write(job.path, {"min.js": "x" * 20_000 + "\nnext\n"})  # a line over the bound
    minified = call(tmp_path, "read_file", {"path": "min.js"})
    assert minified.data["line_cut"]
    assert (len(minified.data["text"]), minified.data["next_line"]) == (12_000, 2)
    missing = call(tmp_path, "read_file", {"path": "nowhere.py"})
    assert missing.status == "failed"
    assert "no such file" in told(missing)["error"]
    none = call(tmp_path, "read_file", {"path": "src/app.py"}, job_key="another-job")
    assert none.status == "refused"
    assert told(none)["error"] == "no workspace for this job"
    unwired = call(tmp_path, "read_file", {"path": "src/app.py"}, workspaces=False)
    assert told(unwired)["error"] == "no workspace for this job"


def test_a_catalog_may_make_a_write_record_a_fact(tmp_path: Path, job: Worktree) -> None:
    noted = call(tmp_path, "write_noted", {"path": "CHANGES.md", "content": "- fixed\n"})
    assert noted.fact is not None
    assert noted.fact.source == "tool"
    assert (noted.fact.action, noted.fact.properties) == (
        "file_written",
        {"path": "CHANGES.md", "bytes": 8},
    )


def test_a_run_journals_a_refused_escape_and_the_write_after_it(
    tmp_path: Path, job: Worktree, serve: Callable[[Any], str]
) -> None:
    script = {
        "rules": [
            {
                "when": {"tool_failed": "write_file"},
                "call": {"tool": "write_file", "args": {"path": "fix.txt", "content": "fixed\n"}},
            },
            {"when": {"tool_result": "write_file"}, "say": "Fixed."},
            {"call": {"tool": "write_file", "args": {"path": "../escaped.txt", "content": "x"}}},
        ]
    }
    model_url = serve(build_standin(StandinScript.model_validate(script)))
    published: list[BaseModel] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append(record)

    async def save(conv: Conversation) -> None:
        pass

    async def go() -> None:
        conv = Conversation(JOB)
        conv.apply(
            TaskOpenedRecord(
                task_id=f"{JOB}/edit", job_key=JOB, milestone="edit", at="2026-01-05T09:00:00Z",
                instructions="Fix it.", playbook_instructions="", integrations=["code"],
                deadline="2026-01-08T09:00:00Z", frontier=["edit"], playbook_key="p",
            )
        )  # fmt: skip
        model = Model(ModelSettings(api_key="sk-test", base_url=f"{model_url}/v1"))
        async with httpx2.AsyncClient() as client:
            executor = Executor(CATALOG, client, {}, workspaces=Workspaces(tmp_path / "data"))
            try:
                await Runner(CATALOG, model, executor).run(conv, Outbox(publish, save))
            finally:
                await model.close()

    asyncio.run(go())
    calls = [r for r in published if isinstance(r, JournalToolCall)]
    assert [(c.tool, c.outcome, c.fact) for c in calls] == [
        ("write_file", "refused", None),
        ("write_file", "done", None),
    ]
    assert "goes up ('..')" in (calls[0].result or "")
    assert not (tmp_path / "data" / "worktrees" / "escaped.txt").exists()
    assert (job.path / "fix.txt").read_text() == "fixed\n"
    assert not [r for r in published if isinstance(r, InboxEvent) and r.source == "tool"]
