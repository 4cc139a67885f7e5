"""The UI in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright
through its executable path; the project's set-up installs it, never Playwright's
own browser download): a job starts, the event that clears its first milestone
arrives, and the page shows it done without a reload; the job page opens one live
stream per visit however it is reached, says what is settled, held back or only
claimed, shows the subject and contacts and local times, and says when a job is
unknown; a flow's journal records show with their flow and node, and its open
questions are answered on the page (the gateway's 202 or 409 said), all as text."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, Request, Route

from agents.dev.demo_tools import build_demo_tools
from agents.dev.standin import build_standin
from tests.lanes import wait_for
from tests.stream.gateway.browser import (
    ARTIFACTS,
    FLOW_AT,
    HOSTILE,
    OPEN_STREAMS,
    ROOT,
    FlowJob,
    new_page,
    publish,
    shot,
)
from tests.stream.gateway.conftest import GatewayProcess, Lane
from topics import (
    JournalFlow,
    JournalHandlerCall,
    JournalModelCall,
    JournalRun,
    JournalToolCall,
    MessageRecord,
    Tokens,
    encode,
)

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def served(module_lane: Lane, shared_gateway: GatewayProcess) -> tuple[Lane, GatewayProcess]:
    """A worker and a gateway for the page tests that start neither again and
    keep to their own jobs (ui-job, nav-1, held-1, gap-1, mem-*, flow-*); the held
    playbook is in the folder before the worker starts."""
    (module_lane.playbooks / "held.yaml").write_text(HELD)
    module_lane.start_worker()
    return module_lane, shared_gateway


def test_a_milestone_turns_done_on_the_page_without_a_reload(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    lane, gateway = served
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
            (b"ui-job", encode(JournalToolCall(
                job_key="ui-job", run_id=run, agent="setup_agent", at=at,
                tool="check_setup", arguments="{}", outcome="done",
                url="mcp:setup_guide/setup_progress (http://127.0.0.1:9/mcp)",
                result='{"completed": true}', latency_ms=13, fact="self_service_completed"))),
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
    # An MCP tool's call says which server's tool it was (README, "Try it", step 3).
    assert "mcp:setup_guide/setup_progress · recorded self_service_completed" in journal
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
    # A lane of its own, not the module's: the agents service works the tasks of
    # every job of its lane, the other tests' too.
    shutil.copy(ROOT / "examples" / "catalog.yaml", lane.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "examples" / "skills", lane.playbooks / "skills")
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


HELD = """\
key: held
version: 1
milestones:
  - id: first
    instructions: Get it started.
    condition: started_up
  - id: later
    needs: [first]
    due: 2h
    instructions: Review it, but not before two hours.
    condition: reviewed
