"""What the browser tests share (``tests/stream/gateway/test_*browser*.py``): headless
Chromium (Debian's /usr/bin/chromium, driven by Playwright through its executable
path; the project's set-up installs it, never Playwright's own browser download),
a page as they open it, and a flow's records on a job of the test's own.

One Playwright driver and one Chromium serve the browser tests that a test process
runs one after another (``Chromium``; tests/stream/gateway/conftest.py offers it
as ``browser``): a start costs about a second of CPU. Each test gets fresh browser
contexts (no cookies or storage shared), closed at its end.

Playwright's sync API marks its event loop as running in the thread that uses it,
between its calls too; what runs between two browser tests (a module's fixtures)
calls ``asyncio.run`` in that thread (tests/lanes.py), which refuses to start while
a loop runs. So the mark is lent to a browser test only (``Chromium.lend``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.lanes import Lane, wait_for
from topics import JournalInterrupt, encode

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

    from tests.stream.gateway.conftest import GatewayProcess

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
ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "artifacts"

# Counts the page's EventSources and how many are still open (readyState 2 is CLOSED).
TRACK_STREAMS = """
(() => {
  const Native = window.EventSource;
  window.__streams = [];
  window.EventSource = class extends Native {
    constructor(...args) { super(...args); window.__streams.push(this); }
  };
})();
"""
OPEN_STREAMS = "() => window.__streams.filter((s) => s.readyState !== 2).length"
HOSTILE = '<img src=x onerror="window.__owned=1">'


@dataclass
class Running:
    """A started Playwright driver, its Chromium and its event loop."""

    playwright: Playwright
    browser: Browser
    loop: asyncio.AbstractEventLoop


class Chromium:
    """The test process's Playwright and Chromium: started when a test asks for a
    browser, stopped when the next test will not use one (an idle driver and
    Chromium cost about 0.2 s of CPU a minute, about what a start costs) and at the
    end of the session (tests/stream/gateway/conftest.py)."""

    def __init__(self) -> None:
        self.running: Running | None = None

    def lend(self) -> Iterator[Browser]:
        """The browser for one test, with Playwright's loop marked running in this
        thread (as its sync API expects between its calls) until the test ends;
        each page it opened has a context of its own (no cookies or storage
        shared), closed then."""
        if self.running is not None and not self.running.browser.is_connected():
            self.stop()  # it went away (it crashed, or a test closed it): a new one
        running = self.running = self.running or start()
        asyncio.events._set_running_loop(running.loop)
        try:
            yield running.browser
        finally:
            try:
                for context in running.browser.contexts:
                    context.close()
            except BaseException:
                self.stop()  # a Chromium that could not close a page is not lent again
                raise
            finally:
                asyncio.events._set_running_loop(None)

    def stop(self) -> None:
        """Close Chromium and stop the driver, if they run."""
        running, self.running = self.running, None
        if running is None:
            return
        asyncio.events._set_running_loop(running.loop)
        try:
            running.browser.close()
        finally:
            running.playwright.stop()  # its loop ends: none runs in this thread
            asyncio.events._set_running_loop(None)


def start() -> Running:
    """Playwright and headless Chromium; this thread's running loop is none after."""
    from playwright.sync_api import sync_playwright  # only where a browser test runs

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs Debian's chromium")
    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
    except BaseException:
        playwright.stop()
        raise
    running = Running(playwright, launched, asyncio.get_running_loop())
    asyncio.events._set_running_loop(None)
    return running


def new_page(browser: Browser, problems: list[str]) -> Page:
    """A page in a context of its own that notes its script errors and whatever
    the gateway's Content-Security-Policy refused in ``problems``; it counts its
    event streams (``OPEN_STREAMS``). A zone and locale other than the test
    machine's, so "local time" is checked."""
    page = browser.new_page(
        viewport={"width": 1280, "height": 900}, timezone_id="Asia/Tokyo", locale="en-GB"
    )
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on(
        "console",
        lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.add_init_script(TRACK_STREAMS)
    return page


def shot(page: Page, name: str, problems: list[str]) -> None:
    """A full-page screenshot in artifacts/, then: no problem noted on the page."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)
    assert not problems, problems


def publish(lane: Lane, topic: str, *records: Any) -> None:
    """Produce ``records`` (topics' records of one job: keyed by their ``job_key``)
    onto ``topic`` of ``lane``, in a thread of its own: Playwright's sync API holds
    this thread's event loop."""
    produced = [(r.job_key.encode(), encode(r)) for r in records]
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lane.produce, produced, topic).result()


FLOW_AT = "2026-12-01T10:00:00Z"


@dataclass(frozen=True)
class FlowJob:
    """A job of a test's own and the run of its flow ``resolve``, with the ids of
    the questions the tests ask on it: on a module's shared gateway each test's
    flow records are its job's alone."""

    key: str

    @property
    def run(self) -> str:
        return f"{self.key}/resolve#1"

    @property
    def approval(self) -> str:
        return f"{self.run}/confirm/1"

    @property
    def choice(self) -> str:
        return f"{self.run}/pick/1"

    @property
    def free(self) -> str:
        return f"{self.run}/note/1"

    def interrupt(self, interrupt_id: str, node: str, **fields: Any) -> JournalInterrupt:
        """A question of the run (``ask`` and ``open`` unless said otherwise)."""
        fields.setdefault("kind", "ask")
        fields.setdefault("status", "open")
        return JournalInterrupt(
            job_key=self.key, run_id=self.run, flow="resolve", node=node,
            interrupt_id=interrupt_id, at=FLOW_AT, **fields,
        )  # fmt: skip

    def start(self, gateway: GatewayProcess, token: str) -> None:
        """Start the job (onboarding) and wait until the gateway shows it: a worker
        decided its start, and the flow's records can follow."""
        with gateway.client(token) as client:
            started = client.post("/v1/jobs", json={"key": self.key, "playbook_key": "onboarding"})
            assert started.status_code == 202
            wait_for(
                lambda: client.get(f"/v1/jobs/{self.key}").status_code == 200,
                what="the job on the gateway",
            )

    def page(self, gateway: GatewayProcess, browser: Browser, problems: list[str]) -> Page:
        """The job's page, live, before any of the flow's records."""
        token = gateway.token(name="browser")
        self.start(gateway, token)
        page = new_page(browser, problems)
        page.goto(f"{gateway.ui}/jobs/{self.key}#token={token}")
        page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)
        return page

    def asked(self, gateway: GatewayProcess, token: str) -> list[str]:
        """The ids of the job's open questions, as the gateway lists them."""
        with gateway.client(token) as client:
            listed = client.get(f"/v1/jobs/{self.key}/interrupts")
            assert listed.status_code == 200
            return [i["interrupt_id"] for i in listed.json()["interrupts"]]
