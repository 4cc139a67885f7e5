"""A full disk under the agents service (docs/operations.md, "A full disk"), on
a real tmpfs of a few MB as its LEMONGRAPH_DATA_DIR (mounting one needs root:
skipped without): while the disk is full the service goes on (a job's run, its
message), says so once, and once space is back it writes what it kept in memory;
nothing is lost, and it never stopped."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rocksdict import AccessType, Rdict

from agents.dev.standin import StandinScript, build_standin
from tests.agents.channels.test_mail import CHAT
from tests.lanes import Lane, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = StandinScript.model_validate({"rules": [{"say": "Hello from the agent."}]})


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MB, unmounted at the end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Fill the disk to its last byte; the file that does it."""
    filler = disk / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"x" * 65536)
            out.flush()
    assert shutil.disk_usage(disk).free < 65536
    return filler


def start(key: str) -> dict[str, Any]:
    return {"type": "job.start", "key": key, "playbook_key": "chat",
            "contacts": [{"name": "Ada", "email": "ada@example.com"}]}  # fmt: skip


def test_the_agents_service_goes_on_through_a_full_disk_and_stores_it_all_once_space_is_back(
    lane: Lane, serve: Callable[[Any], str], small_disk: Path
) -> None:
    shutil.copy(ROOT / "examples" / "catalog.yaml", lane.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "examples" / "skills", lane.playbooks / "skills")
    (lane.playbooks / "chat.yaml").write_text(CHAT)
    lane.start_worker()
    agents = lane.start(
        ["agents"], "agents: ready",
        OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1", OPENAI_API_KEY="sk-test",
        LEMONGRAPH_DATA_DIR=str(small_disk),
    )  # fmt: skip

    def answered(keys: set[str]) -> Callable[[list[dict[str, Any]]], bool]:
        return lambda rs: keys <= {r["key"] for r in rs if r["value"]["direction"] == "out"}

    lane.send(start("disk-1"))
    lane.wait_until("messages", answered({"disk-1"}))
    filler = fill(small_disk)
    lane.send(start("disk-2"))  # its conversation cannot be stored: its run goes on
    lane.wait_until("messages", answered({"disk-2"}))
    agents.wait_for("the disk refused a write")
    filler.unlink()
    agents.wait_for("the disk takes writes again", timeout=60)
    lane.send(start("disk-3"))
    lane.wait_until("messages", answered({"disk-3"}))
    assert agents.proc.poll() is None  # it never stopped
    said = "".join(agents.lines)
    assert said.count("the disk refused a write") == 1
    assert "Crashed" not in said
    assert "Traceback" not in said
    # Every conversation is in the store once the service stopped (no read-back).
    wait_for(lambda: len(lane.read("conversations")) >= 3, what="three conversations")
    assert agents.stop(signal.SIGTERM) == 0
    store = Rdict(str(small_disk / "agents" / "conversations"), access_type=AccessType.read_only())
    try:
        for key in ("disk-1", "disk-2", "disk-3"):
            assert store.get(key.encode()) is not None, key
    finally:
        store.close()


def test_a_disk_that_stays_full_past_what_can_be_kept_stops_the_service_loudly(
    small_disk: Path,
) -> None:
    # In a process of its own: the store exits it (ExitCode.DISK).
    script = f"""
import contextlib, sys
from pathlib import Path
from agents.stores import Disk
disk = Disk(Path({str(small_disk)!r}), "agents", most=200_000)
store = disk.open("conversations")
store[b"before"] = b"1"
with open({str(small_disk / "filler")!r}, "wb") as out, contextlib.suppress(OSError):
    while True:
        out.write(b"x" * 65536); out.flush()
for n in range(100):
    store[b"k%d" % n] = b"v" * 10_000
    assert store.get(b"k%d" % n) == b"v" * 10_000  # kept in memory, read from there
print("not stopped")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 74, done.stdout + done.stderr
    assert "not stopped" not in done.stdout
    assert "the disk refused a write" in done.stderr
    assert "agents: stopped: the disk under" in done.stderr