"""

UTC_INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _seqs(page: Page) -> list[str]:
    return [
        s
        for s in page.eval_on_selector_all("#decisions tr", "rs => rs.map(r => r.dataset.seq)")
        if s
    ]


def test_each_visit_opens_one_stream_and_no_decision_is_doubled(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    _, gateway = served
    token = gateway.token(name="browser")
    problems: list[str] = []
    page = new_page(browser, problems)
    streams: list[str] = []

    def seen(request: Request) -> None:
        if "/events?access_token=" in request.url:
            streams.append(request.url)

    page.on("request", seen)
    with gateway.client(token) as client:
        assert (
            client.post("/v1/jobs", json={"key": "nav-1", "playbook_key": "onboarding"}).status_code
            == 202
        )
        sent = client.post(
            "/v1/events",
            json={"key": "nav-1", "action": "id_uploaded", "idempotency_key": "nav-up"},
        )
        assert sent.status_code == 202
        for _ in range(100):
            decided = client.get("/v1/jobs/nav-1/decisions")
            if decided.status_code == 200 and len(decided.json()["decisions"]) >= 2:
                break
            page.wait_for_timeout(200)
    page.goto(f"{gateway.ui}/#token={token}")
    visits = 0
    # the key's link, the row around it, the row again after going back
    for target in (
        'tr[data-job="nav-1"] a',
        'tr[data-job="nav-1"] td:nth-child(3)',
        'tr[data-job="nav-1"] a',
    ):
        page.locator(target).wait_for(timeout=30_000)
        page.click(target)
        visits += 1
        page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
        page.wait_for_selector(f'#decisions tr[data-seq="{visits + 1}"]', timeout=30_000)
        page.wait_for_timeout(500)  # a second navigation, if any, would have opened by now
        assert len(streams) == visits, f"{len(streams)} event streams for {visits} visit(s)"
        assert page.evaluate(OPEN_STREAMS) == 1
        # a decision arriving live is shown once
        with gateway.client(token) as client:
            sent = client.post(
                "/v1/events",
                json={"key": "nav-1", "action": f"noted_{visits}", "idempotency_key": f"n{visits}"},
            )
            assert sent.status_code == 202
        page.wait_for_selector(f'#decisions tr[data-seq="{visits + 2}"]', timeout=30_000)
        page.wait_for_timeout(500)
        seqs = _seqs(page)
        assert len(seqs) == len(set(seqs)), f"a decision row is doubled: {seqs}"
        assert len(seqs) == visits + 2
        page.go_back()
        page.wait_for_selector("#list-view:not([hidden])", timeout=10_000)
        assert page.evaluate(OPEN_STREAMS) == 0  # leaving the job closes its stream
    # forward into the job again, and back: one more stream, closed again
    page.go_forward()
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
    assert len(streams) == visits + 1
    assert page.evaluate(OPEN_STREAMS) == 1
    seqs = _seqs(page)
    assert len(seqs) == len(set(seqs)), seqs
    page.click("#job-view a[data-nav]")  # "← all jobs"
    page.wait_for_selector("#list-view:not([hidden])", timeout=10_000)
    assert page.evaluate(OPEN_STREAMS) == 0
    assert not problems, problems


def test_the_job_page_says_what_is_settled_held_claimed_and_when(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    _, gateway = served  # its playbook, held, is in the module's folder
    token = gateway.token(name="browser")
    agent = gateway.token(name="an-agent", source="agent")
    problems: list[str] = []
    page = new_page(browser, problems)
    with gateway.client(token) as client:
        started = client.post(
            "/v1/jobs",
            json={"key": "held-1", "playbook_key": "held",
                  "subject": {"company": "Acme", "note": HOSTILE},
                  "contacts": [{"name": "Ada", "email": "ada@example.com"}]},
        )  # fmt: skip
        assert started.status_code == 202
        sent = client.post(
            "/v1/events", json={"key": "held-1", "action": "started_up", "idempotency_key": "h-up"}
        )
        assert sent.status_code == 202
    page.goto(f"{gateway.ui}/#token={token}")
    row = page.locator('tr[data-job="held-1"]')
    row.wait_for(timeout=30_000)
    assert "Acme" in row.inner_text()  # the subject in the list
    page.click('tr[data-job="held-1"] a')
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
    page.wait_for_selector('#graph [data-milestone="later"][data-state="open"]', timeout=30_000)

    # an agent says it was reviewed: applied, but a claim, not evidence
    with gateway.client(agent) as client:
        said = client.post(
            "/v1/events", json={"key": "held-1", "action": "reviewed", "idempotency_key": "h-rev"}
        )
        assert said.status_code == 202
    page.wait_for_selector('#decisions tr[data-seq="3"]', timeout=30_000)
    claimed = page.locator('#decisions tr[data-seq="3"]').inner_text()
    assert "applied (claim, not evidence)" in claimed
    world = page.locator('#decisions tr[data-seq="2"]').inner_text()
    assert "applied" in world
    assert "claim" not in world

    # a settled milestone says it is settled, not that its window is open
    first = page.locator('#milestones [data-milestone="first"]').inner_text()
    assert "window open" not in first
    assert "settled done" in first
    # a task held back by `due`: said so on the card and on the graph, not an open task
    later = page.locator('#milestones [data-milestone="later"]')
    assert later.locator('[data-held="due"]').count() == 1
    assert "task held back (due) until" in later.inner_text()
    node = page.locator('#graph [data-milestone="later"]')
    assert "held" in (node.get_attribute("class") or "")
    assert "task held" in (node.text_content() or "")

    meta = page.locator("#job-meta").inner_text()
    assert "timers: due later " in meta
    assert "next step: later (its task held back by due)" in meta
    assert "[object" not in page.locator("#job-view").inner_text()
    # subject and contacts on the job page, as text
    subject = page.locator("#job-subject").inner_text()
    assert "company: Acme" in subject
    assert "Ada <ada@example.com>" in subject
    assert HOSTILE in subject
    assert page.locator("#job-subject img").count() == 0
    assert page.evaluate("() => window.__owned") is None

    # times: local (Asia/Tokyo, en-GB), to the second, the UTC instant on hover
    stamp = page.locator('#decisions tr[data-seq="3"] time')
    assert stamp.count() == 1
    instant = stamp.get_attribute("datetime") or ""
    assert UTC_INSTANT.match(instant), instant
    assert stamp.get_attribute("title") == instant
    local = datetime.fromisoformat(instant.replace("Z", "+00:00")).astimezone(
        ZoneInfo("Asia/Tokyo")
    )
    assert stamp.inner_text() == local.strftime("%d/%m/%Y, %H:%M:%S")
    for when in page.eval_on_selector_all("time", "ts => ts.map(t => [t.dateTime, t.textContent])"):
        assert UTC_INSTANT.match(when[0]), when
        assert "T" not in when[1], when  # no raw ISO...
        assert "." not in when[1], when  # ...and no microseconds
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-job-held.png"), full_page=True)
    assert not problems, problems


def test_a_decision_between_the_pages_lists_and_its_stream_is_shown(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    """The job page reads its lists, then opens its stream: a decision that lands
    in between (here the stream is held back until it did) comes first on the
    stream, which resumes from the lists' totals; it is shown once."""
    _, gateway = served
    token = gateway.token(name="browser")
    problems: list[str] = []
    page = new_page(browser, problems)
    held: list[Route] = []
    page.route(re.compile(r"/events\?"), lambda route: held.append(route))
    with gateway.client(token) as client:
        started = client.post("/v1/jobs", json={"key": "gap-1", "playbook_key": "onboarding"})
        assert started.status_code == 202
        wait_for(
            lambda: client.get("/v1/jobs/gap-1/decisions").json().get("total") == 1,
            what="the start decided",
        )
        page.goto(f"{gateway.ui}/jobs/gap-1#token={token}")
        for _ in range(600):
            if held:
                break
            page.wait_for_timeout(50)
        assert len(held) == 1, "the page never asked for its stream"
        assert _seqs(page) == ["1"]  # the lists are read and shown
        sent = client.post(
            "/v1/events", json={"key": "gap-1", "action": "id_uploaded", "idempotency_key": "g-up"}
        )
        assert sent.status_code == 202
        wait_for(
            lambda: client.get("/v1/jobs/gap-1/decisions").json().get("total") == 2,
            what="the event decided",
        )
    held[0].continue_()
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
    page.wait_for_selector('#decisions tr[data-seq="2"]', timeout=30_000)
    assert "&after=1.0.0" in held[0].request.url  # from the lists' totals
    page.wait_for_selector(
        '#graph [data-milestone="collectIdentity"][data-state="done"]', timeout=30_000
    )
    page.wait_for_timeout(300)
    assert _seqs(page) == ["2", "1"]  # newest first, each once
    assert not problems, problems


