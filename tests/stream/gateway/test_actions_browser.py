"""The UI acts, in headless Chromium (tests/stream/gateway/browser.py), through
the API's own routes with the page's token: the address `lemongraph dev` prints
(`/ui/#token=...`) signs the tab in and leaves the address bar; a job is started
from the playbook picker and opens; an event is sent and its decision said; a
schedule is paused, resumed and woken from the Schedules page, its run coming
back; run now runs a paused schedule by hand, naming its run; and a refused
action shows the API's message
(a duplicate key, a token whose source may not), never its JSON. One gateway and
one worker serve the module; each test keeps to its own job keys and schedules."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.stream.gateway.browser import ARTIFACTS, new_page
from tests.stream.gateway.conftest import GatewayProcess, Lane

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]

WAIT = 30_000


@pytest.fixture(scope="module")
def acting(module_lane: Lane, shared_gateway: GatewayProcess) -> GatewayProcess:
    """The module's gateway, with a worker deciding behind it."""
    module_lane.start_worker()
    return shared_gateway


def _signed_in(
    browser: Browser, gateway: GatewayProcess, problems: list[str], **token: Any
) -> Page:
    page = new_page(browser, problems)
    page.goto(f"{gateway.ui}/ui/#token={gateway.token(**token)}")
    page.wait_for_selector("#list-count:has-text('job(s)')", timeout=WAIT)
    return page


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _status(page: Page, selector: str, text: str) -> str:
    page.wait_for_selector(f"{selector}:has-text({text!r})", timeout=WAIT)
    return page.locator(selector).inner_text()


def test_the_dev_address_signs_the_tab_in_and_leaves_the_address_bar(
    acting: GatewayProcess, browser: Browser
) -> None:
    problems: list[str] = []
    token = acting.token(name="dev")
    page = _signed_in(browser, acting, problems, name="dev")
    # The fragment is gone from the address (replaced, not a new entry); /ui/ is the list.
    assert page.url == f"{acting.ui}/"
    kept = page.evaluate("() => sessionStorage.getItem('lemongraph.token')")
    assert kept.startswith("lemongraph_sk_")
    assert page.evaluate("() => localStorage.getItem('lemongraph.token')") is None
    assert page.get_attribute("#nav-jobs", "aria-current") == "page"
    # A link of the page keeps the tab signed in.
    page.click("#nav-schedules")
    page.wait_for_selector("#schedules-count:has-text('schedule(s)')", timeout=WAIT)
    # Another tab (its own session) is not signed in by this one.
    other = new_page(browser, problems)
    other.goto(f"{acting.ui}/")
    other.wait_for_selector("#notice:has-text('paste an API token first')", timeout=WAIT)
    assert token not in other.url
    assert not problems, problems


def test_a_job_is_started_from_the_picker_and_an_event_gets_its_decision(
    acting: GatewayProcess, browser: Browser
) -> None:
    problems: list[str] = []
    page = _signed_in(browser, acting, problems, name="browser")
    page.click("#start-panel summary")
    page.wait_for_selector("#start-playbook option[value='onboarding']", state="attached")
    options = page.eval_on_selector_all("#start-playbook option", "os => os.map(o => o.value)")
    assert sorted(options) == ["lead-qualification", "onboarding", "payment-reminders"]
    page.select_option("#start-playbook", "onboarding")
    assert "collectIdentity" in page.locator("#start-about").inner_text()
    page.fill("#start-key", "act-1")
    page.fill("#start-subject", "id: s-act\ncompany: Acme")
    page.fill("#start-contacts", "Ada <ada@example.com>\ngrace@example.com")
    page.click("#start-form button[type=submit]")

    # The job's page opens, and shows the job once the worker decided its start.
    page.wait_for_url(f"{acting.ui}/jobs/act-1", timeout=WAIT)
    page.wait_for_selector(
        '#graph [data-milestone="collectIdentity"][data-state="open"]', timeout=WAIT
    )
    about = page.locator("#job-subject").inner_text()
    assert "id: s-act · company: Acme" in about
    assert "Ada <ada@example.com>, grace@example.com" in about
    # The conditions' facts are offered as the event's action.
    facts = page.eval_on_selector_all("#event-actions option", "os => os.map(o => o.value)")
    assert "id_uploaded" in facts
    assert "WITHIN" not in facts

    page.fill("#event-action", "id_uploaded")
    page.click("#event-form button[type=submit]")
    said = _status(page, "#event-status", "decided")
    assert "event id_uploaded decided: applied" in said, said
    assert "collectIdentity: open→done" in said, said
    _shot(page, "ui-event-decided")
    page.wait_for_selector(
        '#graph [data-milestone="collectIdentity"][data-state="done"]', timeout=WAIT
    )
    assert page.get_attribute("#event-status", "data-kind") == "decided"

    # The same key again: the API's 409, in its words, on the form.
    page.click("#nav-jobs")
    page.wait_for_selector('tr[data-job="act-1"]', timeout=WAIT)
    assert page.locator("#start-panel").get_attribute("open") is not None  # still open
    page.wait_for_selector("#start-playbook option[value='onboarding']", state="attached")
    page.select_option("#start-playbook", "onboarding")
    page.fill("#start-key", "act-1")
    page.click("#start-form button[type=submit]")
    said = _status(page, "#start-status", "refused")
    assert said == "refused (409 job_exists): job 'act-1' exists already", said
    assert "{" not in said
    assert page.get_attribute("#start-status", "data-kind") == "refused"
    assert page.url == f"{acting.ui}/"
    _shot(page, "ui-start-refused")
    assert not problems, problems


