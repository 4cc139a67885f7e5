"""The UI's Schedules page in headless Chromium (tests/stream/gateway/browser.py):
the nav link, schedules listed with their next runs in the schedule's own time
zone and in UTC (not the browser's zone), enabled or paused as the API says, and
per schedule its run history with every status shown — missed, skipped,
suppressed and refused (a job that was not started is not linked) included —
kept up to date without a reload, all under the page's Content-Security-Policy.
The module's tests share its gateway, each with schedules of its own."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
from playwright.sync_api import Browser

from tests.stream.gateway.browser import ARTIFACTS, new_page
from tests.stream.gateway.conftest import GatewayProcess, Lane
from topics import HeartbeatAlert, ScheduleRunRecord, encode

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]
REVIEW = {
    "id": "lead-review",
    "name": "Lead review",
    "schedule": "weekdays at 09:30",
    "timezone": "America/New_York",
    "action": {"type": "start_job", "playbook_key": "lead-qualification"},
}
HEARTBEAT = {
    "id": "heartbeat",
    "name": "Heartbeat",
    "schedule": "every 30m",
    "timezone": "Australia/Lord_Howe",
    "action": {"type": "prompt", "agent": "conversation", "prompt": "Anything?"},
    "meta": {"heartbeat": True},
}
PAGED = {**HEARTBEAT, "id": "paged", "name": "Paged"}


def run(
    rid: str, status: str, at: str, schedule: str = "heartbeat", **more: Any
) -> tuple[bytes, bytes]:
    record = ScheduleRunRecord(
        schedule_id=schedule,
        run_id=rid,
        status=status,  # type: ignore[arg-type]
        triggered_by=more.pop("triggered_by", "schedule"),
        root_run_id=rid,
        at=at,
        **more,
    )
    return schedule.encode(), encode(record)


def test_the_schedules_page_lists_next_runs_and_each_ones_history(
    module_lane: Lane, shared_gateway: GatewayProcess, browser: Browser
) -> None:
    lane, gateway = module_lane, shared_gateway
    token = gateway.token(name="browser")
    problems: list[str] = []
    page = new_page(browser, problems)  # the browser's zone is Asia/Tokyo
    with gateway.client(token) as client:
        before = client.get("/v1/schedules").json()["total"]  # the module's other tests'
        for body in (REVIEW, HEARTBEAT):
            assert client.post("/v1/schedules", json=body).status_code == 201
        assert client.patch("/v1/schedules/heartbeat", json={"enabled": False}).status_code == 200
        expected = client.get("/v1/schedules/lead-review").json()["next"][0]

    page.goto(f"{gateway.ui}/#token={token}")
    page.click("#nav-schedules")
    assert page.url == f"{gateway.ui}/schedules"
    assert page.get_attribute("#nav-schedules", "aria-current") == "page"
    assert page.get_attribute("#nav-jobs", "aria-current") is None
    row = page.locator('tr[data-schedule="lead-review"]')
    row.wait_for(timeout=30_000)
    assert row.get_attribute("data-state") == "enabled"
    assert page.locator('tr[data-schedule="heartbeat"]').get_attribute("data-state") == "paused"
    text = row.inner_text()
    assert "weekdays at 09:30 (30 9 * * 1-5)" in text
    assert "start job (lead-qualification)" in text
    # The next run in New York time and in UTC, whatever the browser's zone.
    local = expected["local"][:16].replace("T", " ")
    assert f"{local} {expected['abbreviation']} (America/New_York)" in text
    assert expected["utc"] in text
    assert re.search(r"09:30 E[SD]T \(America/New_York\)", text)
    assert "none yet" in text
    assert f"{before + 2} schedule(s)" in page.locator("#schedules-count").inner_text()

    # Resumed elsewhere: the list follows without a reload.
    marker = page.evaluate("() => (window.__same = Date.now())")
    with httpx.Client(base_url=gateway.api, headers={"Authorization": f"Bearer {token}"}) as c:
        assert c.patch("/v1/schedules/heartbeat", json={"enabled": True}).status_code == 200
    page.wait_for_selector('tr[data-schedule="heartbeat"][data-state="enabled"]', timeout=30_000)
    assert page.evaluate("() => window.__same") == marker

    # One schedule's page: its runs with their statuses, newest first.
    page.click('tr[data-schedule="heartbeat"] a')
    assert page.url == f"{gateway.ui}/schedules/heartbeat"
    page.wait_for_selector("#schedule-body:not([hidden])", timeout=30_000)
    assert page.locator("#schedule-state").inner_text() == "enabled"
    assert page.locator("#schedule-next li").count() == 5
    assert "(Australia/Lord_Howe)" in page.locator("#schedule-next").inner_text()
    assert "heartbeat" in page.locator("#schedule-meta").inner_text()
    hostile = '<img src=x onerror="window.__owned=1">'
    produce = [
            run("sl-1", "missed", "2026-12-01T08:00:00Z", slot="2026-12-01T06:00:00Z",
                slot_last="2026-12-01T07:00:00Z", missed_count=3),
            run("sl-2", "completed", "2026-12-01T08:30:00Z", slot="2026-12-01T08:30:00Z",
                output=hostile, delivered_to="web:job-1", job_key="job-1"),
            run("sl-3", "skipped", "2026-12-01T09:00:00Z", slot="2026-12-01T09:00:00Z",
                error="overlap: run sl-2 still running"),
            run("sl-4", "suppressed", "2026-12-01T09:30:00Z", slot="2026-12-01T09:30:00Z",
                output="HEARTBEAT_OK", suppressed=True),
            run("wk-1", "failed", "2026-12-01T09:45:00.123456Z", triggered_by="wake",
                error="model_error: the model did not answer", context={"why": "checking"}),
            (b"heartbeat", encode(HeartbeatAlert(
                schedule_id="heartbeat", run_id="wk-1", severity="critical", status="failed",
                triggered_by="wake", name="Heartbeat", at="2026-12-01T09:45:00Z"))),
            run("wk-2", "completed", "2026-12-01T09:50:00Z", triggered_by="wake",
                started_at="2026-12-01T09:50:00Z", job_key="auto-0426"),
    ]  # fmt: skip
    # The core refused wk-2's job.start (read from decisions: docs/schedules.md, "Run statuses").
    refusal = {
        "type": "decision", "job_key": "auto-0426", "now": "2026-12-01T09:50:00Z",
        "input": {"type": "job.start", "key": "auto-0426", "playbook_key": "onbaording",
                  "subject": {}, "contacts": []},
        "outcome": "refused", "refused": "unknown playbook 'onbaording'",
    }  # fmt: skip
    # (in a thread of its own: Playwright's sync API holds this thread's event loop)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lane.produce, [(b"auto-0426", orjson.dumps(refusal))], "decisions").result()
        pool.submit(lane.produce, produce, "schedule-runs").result()
    page.wait_for_selector(
        '#schedule-runs tr[data-run="wk-2"][data-status="refused"]', timeout=30_000
    )
    statuses = page.eval_on_selector_all(
        "#schedule-runs tbody tr", "rs => rs.map(r => r.dataset.status)"
    )
    assert statuses == ["refused", "failed", "suppressed", "skipped", "completed", "missed"]
    refused = page.locator('#schedule-runs tr[data-run="wk-2"]').inner_text()
    assert "job auto-0426 (not started)" in refused
    assert "error: unknown playbook 'onbaording'" in refused
    assert page.locator('#schedule-runs a[href="/jobs/auto-0426"]').count() == 0
    table = page.locator("#schedule-runs").inner_text()
    assert "3 slots missed, to 2026-12-01T07:00:00Z" in table
    assert "overlap: run sl-2 still running" in table
    assert "HEARTBEAT_OK" in table
    assert 'context: {"why":"checking"}' in table
    assert hostile in table  # shown as text, never run
    assert page.evaluate("() => window.__owned") is None
    link = page.locator('#schedule-runs tr[data-run="sl-2"] a[href="/jobs/job-1"]')
    assert link.inner_text() == "job-1"
    chip = page.locator('#schedule-runs tr[data-run="sl-4"] .chip')
    assert "run-suppressed" in (chip.get_attribute("class") or "")
    # A run's "at" as the next runs are shown: the schedule's wall time with its zone,
    # then the UTC instant (to the second), not the browser's Tokyo time.
    woken = page.locator('#schedule-runs tr[data-run="wk-1"] td').first
    assert re.fullmatch(
        r"2026-12-01 20:45:00 \S+ \(Australia/Lord_Howe\) · 2026-12-01T09:45:00Z",
        woken.inner_text().strip(),
    ), woken.inner_text()
    assert woken.locator("time").get_attribute("datetime") == "2026-12-01T09:45:00Z"
    legend = page.locator("#schedule-body .legend").inner_text()
    assert "aborted" in legend
    assert "refused" in legend

    # The list now says the last run.
    page.click("#schedule-view a[data-nav]")
    last = page.locator('tr[data-schedule="heartbeat"] td.last-run .chip[data-status="refused"]')
    last.wait_for(timeout=30_000)
    cell = page.locator('tr[data-schedule="heartbeat"] td.last-run').inner_text()
    assert re.search(
        r"2026-12-01 20:50:00 \S+ \(Australia/Lord_Howe\) · 2026-12-01T09:50:00Z", cell
    )
    # Its health (docs/schedules.md, "Health"): the last run that ran and what the runs
    # add up to; wk-1 failed, and wk-2's job.start was refused: two failures in a row.
    health = page.locator('tr[data-schedule="heartbeat"] td.health[data-failed-in-a-row="2"]')
    health.wait_for(timeout=30_000)
    assert health.locator('.chip[data-status="refused"]').count() == 1
    counts = health.inner_text()
    for said in ("failed in a row 2", "failed 2", "suppressed 1", "missed 3", "skipped 1",
                 "alerts 1"):  # fmt: skip
        assert said in counts, counts
    assert "retries" not in counts  # a counter at 0 is left out
    assert "none yet" in page.locator('tr[data-schedule="lead-review"] td.health').inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-schedules.png"), full_page=True)

    # An unknown schedule is said to be unknown.
    page.goto(f"{gateway.ui}/schedules/no-such")
    missing = page.locator("#schedule-missing")
    missing.wait_for(state="visible", timeout=30_000)
    assert "no schedule no-such" in missing.inner_text()
    assert "schedule_not_found" in missing.inner_text()
    assert page.locator("#schedule-body").is_hidden()

    response = httpx.get(f"{gateway.ui}/schedules/heartbeat")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "unsafe-inline" not in policy
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{gateway.ui}/schedules/heartbeat")
    page.wait_for_selector('#schedule-runs tr[data-run="wk-1"]', timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "ui-schedule.png"), full_page=True)
    assert not problems, problems


def test_older_runs_are_paged_in_and_stay_while_the_page_refreshes(
    module_lane: Lane, shared_gateway: GatewayProcess, browser: Browser
) -> None:
    lane, gateway = module_lane, shared_gateway
    token = gateway.token(name="browser")
    problems: list[str] = []
    page = new_page(browser, problems)
    with gateway.client(token) as client:
        assert client.post("/v1/schedules", json=PAGED).status_code == 201
    records = [run(f"sl-{n:03}", "completed", f"2026-12-01T{n // 60:02}:{n % 60:02}:00Z",
                   "paged")
               for n in range(105)]  # fmt: skip
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lane.produce, records, "schedule-runs").result()
    page.goto(f"{gateway.ui}/schedules/paged#token={token}")
    page.wait_for_selector('#schedule-runs tr[data-run="sl-104"]', timeout=30_000)
    rows = "#schedule-runs tbody tr"
    page.wait_for_function(f"() => document.querySelectorAll('{rows}').length === 100")
    page.click("#runs-more")
    page.wait_for_selector('#schedule-runs tr[data-run="sl-000"]', timeout=30_000)
    assert page.locator(rows).count() == 105
    assert page.locator("#runs-more").is_hidden()
    page.wait_for_timeout(4_500)  # two refreshes of the page
    assert page.locator(rows).count() == 105
    assert not problems, problems