def test_an_unknown_job_is_said_to_be_unknown(
    shared_gateway: GatewayProcess, browser: Browser
) -> None:
    gateway = shared_gateway  # pages of jobs no test starts
    token = gateway.token(name="browser")
    problems: list[str] = []
    page = new_page(browser, problems)
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/events?" in r.url else None)
    page.goto(f"{gateway.ui}/jobs/no-such-job#token={token}")
    missing = page.locator("#job-missing")
    missing.wait_for(state="visible", timeout=30_000)
    text = missing.inner_text()
    assert "no job with key no-such-job" in text
    assert "job_not_found" in text
    assert page.locator("#job-body").is_hidden()  # no skeleton
    assert page.locator("#job-status").is_hidden()  # no empty badge where a status would be
    assert page.locator("#job-title").inner_text() in ("", "no-such-job")
    assert "—" not in page.locator("#job-view").inner_text()
    assert not streams
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-job-unknown.png"))
    assert not problems, problems


def test_a_malformed_job_link_says_so(shared_gateway: GatewayProcess, browser: Browser) -> None:
    gateway = shared_gateway  # pages of jobs no test starts
    """/jobs/%E0 does not decode (decodeURIComponent throws): the page says the
    link is not valid instead of staying blank, and asks the gateway nothing."""
    token = gateway.token(name="browser")
    problems: list[str] = []
    page = new_page(browser, problems)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/v1/jobs/" in r.url else None)
    page.goto(f"{gateway.ui}/jobs/%E0#token={token}")
    missing = page.locator("#job-missing")
    missing.wait_for(state="visible", timeout=30_000)
    assert "not a valid job link: /jobs/%E0" in missing.inner_text()
    assert page.locator("#job-body").is_hidden()
    assert page.locator("#list-view").is_hidden()
    assert not asked
    page.locator("#job-missing a").click()  # the way out still works
    page.locator("#list-view").wait_for(state="visible", timeout=30_000)
    assert not problems, problems


