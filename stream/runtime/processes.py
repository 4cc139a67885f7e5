"""Child processes and what /proc says about them: a process whose output lines
are collected (the benchmark's workers and the dev stand-ins start as these),
and a process's CPU seconds and resident memory (docs/operations.md, "Memory");
and what a long-running process says of itself on SIGUSR1: every asyncio task's
stack and every thread's (docs/operations.md, "A process that seems stuck").
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stream.runtime.errors import BenchError

__all__ = [
    "DUMP_END",
    "ChildProcess",
    "collector_paused",
    "cpu_s",
    "dump_tasks_on_signal",
    "rss_mb",
]

#: The line that ends what :func:`dump_tasks_on_signal` prints.
DUMP_END = "stacks: end"


@contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in this process while it produces a timed load.

    A record's timestamp is set when it is handed to the producer, so a pause of
    the producing process between that and the send counts as the engine's
    latency. In a full run the bench holds the burst's records and figures, and a
    full collection of that took 50-180 ms: the latency run's slowest events were
    the bench's pauses, not the worker's (benchmarks/README.md, "Latency: the
    load generator's pauses"), and so were the outliers of ``bench-agents``'
    tasks one at a time. What exists now is frozen (never walked again) and the
    collector is off until the block ends; reference counting still frees what
    the load allocates."""
    gc.collect()
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.unfreeze()


def cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """A process's resident memory (MB; 0.0 when /proc does not say)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class ChildProcess:
    """A child process whose output lines are collected."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and entry points
            args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        out = self.proc.stdout
        self.reader = threading.Thread(target=lambda: self.lines.extend(out), daemon=True)
        self.reader.start()

    def wait_for(self, text: str, timeout: float) -> str:
        """The first output line holding ``text``, waiting up to ``timeout`` s
        (BenchError with the last lines when it never comes or the process ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise BenchError(f"never saw {text!r}; output:\n" + "".join(self.lines[-30:]))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (if still running), wait for the end, close the output."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def dump_tasks_on_signal(sig: int = signal.SIGUSR1) -> None:
    """On ``sig``, print the stack of every task of the running loop and of every
    thread, then :data:`DUMP_END` (stdout, flushed): where a process that seems
    stuck waits. Called from inside the loop; the process goes on."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(sig, _dump_stacks, loop)


def _dump_stacks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
    lines = [f"stacks: {len(tasks)} asyncio tasks, each as the chain it awaits"]
    lines += [f"task {t.get_name()}: {' > '.join(_awaiting(t.get_coro()))}" for t in tasks]
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        lines.append(f"thread {names.get(ident, ident)} (most recent call last):")
        lines += [x.rstrip("\n") for x in traceback.format_stack(frame, limit=8)]
    lines.append(DUMP_END)
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _awaiting(coro: object) -> list[str]:
    """Where a task's coroutine waits, outermost first (``file:line function``
    per coroutine it awaits; a task's own stack shows the outermost only)."""
    chain: list[str] = []
    while coro is not None and len(chain) < 40:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            where = frame.f_code.co_filename.rsplit("site-packages/", 1)[-1]
            chain.append(f"{where}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain
