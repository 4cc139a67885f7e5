"""`lemongraph dev --keep`: stopped and started again, the embedded broker is given
back what it held (docs/operations.md, "Keeping dev state"): the jobs, the schedules
added at run time, the conversations and the journal, and the worker decides on from
there."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from stream.runtime.broker import free_port
from tests.lanes import WorkerProcess, wait_for
from tests.stream.cli.test_dev import exit_within, start_dev

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

SCHEDULE = {
    "id": "nightly-review",
    "name": "Nightly review",
    "schedule": "daily at 02:00",
    "action": {"type": "start_job", "playbook_key": "onboarding", "key": "review-{date}"},
}


def client_of(dev: WorkerProcess, api_port: int) -> httpx.Client:
    """An API client with the dev token ``dev`` printed."""
    [token] = re.findall(r"dev token \([^)]*\): (lemongraph_sk_\S+)", "".join(dev.lines))
    return httpx.Client(
        base_url=f"http://127.0.0.1:{api_port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def job(client: httpx.Client, key: str) -> dict[str, Any]:
    answer = client.get(f"/v1/jobs/{key}")
    return answer.json() if answer.status_code == 200 else {}


def stop(dev: WorkerProcess) -> str:
    """Ctrl-C, as a developer stops it; what it said."""
    dev.proc.send_signal(signal.SIGINT)
    assert exit_within(dev, 60) == 0, "".join(dev.lines)
    return "".join(dev.lines)


def test_dev_keep_restarts_with_the_jobs_and_schedules_it_had(tmp_path: Path) -> None:
    api_port = free_port()
    first = start_dev(tmp_path, free_port(), "--keep", LEMONGRAPH_API_PORT=str(api_port))
    try:
        first.wait_for(": ready (group", timeout=90)
        assert "starting fresh" in "".join(first.lines)
        with client_of(first, api_port) as client:
            started = client.post(
                "/v1/jobs",
                json={"key": "job-1", "playbook_key": "onboarding"},
            )
            assert started.status_code == 202, started.text
            for action in ("id_uploaded", "self_service_completed", "account_activated"):
                sent = client.post("/v1/events", json={"key": "job-1", "action": action})
                assert sent.status_code == 202, sent.text
            wait_for(lambda: job(client, "job-1").get("status") == "done", what="job-1 done")
            added = client.post("/v1/schedules", json=SCHEDULE)
            assert added.status_code == 201, added.text
            decisions = client.get("/v1/jobs/job-1/decisions").json()["decisions"]
        said = stop(first)
    finally:
        first.stop(signal.SIGKILL)
    assert "state: kept: wrote" in said, said

    api_port = free_port()
    second = start_dev(tmp_path, free_port(), "--keep", LEMONGRAPH_API_PORT=str(api_port))
    try:
        second.wait_for(": ready (group", timeout=90)
        said = "".join(second.lines)
        assert "state: kept: restored" in said, said
        assert "did not stop cleanly" not in said, said
        with client_of(second, api_port) as client:
            assert job(client, "job-1")["status"] == "done"
            assert client.get("/v1/jobs/job-1/decisions").json()["decisions"] == decisions
            kept = client.get("/v1/schedules/nightly-review")
            assert kept.status_code == 200, kept.text
            assert kept.json()["name"] == "Nightly review"
            assert kept.json()["by"] == "dev"  # the token's name: written through the API
            # The worker decides on past what it had applied: a new job is
            # started (not skipped as a re-delivery, not stopped as a reset).
            started = client.post("/v1/jobs", json={"key": "job-2", "playbook_key": "onboarding"})
            assert started.status_code == 202, started.text
            wait_for(lambda: job(client, "job-2").get("status") == "running", what="job-2")
        said = stop(second)
    finally:
        second.stop(signal.SIGKILL)
    # What keeping costs, in the test's report (docs/operations.md, "Keeping dev state").
    print(*(line for line in said.splitlines() if line.startswith("state: kept")), sep="\n")
