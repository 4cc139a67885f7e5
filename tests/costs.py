"""What each test module costs, for whoever shortens the suite: off unless
LEMONGRAPH_TEST_COSTS names a folder (tests/conftest.py registers it then).

Around each test, in each test process: the CPU seconds of the process and of
its children it reaped (``resource.getrusage`` SELF + CHILDREN: a worker,
gateway or CLI process a test started counts once it has been waited for, which
the lanes and fixtures do when they stop them), the CPU of the process's own
embedded broker (``/proc/PID/stat``; the session's ``kafka_url``), its wall time,
and the processes it started (``subprocess.Popen``, by command: ``lemongraph
worker``, ``python -m agents ...``). Each test process appends a JSON line per
test to ``FOLDER/<worker id>.jsonl``; the run's end prints the 15 costliest
modules by CPU (``scripts/test`` with the variable set, or
``pytest -n 2 tests/PACKAGE``)."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

#: The environment variable that turns the record on: a folder for its files.
VARIABLE = "LEMONGRAPH_TEST_COSTS"
#: How many modules the summary lists.
TOP = 15
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class ModuleCost:
    """One module's sums over its tests."""

    module: str
    tests: int = 0
    cpu: float = 0.0
    broker: float = 0.0
    wall: float = 0.0
    starts: Counter[str] = field(default_factory=Counter)


def own_cpu() -> float:
    """CPU seconds of this process and of the children it reaped so far."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def process_cpu(pid: int | None) -> float:
    """CPU seconds of a running process (0 when it is gone or None)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def command_name(argv: Any) -> str:
    """A short name for what a Popen ran: ``lemongraph worker``, ``python -m agents``."""
    args = [str(a) for a in ([argv] if isinstance(argv, (str, bytes, os.PathLike)) else argv)]
    if not args:
        return "?"
    head = Path(args[0]).name
    if head.startswith("python") and "-m" in args[:-1]:
        return "python -m " + args[args.index("-m") + 1]
    if head in ("lemongraph", "tansu") and len(args) > 1:
        return f"{head} {args[1]}"
    return head


class CostRecorder:
    """The pytest plugin: sums per module, written at the session's end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.current: ModuleCost | None = None
        self.broker_pid: int | None = None
        self.original_init: Any = None
        #: CPU of the session broker, reaped during the current test.
        self.reaped = 0.0
        #: CPU of the processes the fork server started that ended during it
        #: (tests/zygote.py): its children, not this process's.
        self.forked = 0.0

    def pytest_configure(self, config: pytest.Config) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.original_init = subprocess.Popen.__init__
        recorder, original = self, self.original_init

        def counting_init(popen: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
            if recorder.current is not None:
                recorder.current.starts[command_name(args)] += 1
            original(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = counting_init  # type: ignore[method-assign, assignment]

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        subprocess.Popen.__init__ = self.original_init  # type: ignore[method-assign]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        module = item.nodeid.split("::")[0]
        cost = ModuleCost(module)
        self.current = cost
        cpu, broker, wall = own_cpu(), self.broker_cpu(), time.monotonic()
        yield
        cost.tests += 1
        if self.broker_pid is None and self.reaped:
            cost.broker += self.reaped - broker
        else:
            cost.broker += self.broker_cpu() - broker
        cost.cpu += own_cpu() - cpu - self.reaped + self.forked
        self.reaped = self.forked = 0.0
        cost.wall += time.monotonic() - wall
        self.current = None
        # A line per test, written at once: an interrupted run's figures count.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with (self.folder / f"{worker}.jsonl").open("ab") as out:
            out.write(orjson.dumps(cost, default=dict) + b"\n")

    def broker_cpu(self) -> float:
        """The CPU of this test process's session broker so far."""
        return process_cpu(self.broker_pid)

    def broker_stopping(self) -> None:
        """The session broker is about to stop: once reaped its CPU would count
        again, as the children's of the test that ends the session."""
        self.reaped += self.broker_cpu()
        self.broker_pid = None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return
        terminalreporter.section(f"costliest {TOP} modules by CPU ({VARIABLE})")
        for line in summary(self.folder):
            terminalreporter.write_line(line)


def summary(folder: Path, top: int = TOP) -> list[str]:
    """The ``top`` costliest modules of the records in ``folder``, as lines."""
    rows: dict[str, ModuleCost] = {}
    for file in sorted(folder.glob("*.jsonl")):
        for line in file.read_bytes().splitlines():
            data = orjson.loads(line)
            row = rows.setdefault(data["module"], ModuleCost(data["module"]))
            row.tests += data["tests"]
            row.cpu += data["cpu"]
            row.broker += data["broker"]
            row.wall += data["wall"]
            row.starts.update(data["starts"])
    lines = [f"{'cpu s':>7} {'broker':>7} {'wall s':>7} {'tests':>5}  module: process starts"]
    ranked = sorted(rows.values(), key=lambda r: -(r.cpu + r.broker))
    for row in ranked[:top]:
        starts = ", ".join(f"{n} x{c}" for n, c in row.starts.most_common())
        lines.append(
            f"{row.cpu:7.1f} {row.broker:7.1f} {row.wall:7.1f} {row.tests:5d}  "
            f"{row.module}: {starts or '-'}"
        )
    total = sum(r.cpu + r.broker for r in rows.values())
    lines.append(f"{total:7.1f} s of CPU in {len(rows)} modules (with their brokers)")
    return lines


#: The plugin when the record is on (tests/conftest.py registers it).
RECORDER: CostRecorder | None = None


def register(config: pytest.Config) -> None:
    """Record costs when LEMONGRAPH_TEST_COSTS names a folder."""
    global RECORDER
    folder = os.environ.get(VARIABLE, "").strip()
    if folder and RECORDER is None:
        RECORDER = CostRecorder(Path(folder))
        config.pluginmanager.register(RECORDER, "lemongraph-costs")


def broker_started(pid: int | None) -> None:
    """The session's embedded broker runs as ``pid`` (tests/conftest.py, kafka_url)."""
    if RECORDER is not None:
        RECORDER.broker_pid = pid


def broker_stopping() -> None:
    if RECORDER is not None:
        RECORDER.broker_stopping()


def forked_process_started(argv: list[str]) -> None:
    """The fork server started ``argv`` for the current test (tests/zygote.py)."""
    if RECORDER is not None and RECORDER.current is not None:
        RECORDER.current.starts[command_name(argv)] += 1


def forked_process_ended(cpu: float) -> None:
    """A process the fork server started ended, having used ``cpu`` seconds."""
    if RECORDER is not None:
        RECORDER.forked += cpu


if __name__ == "__main__":
    # python -m tests.costs FOLDER [TOP]: the table of a run so far.
    import sys

    print("\n".join(summary(Path(sys.argv[1]), int(sys.argv[2]) if sys.argv[2:] else TOP)))