def test_a_job_the_gateway_let_go_of_says_so(
    served: tuple[Lane, GatewayProcess],
    start_module_gateway: Callable[..., GatewayProcess],
    browser: Browser,
) -> None:
    """Past LEMONGRAPH_GATEWAY_JOBS the read model keeps only a summary of idle
    jobs: the page shows the summary and says that the history is not in memory.
    A gateway of its own (the setting), the module's worker; of the jobs it reads,
    the test looks at its own (mem-*)."""
    gateway = start_module_gateway(LEMONGRAPH_GATEWAY_JOBS="2")
    token = gateway.token(name="browser")
    with gateway.client(token) as client:
        for i in range(5):
            key = f"mem-{i}"
            assert (
                client.post("/v1/jobs", json={"key": key, "playbook_key": "onboarding"}).status_code
                == 202
            )
        gone = wait_for(
            lambda: next(
                (
                    j["key"]
                    for j in client.get("/v1/jobs").json()["jobs"]
                    if j["key"].startswith("mem-")
                    and j["status"] == "running"
                    and not j["in_memory"]
                ),
                None,
            ),
            what="a running job the gateway let go of",
        )
    problems: list[str] = []
    page = new_page(browser, problems)
    page.goto(f"{gateway.ui}/jobs/{gone}#token={token}")
    notice = page.locator('#job-meta [data-in-memory="false"]')
    notice.wait_for(state="visible", timeout=30_000)
    assert "stays on the topics" in notice.inner_text()
    assert page.locator("#job-status").inner_text() == "running"
    page.wait_for_selector('#graph [data-milestone="collectIdentity"][data-state="open"]')
    assert not problems, problems


# -- flows: their journal and their open questions -------------------------------------

# Each test's flow runs on a job of its own (the module's gateway and worker).
JOURNAL, QUESTIONS, TEXT = FlowJob("flow-1"), FlowJob("flow-2"), FlowJob("flow-3")