def test_a_token_that_may_not_act_is_told_why(acting: GatewayProcess, browser: Browser) -> None:
    problems: list[str] = []
    with acting.client(acting.token(name="ops")) as client:
        assert (
            client.post("/v1/jobs", json={"key": "act-2", "playbook_key": "onboarding"}).status_code
            == 202
        )
    page = _signed_in(browser, acting, problems, name="bot", source="agent")
    page.click("#start-panel summary")
    page.wait_for_selector("#start-playbook option[value='onboarding']", state="attached")
    page.fill("#start-key", "act-3")
    page.click("#start-form button[type=submit]")
    said = _status(page, "#start-status", "refused")
    assert said.startswith("refused (403 source_not_allowed): "), said
    assert "this token's source is agent" in said
    assert "{" not in said

    # An agent may send an event, but it is a claim: applied, and it moves nothing.
    page.goto(f"{acting.ui}/jobs/act-2")
    page.wait_for_selector(
        '#graph [data-milestone="collectIdentity"][data-state="open"]', timeout=WAIT
    )
    page.fill("#event-action", "id_uploaded")
    page.fill("#event-idem", "claim-1")
    page.click("#event-form button[type=submit]")
    said = _status(page, "#event-status", "decided")
    assert "applied (claim, not evidence) — nothing moved" in said, said
    # The same key again: the page says it is the one decision of that key.
    page.fill("#event-action", "id_uploaded")
    page.fill("#event-idem", "claim-1")
    page.click("#event-form button[type=submit]")
    said = _status(page, "#event-status", "sent before")
    assert said.startswith("event id_uploaded: this key was sent before, decided once: "), said
    assert page.get_attribute("#event-status", "data-kind") == "decided"
    # A key past the key rule's 200 characters: the API's 422 names the field.
    page.fill("#event-action", "id_uploaded")
    page.fill("#event-idem", "k" * 201)
    page.click("#event-form button[type=submit]")
    said = _status(page, "#event-status", "refused")
    assert said.startswith("refused (422 invalid_body): "), said
    assert "idempotency_key" in said
    assert "201 characters long: at most 200" in said
    assert not problems, problems


SCHEDULE = {
    "id": "act-daily",
    "name": "Act daily",
    "schedule": "daily at 04:00",
    "action": {"type": "start_job", "playbook_key": "onboarding"},
}


def _row_state(page: Page, state: str) -> None:
    page.wait_for_selector(f'tr[data-schedule="act-daily"][data-state="{state}"]', timeout=WAIT)


