"""`lemongraph dev` with its own embedded broker: a broker that dies is reported
and ends the run non-zero; the next run starts from fresh state and says so; and
Ctrl-C stops it within seconds (docs/operations.md, "When the broker was reset").
What a running dev does is tested on one dev process in test_dev_running.py."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from stream.runtime.broker import free_port
from tests.lanes import LEMONGRAPH, ROOT, WorkerProcess

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]


def start_dev(cwd: Path, broker_port: int, *flags: str, **extra: str) -> WorkerProcess:
    """`lemongraph dev` on free ports (with ``flags``, e.g. ``--keep``), its
    output collected as a worker's is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CALENDAR_URL", "CRM_URL", "BILLING_URL",
                 "REPLY_TOKEN_SECRET", "API_TOKEN_SECRET"):  # fmt: skip
        env.pop(name, None)  # the stand-in, demo tools and mail catcher, as on a fresh machine
    env.update(
        LEMONGRAPH_PLAYBOOKS_DIR=str(ROOT / "examples"),
        LEMONGRAPH_API_PORT=str(free_port()),
        LEMONGRAPH_UI_PORT=str(free_port()),
        LEMONGRAPH_TICK_INTERVAL="0.5",
        LEMONGRAPH_MAIL_INGRESS_PORT=str(free_port()),
    )
    env.update(extra)
    proc = subprocess.Popen(
        [str(LEMONGRAPH), "dev", "--broker-port", str(broker_port), *flags],
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


def exit_within(dev: WorkerProcess, seconds: float) -> int:
    """Wait up to ``seconds`` for ``dev`` to exit by itself; its exit code."""
    try:
        return dev.proc.wait(seconds)
    finally:
        dev.stop(signal.SIGKILL)  # only if still running; closes its output


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
        first.wait_for("agents: partitions", timeout=90)  # every part up
        first.wait_for("mail: ready", timeout=90)
        os.kill(broker_pid(port), signal.SIGKILL)
        code = exit_within(first, 30)
    finally:
        first.stop(signal.SIGKILL)
    said = "".join(first.lines)
    assert code != 0, said
    assert "broker: the embedded broker exited unexpectedly" in said
    assert "Run `lemongraph dev` again to start afresh" in said

    second = start_dev(tmp_path, free_port())
    try:
        second.wait_for(": ready (group", timeout=90)
        assert "state: fresh: removed" in "".join(second.lines)
        second.proc.send_signal(signal.SIGINT)  # Ctrl-C
        exit_within(second, 30)
    finally:
        second.stop(signal.SIGKILL)
    assert "broker: stopped" in "".join(second.lines)
