"""The UI in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright
through its executable path; the project's set-up installs it, never Playwright's
own browser download): a job starts, the event that clears its first milestone
arrives, and the page shows it done without a reload."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from agents.demo_tools import build_demo_tools
from agents.standin import build_standin
from topics import JournalModelCall, JournalRun, JournalToolCall, Tokens, encode

from .conftest import GatewayProcess, Lane

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


@pytest.fixture
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs Debian's chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def test_a_milestone_turns_done_on_the_page_without_a_reload(
    lane: Lane, gateway: GatewayProcess, browser: Browser
) -> None:
    lane.start_worker()
    token = gateway.token(name="browser")
    page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    outside: list[str] = []
    page.on(
        "request",
        lambda request: (
            None if request.url.startswith((gateway.ui, "data:")) else outside.append(request.url)
        ),
    )

    page.goto(gateway.ui + "/")
    page.fill("#token-input", token)  # pasted once, kept by the page
    page.click("#token-form button[type=submit]")

    with gateway.client(token) as client:
        started = client.post("/v1/jobs", json={"key": "ui-job", "playbook_key": "onboarding"})
        assert started.status_code == 202
        row = page.locator('tr[data-job="ui-job"]')
        row.wait_for(timeout=30_000)  # the list refreshes itself
        row.click()
        first = page.locator('#graph [data-milestone="collectIdentity"]')
        page.wait_for_selector(
            '#graph [data-milestone="collectIdentity"][data-state="open"]', timeout=30_000
        )
        assert "next" in (first.get_attribute("class") or "")
        page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
        marker = page.evaluate("() => (window.__sameDocument = Date.now())")

        sent = client.post(
            "/v1/events",
            json={"key": "ui-job", "action": "id_uploaded", "idempotency_key": "ui-upload"},
        )
        assert sent.status_code == 202

    page.wait_for_selector(
        '#graph [data-milestone="collectIdentity"][data-state="done"]', timeout=30_000
    )
    page.wait_for_selector(
        '#graph [data-milestone="bookCall"][data-state="open"].next', timeout=30_000
    )
    # Still the same document: the change arrived live, not through a reload.
    assert page.evaluate("() => window.__sameDocument") == marker
    card = page.locator('#milestones [data-milestone="collectIdentity"]')
    assert "TRUE" in card.inner_text()
    assert "ui-upload" in card.inner_text()  # the evidence the verdict cites
    page.wait_for_selector('#decisions tr[data-seq="2"]', timeout=30_000)
    countdown = '#milestones [data-milestone="bookCall"] .countdown'
    before = page.locator(countdown).inner_text()
    assert before.startswith(("in 3d", "in 2d"))
    # The deadline counts down, second by second.
    page.wait_for_function(
        "([sel, before]) => document.querySelector(sel).textContent !== before",
        arg=[countdown, before],
        timeout=5_000,
    )

    # The agents' journal for the job, live: records of the agents service's
    # shapes, on the real journal topic; their text is shown as text.
    hostile = '<img src=x onerror="window.__owned=1">'
    run = "ui-job#1"
    at = "2026-12-01T10:00:00Z"
    records = [
            (b"ui-job", encode(JournalModelCall(
                job_key="ui-job", run_id=run, agent="conversation", at=at, request="Agent: ...",
                response=hostile, latency_ms=12, outcome="ok",
                tokens=Tokens(input=120, output=8, cached=0, total=128)))),
            (b"ui-job", encode(JournalToolCall(
                job_key="ui-job", run_id=run, agent="conversation", at=at,
                tool="schedule_meeting", arguments='{"when": "10:00"}', outcome="done",
                http_status=200, result='{"ok": true}', latency_ms=5,
                fact="meeting_scheduled"))),
            (b"ui-job", encode(JournalRun(
                job_key="ui-job", run_id=run, agent="conversation", at=at, ended="done",
                turns=2, tool_calls=1, tokens=250))),
    ]  # fmt: skip
    # (in a thread of its own: Playwright's sync API holds this thread's event loop)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lane.produce, records, "journal").result()
    page.wait_for_selector('#journal tr[data-kind="journal.run"]', timeout=30_000)
    journal = page.locator("#journal").inner_text()
    assert "tokens 120 in / 8 out = 128" in journal
    assert "tool schedule_meeting" in journal
    assert "recorded meeting_scheduled" in journal
    assert "2 turn(s), 1 tool call(s), 250 tokens" in journal
    assert hostile in journal  # as text...
    assert page.locator("#journal img").count() == 0  # ...never as HTML
    assert page.evaluate("() => window.__owned") is None

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-job-view.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert not problems, problems
    assert not outside, f"the page reached outside its origin: {outside}"


CHAT = """\
key: chat
version: 1
instructions: Book a call with the customer, then activate the account.
milestones:
  - id: bookCall
    instructions: Offer a call and book it.
    condition: meeting_scheduled
    integrations: [email, calendar]
  - id: activateAccount
    needs: [bookCall]
    instructions: Activate the account.
    condition: account_activated
    integrations: [crm]
