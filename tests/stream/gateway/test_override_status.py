"""A job that ends ``completed_with_override`` (docs/playbooks.md, "Ending with an
override") as the API shows it, without Kafka: what a real engine wrote, applied to
the read model, then listed and filtered through the real route
(``GET /v1/jobs?status=``) and viewed, never as ``done``."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from playwright.sync_api import Browser, expect

from stream.gateway.api import build_api
from stream.gateway.guard import Guard
from stream.gateway.ratelimit import RateLimiter
from stream.gateway.routes.shared import Gateway
from stream.gateway.server import build_ui
from stream.gateway.tokens import mint_token
from stream.gateway.views import job_summary, job_view
from tests.lanes import wait_for
from tests.stream.gateway.test_readmodel import model_after

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # test_readmodel's: its worker clock is 30 days on
SECRET = "s" * 32
SPEC: dict[str, Any] = {
    "key": "fix-or-accept",
    "version": 1,
    "complete_when": "any",
    "milestones": [
        {"id": "validated", "condition": "validation_passed WITHIN 7d"},
        {
            "id": "acceptedAsIs",
            "condition": "failed_validation_accepted WITHIN 7d",
            "ends": "completed_with_override",
        },
    ],
}


class _Client:
    async def fetch_all_metadata(self) -> None:
        return None


class _Producer:
    client = _Client()


def start(key: str, hours: int) -> tuple[dict[str, object], datetime]:
    return {"type": "job.start", "key": key, "playbook_key": SPEC["key"]}, at(hours)


def event(key: str, action: str, hours: int) -> tuple[dict[str, object], datetime]:
    return {"type": "event", "key": key, "action": action}, at(hours)


def at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


def test_the_api_lists_filters_and_shows_an_override_apart_from_done() -> None:
    model = model_after(
        start("overridden", 0),
        start("passed", 0),
        start("open", 0),
        event("overridden", "failed_validation_accepted", 1),
        event("passed", "validation_passed", 2),
        spec=SPEC,
    )
    entry = model.entry("overridden")
    assert entry is not None
    view = job_view(model, entry)
    assert view.status == "completed_with_override"
    assert view.ended_at is not None
    assert {m.id: m.state for m in view.milestones} == {
        "validated": "dropped",
        "acceptedAsIs": "done",
    }
    assert job_summary(entry).status == "completed_with_override"

    model.caught_up = True
    gateway = Gateway(model, _Producer(), Guard(SECRET, RateLimiter(100, 100), 1 << 20))
    token = mint_token(SECRET, now=time.time())
    with TestClient(build_api(gateway)) as client:
        auth = {"Authorization": f"Bearer {token}"}

        def listed(status: str) -> list[tuple[str, str]]:
            answer = client.get("/v1/jobs", params={"status": status}, headers=auth)
            assert answer.status_code == 200, answer.text
            return [(j["key"], j["status"]) for j in answer.json()["jobs"]]

        assert listed("completed_with_override") == [("overridden", "completed_with_override")]
        assert listed("done") == [("passed", "done")]
        assert listed("running") == [("open", "running")]
        one = client.get("/v1/jobs/overridden", headers=auth).json()
        assert one["status"] == "completed_with_override"
        # An unknown status is still refused, naming the statuses.
        wrong = client.get("/v1/jobs", params={"status": "overridden"}, headers=auth)
        assert wrong.status_code == 422
        assert "completed_with_override" in wrong.text


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_the_ui_says_completed_with_override_not_done(browser: Browser) -> None:
    """The real page and API served (uvicorn, in this process) over a read model, in
    headless Chromium (the test process's: tests/stream/gateway/browser.py): the
    list's badge says "completed with override", in another colour than done's, and
    the status filter keeps only that job."""
    model = model_after(
        start("overridden", 0),
        start("passed", 0),
        event("overridden", "failed_validation_accepted", 1),
        event("passed", "validation_passed", 2),
        spec=SPEC,
    )
    model.caught_up = True
    gateway = Gateway(model, _Producer(), Guard(SECRET, RateLimiter(100, 100), 1 << 20))
    server = uvicorn.Server(
        uvicorn.Config(build_ui(build_api(gateway)), host="127.0.0.1", port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="the API serving")
        port = server.servers[0].sockets[0].getsockname()[1]
        token = mint_token(SECRET, now=time.time())
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{port}/#token={token}")
        overridden = page.locator('tr[data-job="overridden"] .badge')
        passed = page.locator('tr[data-job="passed"] .badge')
        expect(overridden).to_have_text("completed with override")
        expect(passed).to_have_text("done")
        color = "el => getComputedStyle(el).color"
        assert overridden.evaluate(color) != passed.evaluate(color)
        page.select_option("#status-filter", "completed_with_override")
        expect(page.locator("tr.job-row")).to_have_count(1)
        expect(page.locator("tr.job-row")).to_have_attribute("data-job", "overridden")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
