"""A SIGKILL of the agents service in the middle of a coding job (docs/coding.md,
"A restart of the agents service"), through real processes: the worker, the
agents service (killed twice and started again) and the stand-in model.

Killed mid-validation (the repository's command is running: it said so in a
file outside the worktree, and waits for a release file): the service started
again runs the validation again as the same attempt, so its fact is recorded
once and the attempt is not counted twice; the job's lease, still naming the
dead process, is taken again by the job itself in the new process. Killed
mid-edit (the model's edit call is in flight: the stand-in holds it until
told): the edit is asked again, the fix written, validated, and the job ends
`done` with its patch in the source repository and the lease let go."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.coding.cli import job_subject, new_job_key
from agents.coding.validation import discover
from agents.dev.serving import AppThread
from agents.dev.standin import StandinScript, build_standin
from stream.runtime.broker import free_port
from tests.agents.coding.test_cli import calc_repo, coding_playbooks
from tests.lanes import Lane
from topics import JobStart, encode


class Gate:
    """The stand-in behind a gate: a request whose body holds ``marker`` waits
    until the gate is opened (``entered`` says one came), so a test can kill
    the caller while its model call is in flight."""

    def __init__(self, app: Any, marker: bytes) -> None:
        self.app = app
        self.marker = marker
        self.entered = threading.Event()
        self.opened = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        if self.marker in body and not self.opened.is_set():
            self.entered.set()
            while not self.opened.is_set():
                await asyncio.sleep(0.05)
        kept = iter(messages)

        async def replay() -> Any:
            return next(kept, {"type": "http.disconnect"})

        await self.app(scope, replay, send)


def _until(what: str, done: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _applied(lane: Lane, job: str, action: str) -> list[dict[str, Any]]:
    return [
        r["value"]["input"] for r in lane.read("decisions")
        if r["key"] == job and r["value"]["outcome"] == "applied"
        and r["value"]["input"].get("action") == action
    ]  # fmt: skip


@pytest.mark.timeout(300)
def test_a_service_killed_mid_validation_and_mid_edit_resumes_the_job(
    lane: Lane, tmp_path: Path
) -> None:
    script = coding_playbooks(lane)
    # The edit told why validation failed: the one that writes the fix.
    gate = Gate(build_standin(StandinScript.model_validate(script)), b"exited with")
    model = AppThread(gate, "127.0.0.1", free_port(), "stand-in").start()
    env = {"OPENAI_BASE_URL": f"{model.url}/v1", "OPENAI_API_KEY": "sk-test"}
    runs, release = tmp_path / "runs.txt", tmp_path / "release"
    # The command says it runs (its pid), then waits for the release file.
    command = (
        f"echo $$ >> {runs}; while [ ! -f {release} ]; do sleep 0.05; done; python3 -B test_calc.py"
    )
    agents_md = f"# Calc\n\n## Tests\n\n```sh\n{command}\n```\n"
    repo = calc_repo(tmp_path / "repos", **{"AGENTS.md": agents_md})
    leases = lane.root / "data" / "agents" / "coding" / "leases"
    try:
        lane.start_worker()
        first = lane.start(["agents"], "agents: ready", **env)
        job = new_job_key()
        subject = job_subject(repo, "make the test pass", discover(repo), 3, "auto")
        start = JobStart(key=job, playbook_key="coding-task", subject=subject)
        lane.send(json.loads(encode(start)))

        # Mid-validation: the command runs (attempt 1, the model's claim alone).
        _until("the validation to start", lambda: runs.exists() and bool(runs.read_text()))
        [held] = [json.loads(p.read_text()) for p in leases.glob("*.json")]
        assert (held["job_key"], held["pid"]) == (job, first.proc.pid)
        first.stop(signal.SIGKILL)
        orphan = int(runs.read_text().split()[0])  # its command, left behind
        os.kill(orphan, signal.SIGKILL)
        release.touch()
        second = lane.start(["agents"], "agents: ready", **env)

        # Mid-edit: the model's edit call (the one that writes the fix) in flight.
        _until("the edit call", gate.entered.is_set)
        [held] = [json.loads(p.read_text()) for p in leases.glob("*.json")]
        # Taken again by the job itself, in the new process, when it validated again.
        assert (held["job_key"], held["pid"], held["state"]) == (job, second.proc.pid, "running")
        second.stop(signal.SIGKILL)
        gate.opened.set()
        lane.start(["agents"], "agents: ready", **env)

        lane.wait_until(
            "decisions",
            lambda rs: any(r["key"] == job and r["value"].get("status") == "done" for r in rs),
            timeout=120,
        )
        failed = _applied(lane, job, "validation_failed")
        passed = _applied(lane, job, "validation_passed")
        # Attempt 1 ran twice (killed, then again) and counts once: one fact,
        # the same attempt; attempt 2 is the fix's.
        assert len(runs.read_text().split()) == 3, runs.read_text()
        assert len(failed) == 1, failed
        assert len(passed) == 1, passed
        assert failed[0]["idempotency_key"] != passed[0]["idempotency_key"]
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
        assert not list(leases.glob("*.json"))  # let go when the job ended
    finally:
        gate.opened.set()
        model.stop()
