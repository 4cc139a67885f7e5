"""The job page shows its subject's profile (docs/memory.md, "Reading it"), in
headless Chromium (the ``browser`` of tests/stream/gateway/conftest.py): each
current fact with its value, source and a link to the job whose event proved
it; a job whose subject has no profile says nothing is remembered."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page

from tests.stream.gateway.conftest import GatewayProcess, Lane
from tests.stream.gateway.test_subjects import gateway  # noqa: F401 - the module's gateway

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def served(module_lane: Lane, gateway: GatewayProcess) -> GatewayProcess:  # noqa: F811
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
    link = page.locator("#profile-facts tr[data-fact='plan_chosen'] a")
    assert link.text_content() == "job job-b"
    assert link.get_attribute("href") == "/jobs/job-b"
    assert "e-40" in (plan.nth(4).text_content() or "")
    assert page.locator("#profile-facts tr[data-fact]").count() == 2  # the current facts only
    page.goto(served.ui + "/jobs/pr-2")
    page.wait_for_selector(
        "#profile:not([hidden]) td:has-text('Nothing remembered')", timeout=30_000
    )
    assert problems == []