def test_a_schedule_is_paused_resumed_and_woken_from_the_page(
    acting: GatewayProcess, browser: Browser
) -> None:
    problems: list[str] = []
    with acting.client(acting.token(name="ops")) as client:
        assert client.post("/v1/schedules", json=SCHEDULE).status_code == 201
    page = _signed_in(browser, acting, problems, name="browser")
    page.click("#nav-schedules")
    _row_state(page, "enabled")
    controls = 'tr[data-schedule="act-daily"] .schedule-controls'
    page.click(f"{controls} button[data-action=pause]")
    _row_state(page, "paused")
    assert "act-daily: paused" in page.locator("#schedules-action-status").inner_text()
    assert page.url == f"{acting.ui}/schedules"  # the button is not the row's link
    page.click(f"{controls} button[data-action=resume]")
    _row_state(page, "enabled")
    assert "act-daily: resumed" in page.locator("#schedules-action-status").inner_text()

    page.click(f"{controls} button[data-action=wake]")
    said = _status(page, "#schedules-action-status", "woken")
    run_id = said.split("woken: run ")[1].split()[0]
    # The wake's run comes back, started by the wake, with the job it started.
    page.click('tr[data-schedule="act-daily"] a')
    run = f'#schedule-runs tr[data-run="{run_id}"][data-status="completed"]'
    page.wait_for_selector(run, timeout=60_000)
    assert "wake" in page.locator(run).inner_text()
    # The schedule's own page has the controls too.
    page.click("#schedule-controls button[data-action=pause]")
    page.wait_for_selector('#schedule-state[data-state="paused"]', timeout=WAIT)
    assert "act-daily: paused" in page.locator("#schedule-action-status").inner_text()
    page.click("#schedule-controls button[data-action=resume]")
    page.wait_for_selector('#schedule-state[data-state="enabled"]', timeout=WAIT)

    # A token whose source may not write schedules: the API's 403, and nothing changes.
    bot = _signed_in(browser, acting, problems, name="bot", source="tool")
    bot.click("#nav-schedules")
    _row_state(bot, "enabled")
    bot.click(f"{controls} button[data-action=pause]")
    said = _status(bot, "#schedules-action-status", "refused")
    assert said.startswith("act-daily: refused (403 source_not_allowed): "), said
    assert "this token's source is tool" in said
    _shot(bot, "ui-schedule-refused")
    _row_state(bot, "enabled")
    assert not problems, problems


def test_run_now_runs_a_paused_schedule_and_names_its_manual_run(
    acting: GatewayProcess, browser: Browser
) -> None:
    problems: list[str] = []
    with acting.client(acting.token(name="ops")) as client:
        body = {**SCHEDULE, "id": "act-run", "enabled": False}
        assert client.post("/v1/schedules", json=body).status_code == 201
    page = new_page(browser, problems)
    page.goto(f"{acting.ui}/schedules/act-run#token={acting.token(name='browser')}")
    page.wait_for_selector('#schedule-state[data-state="paused"]', timeout=WAIT)
    page.click("#schedule-controls button[data-action=run]")
    said = _status(page, "#schedule-action-status", "run now: run ")
    run_id = said.split("run now: run ")[1].split()[0]
    assert run_id.startswith("mn-"), said
    # The run comes back, started by hand, though the schedule stays paused.
    run = f'#schedule-runs tr[data-run="{run_id}"][data-status="completed"]'
    page.wait_for_selector(run, timeout=60_000)
    assert "manual" in page.locator(run).inner_text()
    assert page.locator("#schedule-state").get_attribute("data-state") == "paused"
    assert not problems, problems


def test_a_one_shot_schedule_says_its_instant_in_the_list(
    acting: GatewayProcess, browser: Browser
) -> None:
    problems: list[str] = []
    once = {
        "id": "act-once",
        "name": "Act once",
        "at": "2099-01-02T03:04:00Z",
        "action": {"type": "start_job", "playbook_key": "onboarding"},
    }
    with acting.client(acting.token(name="ops")) as client:
        created = client.post("/v1/schedules", json=once)
        assert created.status_code == 201, created.text
    page = _signed_in(browser, acting, problems, name="browser")
    page.click("#nav-schedules")
    row = page.locator('tr[data-schedule="act-once"]')
    row.wait_for(timeout=WAIT)
    assert "once at 2099-01-02T03:04:00Z" in row.inner_text()
    assert not problems, problems
