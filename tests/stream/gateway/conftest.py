"""Fixtures for gateway tests: a real `lemongraph gateway` process on free ports,
with its own topic prefix on the shared broker (the Lane of tests/lanes.py), and a
real worker where a test needs decisions; ``shared_gateway`` is one per module, for
the tests that keep to their own job keys or change nothing; ``browser``, the test
process's headless Chromium for one test (tests/stream/gateway/browser.py)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from stream.gateway import mint_token
from stream.runtime.broker import free_port
from tests.lanes import Lane, WorkerProcess, read_lines, start_lemongraph, wait_for
from tests.stream.gateway.browser import Chromium
from tests.zygote import ForkedProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser

__all__ = ["SECRET", "GatewayProcess", "Lane", "WorkerProcess", "wait_for"]

SECRET = "test-secret-0123456789-0123456789-0123"


@dataclass
class GatewayProcess:
    """A `lemongraph gateway` subprocess, what it printed, and a client for it."""

    proc: subprocess.Popen[str] | ForkedProcess
    api: str
    ui: str
    secret: str
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def token(self, **options: Any) -> str:
        """A token signed with this gateway's secret."""
        return mint_token(self.secret, now=time.time(), **options)

    def client(self, token: str | None = None, base: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=base or self.api, headers=headers, timeout=30)

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                response = httpx.get(f"{self.api}/healthz", timeout=5)
                last = response.text
                if response.status_code == 200:
                    return
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise AssertionError(f"gateway never healthy ({last}); output:\n" + "".join(self.lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        code = self.proc.wait()  # at once: it has ended
        if self.reader is not None:
            self.reader.join(10)  # it ends at EOF, once the process is gone
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def launch_gateway(lane: Lane, **env: str) -> GatewayProcess:
    """`lemongraph gateway` for ``lane`` on free ports, once healthy; keyword
    arguments are environment variables (e.g. ``API_TOKEN_SECRET=""``)."""
    api_port, ui_port = free_port(), free_port()
    settings = {
        "API_TOKEN_SECRET": SECRET,
        "LEMONGRAPH_API_PORT": str(api_port),
        "LEMONGRAPH_UI_PORT": str(ui_port),
        "LEMONGRAPH_RATE_LIMIT": "1000",
        "LEMONGRAPH_RATE_BURST": "1000",
        **env,
    }
    proc = start_lemongraph(["gateway"], lane.root, lane.env(**settings))
    gateway = GatewayProcess(
        proc,
        api=f"http://127.0.0.1:{api_port}",
        ui=f"http://127.0.0.1:{ui_port}",
        secret=settings["API_TOKEN_SECRET"],
    )
    gateway.reader = read_lines(proc, gateway.lines)
    try:
        gateway.wait_healthy()
    except BaseException:
        gateway.stop()
        raise
    return gateway


@pytest.fixture
def start_gateway(lane: Lane) -> Iterator[Callable[..., GatewayProcess]]:
    """Start `lemongraph gateway` for this lane; extra keyword arguments are
    environment variables (e.g. ``API_TOKEN_SECRET=""``)."""
    yield from gateways_on(lane)


def gateways_on(lane: Lane) -> Iterator[Callable[..., GatewayProcess]]:
    """A factory of gateways on ``lane`` for one test; each stops at its end."""
    started: list[GatewayProcess] = []

    def start(**env: str) -> GatewayProcess:
        gateway = launch_gateway(lane, **env)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture
def start_module_gateway(module_lane: Lane) -> Iterator[Callable[..., GatewayProcess]]:
    """``start_gateway`` on the module's lane: for a test that needs a gateway of
    its own (a setting only a new process reads, a restart) but can share the
    module's worker; its gateways stop at the end of the test. The gateway reads
    every job of the lane, so such a test looks at its own job keys only."""
    yield from gateways_on(module_lane)


@pytest.fixture
def gateway(start_gateway: Callable[..., GatewayProcess]) -> GatewayProcess:
    """A gateway with the test secret and a generous rate limit."""
    return start_gateway()


@pytest.fixture(scope="module")
def shared_gateway(module_lane: Lane) -> Iterator[GatewayProcess]:
    """One gateway (the test secret, a generous rate limit) on the module's lane,
    for the tests of a module that only send it requests which change nothing
    another test reads (refusals, validation), or keep to their own job keys."""
    gateway = launch_gateway(module_lane)
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def module_worker(module_lane: Lane) -> WorkerProcess:
    """One `lemongraph worker` on the module's lane, for the tests that keep to
    their own job keys; killed after the module's last test (``module_lane``)."""
    return module_lane.start_worker()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Chromium]:
    """The test process's Playwright and Chromium (tests/stream/gateway/browser.py),
    started by the first test that asks for ``browser``."""
    chromium = Chromium()
    yield chromium
    chromium.stop()


@pytest.fixture
def browser(chromium: Chromium) -> Iterator[Browser]:
    """The process's Chromium for one test; the contexts of the pages it opened
    are closed at its end."""
    yield from chromium.lend()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Chromium and its driver stop after a browser test unless the next test
    also uses them: idle, they cost CPU (tests/stream/gateway/browser.py)."""
    chromium = getattr(item, "funcargs", {}).get("chromium")
    yield
    if isinstance(chromium, Chromium) and "browser" not in getattr(nextitem, "fixturenames", ()):
        chromium.stop()
