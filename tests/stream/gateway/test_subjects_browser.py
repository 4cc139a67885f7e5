"""The job page shows its subject's profile (docs/memory.md, "Reading it"), in
headless Chromium (the ``browser`` of tests/stream/gateway/conftest.py): each
current fact with its value, source, a link to the event that proved it (its
decision, marked on its job's page) and one to that job; a job whose subject has
no profile says nothing is remembered."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page

from tests.lanes import wait_for
from tests.stream.gateway.conftest import GatewayProcess, Lane
from tests.stream.gateway.test_subjects import gateway  # noqa: F401 - the module's gateway

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]


REMEMBERING = """\
key: remembering-ui
version: 1
remember: [plan_chosen]
milestones:
  - {id: choose, condition: plan_chosen WITHIN 30d}
"""


@pytest.fixture(scope="module")
def served(module_lane: Lane, gateway: GatewayProcess) -> GatewayProcess:  # noqa: F811
    (module_lane.playbooks / "remembering-ui.yaml").write_text(REMEMBERING)
    module_lane.start_worker()
    return gateway


def test_the_job_page_shows_its_subjects_facts(served: GatewayProcess, browser: Browser) -> None:
    token = served.token(name="browser")
    with served.client(token) as client:
        for key, subject in (("pr-1", {"id": "s-ada"}), ("pr-2", {"id": "s-nobody"})):
            started = client.post(
                "/v1/jobs", json={"key": key, "playbook_key": "onboarding", "subject": subject}
            )
            assert started.status_code == 202, started.text
    page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(served.ui + "/#token=" + token)
    page.goto(served.ui + "/jobs/pr-1")
    page.wait_for_selector("#profile:not([hidden]) tr[data-fact='plan_chosen']", timeout=30_000)
    assert page.text_content("#profile-subject") == "s-ada"
    plan = page.locator("#profile-facts tr[data-fact='plan_chosen'] td")
    assert plan.nth(1).text_content() == "team"
    assert plan.nth(2).text_content() == "world"
    link = page.locator("#profile-facts tr[data-fact='plan_chosen'] a:not([data-event-link])")
    assert link.text_content() == "job job-b"
    assert link.get_attribute("href") == "/jobs/job-b"
    proof = page.locator("#profile-facts tr[data-fact='plan_chosen'] a[data-event-link]")
    assert proof.text_content() == "e-40"
    assert proof.get_attribute("href") == "/jobs/job-b?event=e-40"
    assert "e-40" in (plan.nth(4).text_content() or "")
    assert page.locator("#profile-facts tr[data-fact]").count() == 2  # the current facts only
    page.goto(served.ui + "/jobs/pr-2")
    page.wait_for_selector(
        "#profile:not([hidden]) td:has-text('Nothing remembered')", timeout=30_000
    )
    assert problems == []


def test_an_event_link_marks_the_decision_that_remembered_it(
    served: GatewayProcess,
    browser: Browser,
) -> None:
    token = served.token(name="browser")
    with served.client(token) as client:

        def started() -> bool:
            body = {"key": "pr-3", "playbook_key": "remembering-ui", "subject": {"id": "s-ui"}}
            return client.post("/v1/jobs", json=body).status_code in (202, 409)

        wait_for(started, timeout=60, what="the playbook remembering-ui registered")
        body = {"key": "pr-3", "action": "plan_chosen", "value": "pro", "idempotency_key": "e-ui-1"}
        assert client.post("/v1/events", json=body).status_code == 202
    page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(served.ui + "/#token=" + token)
    page.goto(served.ui + "/jobs/pr-3?event=e-ui-1")
    row = page.wait_for_selector("#decisions tr.focused[data-event='e-ui-1']", timeout=60_000)
    assert row is not None
    assert "plan_chosen" in (row.text_content() or "")
    assert page.locator("#decisions tr.focused").count() == 1  # only the event linked to
    assert problems == []