def test_a_flows_journal_records_show_with_their_flow_and_node(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    lane, gateway = served
    problems: list[str] = []
    job = JOURNAL
    page = job.page(gateway, browser, problems)
    key, run, at = job.key, job.run, FLOW_AT
    publish(
        lane, "journal",
        JournalFlow(job_key=key, run_id=run, flow="resolve", task_id=f"{key}/resolve",
                    at=at, event="started"),
        JournalModelCall(job_key=key, run_id=run, agent="flow", at=at, request="Draft",
                         response="a draft", latency_ms=7, outcome="ok", flow="resolve",
                         node="draft"),
        JournalToolCall(job_key=key, run_id=run, agent="flow", at=at, tool="crm_lookup",
                        arguments="{}", outcome="done", result='{"ok": true}', latency_ms=3,
                        flow="resolve", node="lookup"),
        JournalHandlerCall(job_key=key, run_id=run, at=at, flow="resolve", node="route",
                           kind="router", name="by_size", call_id=f"{run}/route/1",
                           outcome="ok", result='"small"', latency_ms=1),
        JournalFlow(job_key=key, run_id=run, flow="resolve", task_id=f"{key}/resolve",
                    at=at, event="node", node="draft"),
        JournalFlow(job_key=key, run_id=run, flow="resolve", task_id=f"{key}/resolve",
                    at=at, event="finished", outputs={"summary": HOSTILE, "size": 3}),
        JournalFlow(job_key=key, run_id=f"{key}/resolve#2", flow="resolve",
                    task_id=f"{key}/resolve", at=at, event="failed", node="lookup",
                    error=f"tool failed: {HOSTILE}"),
        job.interrupt(job.approval, "confirm", kind="approval", question="May I refund?"),
        job.interrupt(job.approval, "confirm", kind="approval", status="answered", answer="yes"),
    )  # fmt: skip
    # the last record published: the page has shown every one before it (one key, in order)
    page.wait_for_selector('#journal tr[data-kind="journal.interrupt"][data-outcome="answered"]')
    rows = page.locator("#journal tr.journal-row")
    assert rows.count() == 9
    flow_rows = page.locator('#journal tr[data-kind="journal.flow"]')
    assert flow_rows.count() == 4
    assert page.locator('#journal tr[data-flow="resolve"]').count() == 9  # every one labelled
    started = page.locator('#journal tr[data-kind="journal.flow"][data-outcome="started"]')
    assert f"run {run}" in started.inner_text()
    assert "flow resolve" in started.inner_text()
    node = page.locator('#journal tr[data-kind="journal.flow"][data-outcome="node"]')
    assert "flow resolve · node draft" in node.inner_text()
    finished = page.locator('#journal tr[data-outcome="finished"]').inner_text()
    assert f"outputs summary: {HOSTILE}; size: 3" in finished  # in words, not JSON
    failed = page.locator('#journal tr[data-outcome="failed"]').inner_text()
    assert "node lookup" in failed
    assert f"error: tool failed: {HOSTILE}" in failed
    model = page.locator('#journal tr[data-kind="journal.model_call"]')
    assert "model call · flow resolve · node draft" in model.inner_text()
    assert model.get_attribute("data-node") == "draft"
    tool = page.locator('#journal tr[data-kind="journal.tool_call"]').inner_text()
    assert "tool crm_lookup · flow resolve · node lookup" in tool
    handler = page.locator('#journal tr[data-kind="journal.handler_call"]').inner_text()
    assert "router by_size · flow resolve · node route" in handler
    assert '"small"' in handler
    assert "run ended" not in page.locator("#journal").inner_text()  # not taken for a run's end
    opened = page.locator('#journal tr[data-kind="journal.interrupt"][data-outcome="open"]')
    assert "approval · flow resolve · node confirm" in opened.inner_text()
    assert "May I refund?" in opened.inner_text()
    closed = page.locator('#journal tr[data-kind="journal.interrupt"][data-outcome="answered"]')
    assert "answer: yes" in closed.inner_text()
    assert page.locator("#journal img").count() == 0
    assert page.evaluate("() => window.__owned") is None
    # opened and answered while the page looked: not an open question any more
    assert page.locator("#questions li.question").count() == 0
    shot(page, "ui-flow-journal.png", problems)


def test_an_open_question_is_answered_on_the_page(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    lane, gateway = served
    token = gateway.token(name="browser", approver=True)
    job = QUESTIONS
    approval_id, choice_id, free_id = job.approval, job.choice, job.free
    job.start(gateway, token)
    publish(
        lane, "journal",
        job.interrupt(approval_id, "confirm", kind="approval",
                      question="May I refund 120 EUR?",
                      show={"amount": 120, "reason": "late delivery"},
                      expires_at="2026-12-31T10:00:00Z"),
        job.interrupt(choice_id, "pick", question="When shall we call?",
                      answers=["morning", "afternoon"]),
    )  # fmt: skip
    wait_for(lambda: len(job.asked(gateway, token)) == 2, what="two open questions on the gateway")
    problems: list[str] = []
    page = new_page(browser, problems)
    page.goto(f"{gateway.ui}/jobs/{job.key}#token={token}")
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
    # a page whose live stream never connects: it still shows the questions it read
    stale = new_page(browser, problems)
    stale.route(re.compile(r"/events\?"), lambda route: route.abort())
    stale.goto(f"{gateway.ui}/jobs/{job.key}#token={token}")

    approval = page.locator(f'#questions li[data-interrupt-id="{approval_id}"]')
    approval.wait_for(timeout=30_000)
    text = approval.inner_text()
    assert "May I refund 120 EUR?" in text
    # the show values, each as its own term
    assert approval.locator(".q-show dt").all_inner_texts() == ["amount", "reason"]
    assert approval.locator(".q-show dd").all_inner_texts() == ["120", "late delivery"]
    assert "flow resolve · node confirm" in text
    buttons = approval.locator("button.answer")
    assert buttons.all_inner_texts() == ["Approve", "Reject"]
    choice = page.locator(f'#questions li[data-interrupt-id="{choice_id}"]')
    assert choice.locator("button.answer").all_inner_texts() == ["morning", "afternoon"]
    assert choice.locator("input").count() == 0

    # a free-text question arriving live: a text box, no buttons
    publish(lane, "journal", job.interrupt(free_id, "note", question="Anything else?"))
    free = page.locator(f'#questions li[data-interrupt-id="{free_id}"]')
    free.wait_for(timeout=30_000)
    assert free.locator("button.answer").count() == 0
    assert free.locator("input.q-text").count() == 1

    # a clerk (a world token without the approver role) cannot approve: 403, said as
    # text, the question stays open on both pages, and the journal names who tried
    clerk = new_page(browser, problems)
    clerk.goto(f"{gateway.ui}/jobs/{job.key}#token={gateway.token(name='clerk')}")
    clerk_approval = clerk.locator(f'#questions li[data-interrupt-id="{approval_id}"]')
    clerk_approval.wait_for(timeout=30_000)
    with clerk.expect_response(lambda r: r.url.endswith("/answers")) as forbidden:
        clerk_approval.locator("button", has_text="Approve").click()
    assert forbidden.value.status == 403
    clerk_approval.locator(".q-status", has_text="403 not_an_approver").wait_for(timeout=10_000)
    assert clerk_approval.get_attribute("data-state") == "error"
    refused = page.locator('#journal tr[data-kind="journal.interrupt"][data-outcome="refused"]')
    refused.wait_for(timeout=30_000)
    assert "refused from world token clerk" in refused.inner_text()
    assert approval_id in job.asked(gateway, token)  # still open
    assert approval.locator("button:disabled").count() == 0

    # Approve: the page sends yes, the gateway answers 202 and no longer takes it
    with page.expect_response(lambda r: r.url.endswith(f"/v1/jobs/{job.key}/answers")) as answered:
        approval.locator("button", has_text="Approve").click()
    response = answered.value
    assert response.status == 202
    assert response.request.method == "POST"
    assert response.request.post_data_json == {"interrupt_id": approval_id, "answer": "yes"}
    assert response.json()["message_id"] == f"answer:{approval_id}"
    page.wait_for_selector(f'#questions li[data-interrupt-id="{approval_id}"][data-state="sent"]')
    approval.locator(".q-status", has_text="answer yes accepted").wait_for(timeout=10_000)
    assert approval.locator("button:disabled").count() == 2
    assert approval_id not in job.asked(gateway, token)  # the read model marked it answered
    # the answer in the conversation, marked as the answer to the question
    page.wait_for_selector(f'#conversation .msg.in.question[data-interrupt-id="{approval_id}"]')

    # the stale page answers the same question: the gateway's 409, said as text
    stale_approval = stale.locator(f'#questions li[data-interrupt-id="{approval_id}"]')
    stale_approval.wait_for(timeout=30_000)
    with stale.expect_response(lambda r: r.url.endswith("/answers")) as refused:
        stale_approval.locator("button", has_text="Reject").click()
    assert refused.value.status == 409
    assert refused.value.request.post_data_json == {"interrupt_id": approval_id, "answer": "no"}
    stale.wait_for_selector(
        f'#questions li[data-interrupt-id="{approval_id}"][data-state="closed"]'
    )
    said = stale_approval.locator(".q-status").inner_text()
    assert said.startswith("409 interrupt_not_open:"), said
    assert "no open question" in said

    # the free text goes as typed
    free.locator("input.q-text").fill("Call after 5 pm")
    with page.expect_response(lambda r: r.url.endswith("/answers")) as typed:
        free.locator("button[type=submit]").click()
    assert typed.value.status == 202
    assert typed.value.request.post_data_json == {
        "interrupt_id": free_id,
        "answer": "Call after 5 pm",
    }

    # the flow took the approval's answer; the choice expired: both leave the section
    assert approval.count() == 1  # still there until the flow says so
    publish(
        lane, "journal",
        job.interrupt(approval_id, "confirm", kind="approval", status="answered", answer="yes"),
        job.interrupt(choice_id, "pick", status="expired"),
    )  # fmt: skip
    approval.wait_for(state="detached", timeout=30_000)
    choice.wait_for(state="detached", timeout=30_000)
    assert page.locator("#questions li.question").count() == 1  # the free one, answered
    shot(page, "ui-flow-questions.png", problems)


def test_a_flows_question_is_text_on_the_page(
    served: tuple[Lane, GatewayProcess], browser: Browser
) -> None:
    lane, gateway = served
    problems: list[str] = []
    job = TEXT
    approval_id, choice_id = job.approval, job.choice
    page = job.page(gateway, browser, problems)
    question = f"Refund {HOSTILE}?"
    publish(
        lane, "messages",
        MessageRecord(job_key=job.key, message_id=f"{approval_id}.q", direction="out",
                      channel="web", agent="flow resolve", text=question, at=FLOW_AT,
                      interrupt_id=approval_id),
    )  # fmt: skip
    publish(
        lane, "journal",
        job.interrupt(approval_id, "confirm", kind="approval", question=question,
                      show={HOSTILE: HOSTILE, "n": 2}),
        job.interrupt(choice_id, "pick", question=question, answers=[HOSTILE, "no"]),
    )  # fmt: skip
    asked = page.locator(f'#conversation .msg.out.question[data-interrupt-id="{approval_id}"]')
    asked.wait_for(timeout=30_000)
    assert "question" in asked.locator(".chip").inner_text()
    assert question in asked.inner_text()
    approval = page.locator(f'#questions li[data-interrupt-id="{approval_id}"]')
    approval.wait_for(timeout=30_000)
    assert question in approval.inner_text()
    assert approval.locator(".q-show").inner_text().count(HOSTILE) == 2
    choice = page.locator(f'#questions li[data-interrupt-id="{choice_id}"]')
    choice.wait_for(timeout=30_000)
    assert choice.locator("button.answer").first.inner_text() == HOSTILE
    assert page.locator("#job-view img").count() == 0
    assert page.evaluate("() => window.__owned") is None
    # a reload reads the same questions from GET /v1/jobs/{key}/interrupts, as text
    page.reload()
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
    page.locator(f'#questions li[data-interrupt-id="{choice_id}"]').wait_for(timeout=30_000)
    assert page.locator("#questions li.question").count() == 2
    assert page.locator("#job-view img").count() == 0
    assert page.evaluate("() => window.__owned") is None
    shot(page, "ui-flow-question-text.png", problems)