"""


def test_a_person_answers_in_the_browser_and_the_tools_move_the_job(
    lane: Lane, gateway: GatewayProcess, browser: Browser, serve: Callable[[Any], str]
) -> None:
    shutil.copy(ROOT / "playbooks" / "catalog.yaml", lane.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "playbooks" / "skills", lane.playbooks / "skills")
    (lane.playbooks / "chat.yaml").write_text(CHAT)
    tools = serve(build_demo_tools())
    lane.start_worker()
    lane.start(
        ["agents"], "agents: ready",
        OPENAI_BASE_URL=f"{serve(build_standin())}/v1", OPENAI_API_KEY="sk-test",
        CALENDAR_URL=f"{tools}/calendar", CRM_URL=f"{tools}/crm",
    )  # fmt: skip
    token = gateway.token(name="browser")
    page: Page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    with gateway.client(token) as client:
        started = client.post(
            "/v1/jobs",
            json={"key": "chat-1", "playbook_key": "chat", "subject": {"company": "Acme"},
                  "contacts": [{"name": "Ada", "email": "ada@example.com"}]},
        )  # fmt: skip
        assert started.status_code == 202
    page.goto(f"{gateway.ui}/jobs/chat-1#token={token}")
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
    assert "ada@example.com" in page.locator("#job-subject").inner_text()
    # The agent writes first (its run owed by the task that opened).
    page.wait_for_selector(
        "#conversation .msg.out:has-text('Let us work on bookCall')", timeout=60_000
    )
    assert page.locator("#reply-contact").input_value() == "ada@example.com"
    page.fill("#reply-text", "Please book <script>window.__owned=1</script> tomorrow at 10:00")
    page.click("#reply-form button[type=submit]")
    page.wait_for_selector("#conversation .msg.in:has-text('<script>')", timeout=30_000)
    page.wait_for_selector(
        "#conversation .msg.out:has-text('schedule_meeting confirmed it')", timeout=60_000
    )
    page.wait_for_selector('#graph [data-milestone="bookCall"][data-state="done"]', timeout=60_000)
    # The next step's agent takes over; the person says yes; the CRM agent activates.
    page.wait_for_selector(
        "#conversation .msg.out:has-text('Let us work on activateAccount')", timeout=60_000
    )
    page.fill("#reply-text", "Yes, please activate my account.")
    page.click("#reply-form button[type=submit]")
    page.wait_for_selector(
        '#graph [data-milestone="activateAccount"][data-state="done"]', timeout=60_000
    )
    page.wait_for_selector("#job-status:has-text('done')", timeout=30_000)
    assert page.locator("#conversation script").count() == 0
    assert page.evaluate("() => window.__owned") is None
    # the journal on the same page: the delegation and the tool calls with outcomes
    page.wait_for_selector('#journal tr[data-outcome="delegated"]', timeout=30_000)
    journal = page.locator("#journal").inner_text()
    assert "tool schedule_meeting" in journal
    assert "tool activate_account" in journal
    # every milestone settled by a tool's event, none by the agent's words
    decisions = page.locator("#decisions").inner_text()
    assert "claim, not evidence" in decisions  # the agent's messages are shown as claims
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-conversation.png"), full_page=True)
    assert not problems, problems
