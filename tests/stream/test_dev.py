"""`lemongraph dev` with its own embedded broker: a broker that dies is reported
and ends the run non-zero; the next run starts from fresh state and says so; and
Ctrl-C stops it within seconds (docs/operations.md, "When the broker was reset")."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from stream.broker import free_port
from tests.lanes import LEMONGRAPH, ROOT, WorkerProcess

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


def start_dev(cwd: Path, broker_port: int) -> WorkerProcess:
    """`lemongraph dev` on free ports, its output collected as a worker's is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    env.update(
        LEMONGRAPH_PLAYBOOKS_DIR=str(ROOT / "playbooks"),
        LEMONGRAPH_API_PORT=str(free_port()),
        LEMONGRAPH_UI_PORT=str(free_port()),
        LEMONGRAPH_TICK_INTERVAL="0.5",
    )
    proc = subprocess.Popen(
        [str(LEMONGRAPH), "dev", "--broker-port", str(broker_port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    dev = WorkerProcess(proc)
    assert proc.stdout is not None
    stream = proc.stdout
    dev.reader = threading.Thread(target=lambda: dev.lines.extend(stream), daemon=True)
    dev.reader.start()
    return dev


def exit_within(dev: WorkerProcess, seconds: float) -> tuple[int, float]:
    """Wait for ``dev`` to exit by itself; (its exit code, seconds it took)."""
    began = time.monotonic()
    try:
        code = dev.proc.wait(seconds)
    finally:
        dev.stop(signal.SIGKILL)  # only if still running; closes its output
    return code, time.monotonic() - began


def broker_pid(port: int) -> int:
    """The pid of the Tansu process listening on ``port`` (from /proc)."""
    wanted = f"tcp://127.0.0.1:{port}"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"broker" in argv and wanted.encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no broker process listens on {wanted}")


def test_dev_reports_a_dead_broker_exits_non_zero_and_starts_fresh_next_time(
    tmp_path: Path,
) -> None:
    port = free_port()
    first = start_dev(tmp_path, port)
    try:
        first.wait_for(": ready (group", timeout=90)
        os.kill(broker_pid(port), signal.SIGKILL)
        code, took = exit_within(first, 30)
    finally:
        first.stop(signal.SIGKILL)
    said = "".join(first.lines)
    assert code != 0, said
    assert took < 20, f"took {took:.1f}s to stop"
    assert "broker: the embedded broker exited unexpectedly" in said
    assert "Run `lemongraph dev` again to start afresh" in said

    second = start_dev(tmp_path, free_port())
    try:
        second.wait_for(": ready (group", timeout=90)
        assert "state: fresh: removed" in "".join(second.lines)
        second.proc.send_signal(signal.SIGINT)  # Ctrl-C
        _code, took = exit_within(second, 30)
    finally:
        second.stop(signal.SIGKILL)
    assert took < 12, f"took {took:.1f}s to stop after Ctrl-C"
    assert "broker: stopped" in "".join(second.lines)
