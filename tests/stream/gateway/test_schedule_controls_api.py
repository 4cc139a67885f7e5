"""LemonAutomation's controls through the real gateway, the real embedded broker
and one real worker shared by the module (docs/schedules.md, "Run now", "Abort",
"One-shot schedules", "Waking many"): what each route writes, what the worker
decides of it, and the CLI's commands beside them. Each test keeps to its own
schedule ids; a wait is for a positive marker (a run's record, a 404, a later
report's effect), never a sleep."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from tests.lanes import WorkerProcess
from tests.stream.gateway.conftest import GatewayProcess, Lane, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

START = {"type": "start_job", "playbook_key": "onboarding"}
#: A prompt no agents service runs here: its run stays running until it is ended.
PROMPT = {"type": "prompt", "agent": "nobody", "prompt": "Check."}


@pytest.fixture(scope="module")
def worker(module_lane: Lane) -> WorkerProcess:
    return module_lane.start_worker()


@pytest.fixture
def client(shared_gateway: GatewayProcess, worker: WorkerProcess) -> Iterator[httpx.Client]:
    with shared_gateway.client(shared_gateway.token(name="ops-ada")) as http:
        yield http


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def create(client: httpx.Client, sid: str, **fields: Any) -> dict[str, Any]:
    body = {"id": sid, "name": sid, "schedule": "daily at 03:00", "action": START, **fields}
    if "at" in fields:
        del body["schedule"]
    return ok(client.post("/v1/schedules", json=body), 201)


def run_of(client: httpx.Client, sid: str, run_id: str, status: str) -> dict[str, Any]:
    """Wait for schedule ``sid``'s run ``run_id`` to read ``status``."""

    def check() -> dict[str, Any] | None:
        runs = ok(client.get(f"/v1/schedules/{sid}/runs"))["runs"]
        return next((r for r in runs if r["run_id"] == run_id and r["status"] == status), None)

    found: dict[str, Any] = wait_for(check, timeout=60, what=f"run {run_id} {status}")
    return found


def audits(lane: Lane, sid: str) -> list[dict[str, Any]]:
    return [r["value"] for r in lane.read("audit") if r["key"] == sid]


def test_a_run_now_runs_a_paused_schedule_once_per_request(
    module_lane: Lane, client: httpx.Client
) -> None:
    create(client, "ctl-run", enabled=False)
    answer = ok(client.post("/v1/schedules/ctl-run/run", json={"request_id": "r1"}), 202)
    assert answer["run_id"].startswith("mn-")
    assert answer["duplicate"] is False
    run = run_of(client, "ctl-run", answer["run_id"], "completed")
    assert run["triggered_by"] == "manual"
    assert run["job_key"] == answer["run_id"]
    wait_for(lambda: client.get(f"/v1/jobs/{run['job_key']}").status_code == 200, what="job")
    # The same request again (the header names it too): the same run, nothing written.
    again = client.post("/v1/schedules/ctl-run/run", headers={"Idempotency-Key": "r1"})
    assert ok(again, 202)["duplicate"] is True
    assert ok(again, 202)["run_id"] == answer["run_id"]
    [audit] = [a for a in audits(module_lane, "ctl-run") if a["action"] == "run"]
    assert audit["by"] == "ops-ada"
    assert audit["detail"]["run_id"] == answer["run_id"]
    # The CLI's run now of the same schedule: another request, another run.
    line = module_lane.cli("schedule", "run", "ctl-run", "--request-id", "c1").stdout
    assert line.startswith("ctl-run: run now (request c1, run mn-"), line
    same = module_lane.cli("schedule", "run", "ctl-run", "--request-id", "c1").stdout
    assert "duplicate: already run now with request id c1" in same, same


def test_an_abort_ends_a_running_run_and_a_late_report_changes_nothing(
    module_lane: Lane, client: httpx.Client
) -> None:
    create(client, "ctl-abort", action=PROMPT, timeout="1h", overlap="allow_all")
    first = ok(client.post("/v1/schedules/ctl-abort/run", json={"request_id": "a"}), 202)
    running = run_of(client, "ctl-abort", first["run_id"], "running")
    assert running["triggered_by"] == "manual"
    url = f"/v1/schedules/ctl-abort/runs/{first['run_id']}/abort"
    sent = ok(client.post(url), 202)
    assert sent["run_id"] == first["run_id"]
    aborted = run_of(client, "ctl-abort", first["run_id"], "aborted")
    assert aborted["error"] == f"aborted on request abort-{first['run_id']}"
    # The same abort again is the same (duplicate); another one is refused, by
    # the API and by the CLI: the run ended.
    assert ok(client.post(url), 202)["duplicate"] is True
    other = client.post(url, json={"request_id": "again"})
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "run_not_active"
    refused = module_lane.cli("schedule", "abort", "ctl-abort", first["run_id"], check=False)
    assert refused.returncode == 1
    assert "is not running: it ended aborted" in refused.stderr
    # The agents service's report of the aborted run comes late; a report of a
    # second run after it, on the same partition, proves it was read.
    second = ok(client.post("/v1/schedules/ctl-abort/run", json={"request_id": "b"}), 202)
    run_of(client, "ctl-abort", second["run_id"], "running")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reports = [
        {"type": "schedule.report", "schema": 1, "schedule_id": "ctl-abort", "run_id": rid,
         "status": "completed", "output": text, "at": now}
        for rid, text in ((first["run_id"], "too late"), (second["run_id"], "in time"))
    ]  # fmt: skip
    module_lane.produce([(b"ctl-abort", orjson.dumps(r)) for r in reports], "schedule-runs")
    assert run_of(client, "ctl-abort", second["run_id"], "completed")["output"] == "in time"
    still = run_of(client, "ctl-abort", first["run_id"], "aborted")
    assert still["output"] is None
    [audit] = [a for a in audits(module_lane, "ctl-abort") if a["action"] == "abort"]
    assert audit["detail"] == {
        "request_id": f"abort-{first['run_id']}",
        "run_id": first["run_id"],
    }


