"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from agents.dev.serving import AppThread
from stream.runtime.broker import EmbeddedBroker, free_port
from stream.runtime.native import StaleBuild, check
from stream.runtime.processes import DUMP_END
from tests import costs
from tests.lanes import ROOT, Lane, WorkerProcess

# Hypothesis's per-example deadline (200 ms) and its "too slow" health check are
# wall-clock bounds: on the 2-core machine under the suite's load an example of
# the schedule decider or the instant codec took longer now and then, and a
# property test failed for the machine's load, not for the property
# (test_time.py, test_cron.py). No test here has a wall-clock bound as its behaviour.
settings.register_profile("lemongraph", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lemongraph")


def pytest_configure(config: pytest.Config) -> None:
    # CPU, wall time and process starts per module, when LEMONGRAPH_TEST_COSTS
    # names a folder (tests/costs.py).
    costs.register(config)
    # The processes tests start let the embedded broker hold an empty fetch for
    # 100 ms, not 20: a little latency per hop for a third of the CPU an idle
    # worker and its broker spend polling (docs/operations.md, "Settings that
    # matter here"). The benchmarks' smoke tests measure the default.
    os.environ.setdefault("LEMONGRAPH_FETCH_MAX_WAIT_MS", "100")
    # And they are given their partitions in 1 s instead of 3: the embedded broker
    # holds a first JoinGroup for half the session, in whole seconds (docs/operations.md,
    # "How long a start takes"). The worker's and the agents service's consumers (Faust's)
    # heartbeat from a thread of their own, so a busy event loop does not end their
    # session; the mail ingress and the memory processor heartbeat on their event loop.
    os.environ.setdefault("LEMONGRAPH_SESSION_TIMEOUT_MS", "2000")
    # Test what runs: a compiled module older than its source would be tested
    # in its old form (see stream/runtime/native.py).
    try:
        check()
    except StaleBuild as exc:
        pytest.exit(str(exc), returncode=2)


#: The timeout of a test that starts processes (a broker, workers, a gateway):
#: pyproject's 60 s is for the tests that start none, so that a hung unit test
#: fails in a minute. A module or test may name its own (pytest.mark.timeout).
PROCESS_TIMEOUT = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The broker is a marker, not a folder: a test that reaches a broker (through
    # kafka_url, which every broker fixture uses) is marked, so that
    # `pytest -m "not broker"` runs everything that needs none.
    for item in items:
        if "kafka_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker)
        if starts_processes(item) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(PROCESS_TIMEOUT))
    items[:] = longest_modules_first(items)


#: What a test is guessed to cost, by its marks (seconds of wall time on the 2-core
#: machine, roughly): ``longest_modules_first`` orders modules by their sum.
SLOW_COST, BROKER_COST, PROCESS_COST, UNIT_COST = 100.0, 8.0, 1.5, 0.01


def longest_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The modules in order of their guessed cost, the costliest first, each
    module's tests together and in their own order. scripts/test hands whole
    modules to its test processes (``--dist loadfile``), the next one to whichever
    process is free: started first, the long broker modules (the benchmark's
    smoke run, the crash and takeover tests) end before the short ones do
    instead of being the run's tail, and a module's shared processes
    (``module_lane``) are started once, in one test process."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)

    def cost(item: pytest.Item) -> float:
        if item.get_closest_marker("slow"):
            return SLOW_COST
        if item.get_closest_marker("broker"):
            return BROKER_COST
        return PROCESS_COST if starts_processes(item) else UNIT_COST

    ranked = sorted(modules.values(), key=lambda tests: -sum(map(cost, tests)))
    return [item for tests in ranked for item in tests]


def starts_processes(item: pytest.Item) -> bool:
    """A broker or slow test, or one of a module that runs commands (it imports
    subprocess, or the `lemongraph` executable's path from tests/lanes.py)."""
    if item.get_closest_marker("broker") or item.get_closest_marker("slow"):
        return True
    names = vars(getattr(item, "module", None) or object())
    return "subprocess" in names or "LEMONGRAPH" in names


def pytest_report_header(config: pytest.Config) -> str:
    return check().describe()


#: The most lines of each process's output a failed test's report shows.
SHOWN_LINES = 120


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test's report shows what each process its lane started printed
    (the last :data:`SHOWN_LINES` lines), a worker's or the agents service's with
    the stacks of its tasks: a test that timed out waiting on one says where it
    waited."""
    report = yield
    if report.failed and call.when == "call":
        funcargs = getattr(item, "funcargs", {})
        for name in ("lane", "module_lane"):
            found = funcargs.get(name)
            if not isinstance(found, Lane):
                continue
            for n, process in enumerate(found.workers):
                before = len(process.lines)
                dump_stacks(process)
                shown = "".join(process.lines[:before][-SHOWN_LINES:] + process.lines[before:])
                called = process.proc.args
                args = " ".join(map(str, called[1:])) if isinstance(called, list) else called
                report.sections.append((f"{name} process {n}: lemongraph {args}", shown))
    return report


def dump_stacks(process: WorkerProcess) -> None:
    """Ask a running worker or agents service for its stacks (SIGUSR1: they
    print them, docs/operations.md "A process that seems stuck") and wait a
    little for them. Only those: the signal ends a process that does not catch it."""
    ready = ("worker: ready", "worker + ticker: ready", "agents: ready")
    if process.proc.poll() is not None or not any(r in "".join(process.lines) for r in ready):
        return
    before = len(process.lines)
    process.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not any(
        DUMP_END in line for line in process.lines[before:]
    ):
        time.sleep(0.05)


@pytest.fixture(scope="session")
def kafka_url() -> Iterator[str]:
    """A broker for the whole session: LEMONGRAPH_KAFKA_URL when set, else the
    embedded Tansu broker on a free port. Tests isolate themselves by topic prefix."""
    configured = os.environ.get("LEMONGRAPH_KAFKA_URL", "").strip()
    if configured:
        yield configured
        return
    with EmbeddedBroker() as broker:
        costs.broker_started(broker.pid)
        yield broker.url
        costs.broker_stopping()


def new_lane(kafka_url: str, root: Path) -> Lane:
    """A fresh topic prefix, a data folder under ``root`` and the bundled playbooks."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    lane = Lane(kafka_url, prefix, root)
    lane.playbooks.mkdir()
    for name in ("onboarding.yaml", "payment-reminders.yaml", "lead-qualification.yaml"):
        shutil.copy(ROOT / "examples" / name, lane.playbooks / name)
    return lane


@pytest.fixture
def lane(kafka_url: str, tmp_path: Path) -> Iterator[Lane]:
    """A topic prefix, a data folder and the bundled playbooks; workers it
    started are killed at the end."""
    lane = new_lane(kafka_url, tmp_path)
    yield lane
    lane.kill_workers()
    lane.drop_topics()


@pytest.fixture(scope="module")
def module_lane(kafka_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lane]:
    """One lane for the tests of a module that share its processes (a worker, a
    gateway) where they test neither's own life: each test isolates itself by its
    own job keys. Its workers are killed after the module's last test: until then
    they poll the broker, which costs CPU (README, "Tests and benchmarks"), so the
    tests that share them are best the module's last, or a module of their own."""
    lane = new_lane(kafka_url, tmp_path_factory.mktemp("lane"))
    yield lane
    lane.kill_workers()
    lane.drop_topics()


@pytest.fixture
def serve() -> Iterator[Callable[[Any], str]]:
    """A factory: ``serve(app)`` runs the ASGI app (the stand-in model, a tool
    endpoint) on a free port in a thread of the test process and returns its base
    URL (``http://127.0.0.1:PORT``); every server stops at teardown."""
    yield from serving()


@pytest.fixture(scope="module")
def module_serve() -> Iterator[Callable[[Any], str]]:
    """``serve`` for a module's shared processes (``module_lane``): its servers
    stop after the module's last test."""
    yield from serving()


def serving() -> Iterator[Callable[[Any], str]]:
    servers: list[AppThread] = []

    def start(app: Any) -> str:
        server = AppThread(app, "127.0.0.1", free_port(), "test server").start()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()
