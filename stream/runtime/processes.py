"""Child processes and what /proc says about them: a process whose output lines
are collected (the benchmark's workers and the dev stand-ins start as these),
and a process's CPU seconds and resident memory (docs/operations.md, "Memory").
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from stream.runtime.errors import BenchError

__all__ = ["ChildProcess", "cpu_s", "rss_mb"]


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