def test_a_one_shot_runs_at_its_instant_then_is_removed(
    module_lane: Lane, client: httpx.Client
) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    refused = client.post(
        "/v1/schedules", json={"id": "ctl-late", "name": "Late", "at": past, "action": START}
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "at"
    at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    created = create(client, "ctl-once", at=at.isoformat())
    assert created["at"] == at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [s["utc"] for s in created["next"]] == [created["at"]]
    wait_for(
        lambda: client.get("/v1/schedules/ctl-once").status_code == 404,
        timeout=60,
        what="the one-shot removed after its run",
    )
    [run] = [r for r in module_lane.read("schedule-runs") if r["key"] == "ctl-once"]
    assert run["value"]["status"] == "completed"
    assert run["value"]["slot"] == created["at"]
    removal = [a for a in audits(module_lane, "ctl-once") if a["action"] == "delete"]
    assert [(a["by"], a["detail"]["reason"]) for a in removal] == [
        ("one-shot", "one-shot: its run ended")
    ]


def test_many_schedules_are_woken_by_ids_labels_and_agent(
    module_lane: Lane, client: httpx.Client
) -> None:
    create(client, "ctl-many-a", meta={"team": "ctl-ops"})
    create(client, "ctl-many-b", meta={"team": "ctl-ops"})
    create(client, "ctl-many-c", meta={"team": "ctl-sales"})
    create(client, "ctl-many-p", action={**PROMPT, "agent": "ctl-agent"}, timeout="1h")
    body = {"labels": {"team": "ctl-ops"}, "request_id": "m1", "context": {"why": "drill"}}
    woken = ok(client.post("/v1/schedules/wake", json=body), 202)
    assert [w["schedule_id"] for w in woken["woken"]] == ["ctl-many-a", "ctl-many-b"]
    for wake in woken["woken"]:
        run = run_of(client, wake["schedule_id"], wake["run_id"], "completed")
        assert (run["triggered_by"], run["context"]) == ("wake", {"why": "drill"})
    again = ok(client.post("/v1/schedules/wake", json=body), 202)
    assert [w["duplicate"] for w in again["woken"]] == [True, True]
    by_agent = ok(client.post("/v1/schedules/wake", json={"agent": "ctl-agent"}), 202)
    [prompt] = by_agent["woken"]
    run_of(client, "ctl-many-p", prompt["run_id"], "running")
    by_ids = ok(client.post("/v1/schedules/wake", json={"ids": ["ctl-many-c", "ctl-none"]}), 202)
    assert [w["schedule_id"] for w in by_ids["woken"]] == ["ctl-many-c"]
    assert by_ids["not_found"] == ["ctl-none"]
    # The CLI, by label: the same request id is a duplicate for each.
    lines = module_lane.cli(
        "schedule", "wake", "--label", "team=ctl-ops", "--request-id", "m1"
    ).stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["ctl-many-a", "ctl-many-b"]
    assert all("duplicate: already woken with request id m1" in line for line in lines), lines


def test_the_audit_and_the_runs_are_queried_by_schedule_action_and_since(
    module_lane: Lane, client: httpx.Client
) -> None:
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    create(client, "ctl-audit")
    ok(client.patch("/v1/schedules/ctl-audit", json={"enabled": False}))
    run = ok(client.post("/v1/schedules/ctl-audit/run", json={"request_id": "q"}), 202)

    def mine() -> list[dict[str, Any]] | None:
        got = ok(client.get("/v1/audit", params={"schedule": "ctl-audit"}))["records"]
        return got if len(got) == 3 else None

    records = wait_for(mine, what="the three audit records at the gateway")
    assert [r["action"] for r in records] == ["run", "pause", "create"]  # newest first
    assert {r["by"] for r in records} == {"ops-ada"}
    runs_only = ok(client.get("/v1/audit", params={"schedule": "ctl-audit", "action": "run"}))
    assert [r["detail"]["run_id"] for r in runs_only["records"]] == [run["run_id"]]
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ok(client.get("/v1/audit", params={"since": later}))["records"] == []
    # The run's history since an instant: this run, and none since later.
    run_of(client, "ctl-audit", run["run_id"], "completed")
    since = before.strftime("%Y-%m-%dT%H:%M:%SZ")
    listed = ok(client.get("/v1/schedules/ctl-audit/runs", params={"since": since}))["runs"]
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    none = ok(client.get("/v1/schedules/ctl-audit/runs", params={"since": later}))["runs"]
    assert none == []
    # The CLI reads the topic itself.
    lines = module_lane.cli("schedule", "audit", "ctl-audit").stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["run", "pause", "create"], lines
    assert all("schedule:ctl-audit  by ops-ada" in line for line in lines), lines
    only = module_lane.cli("schedule", "audit", "ctl-audit", "--action", "pause").stdout
    assert only.count("\n") == 1, only
    cli_runs = module_lane.cli("schedule", "runs", "ctl-audit", "--since", later).stdout
    assert cli_runs == ""
