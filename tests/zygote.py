"""A fork server for the `lemongraph` processes the tests start (workers,
gateways, the agents service, mail ingress): each starts as a fork of a process
that has already imported lemongraph and its libraries, instead of a new
interpreter importing them again.

Why: a `lemongraph worker`, `gateway` or `agents` process spent 0.8-1.1 s of
CPU importing Faust, FastAPI, aiokafka, pydantic, openai and lemongraph's own
modules before it did anything, and the suite starts about 200 of them; on the
2-core machine that was about a fifth of the suite's CPU (README, "Tests and
benchmarks").

What a forked process shares with a real one: it is a process of its own (its
own pid, signals, exit code, stdout and stderr on a pipe, environment and
working folder as the test gave them), and it runs the same click command the
console script runs (``stream.cli.main``), which reads its settings from the
environment when it runs; no lemongraph module reads the environment when it is
imported (only then would a forked process differ). Its interpreter exit is
done by hand, in Python's order: non-daemon threads joined, ``atexit``
functions, the streams flushed, and an uncaught ``KeyboardInterrupt`` ends it
by SIGINT as it ends an interpreter.

What it does not share: the console script itself and the interpreter's start,
and its command line: ``ps`` shows a forked process as the fork server's
(``python -m tests.zygote SOCKET``), the pid being the process's own.
The tests of those run the script (``Lane.cli(..., process=True)``,
tests/inprocess.py ``lemongraph(..., process=True)``, tests/stream/cli/),
as does every test when ``LEMONGRAPH_TEST_FORK=0``.

One fork server per test process, started at its first use and stopped when
the test process ends. A request is a JSON line on a Unix socket, with the
pipe that becomes the process's stdout and stderr passed along (SCM_RIGHTS);
the server answers the pid at once and the exit status (and the process's CPU
time, for tests/costs.py) when the process has ended.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from tests import costs

__all__ = ["ENABLED", "ForkedProcess", "enabled", "spawn"]

#: Set to 0 to start every process through the console script instead.
ENABLED = "LEMONGRAPH_TEST_FORK"
#: What the server imports before it forks: the command modules of the
#: processes the tests start, and what those import when they run.
PRELOAD = (
    "stream.cli.commands",
    "stream.cli.services",
    "stream.engine.worker",
    "stream.gateway",
    "stream.memory.command",
    "agents.cli",
    "agents.app",
    "agents.catalog",
    "agents.memory",
    "agents.model",
    "agents.tools.executor",
    "agents.channels.mail_service",
    "openai",
    # imported once they run (listed from what forked processes had imported 10 s in)
    "faust.worker",
    "faust.assignor",
    "faust.app.router",
    "stream.engine.app",
    "stream.engine.engine",
    "stream.engine.schedules",
    "stream.runtime.produce",
    "agents.coding.handlers",
    "agents.coding.research",
    "agents.coding.validation",
    "agents.flows.demo_handlers",
    "agents.workspace.lease",
    "openai.resources.responses",
    "openai.lib.streaming.responses",
    "httpcore",
    "anyio._backends._asyncio",
    "uvicorn.lifespan.off",
    "uvicorn.protocols.websockets.auto",
    "truststore",
    "certifi",
)
#: The commands a fork may run (others start through the console script).
COMMANDS = frozenset({"worker", "gateway", "agents", "mail-ingress", "memory", "ticker"})


def enabled(args: Sequence[str]) -> bool:
    """Whether ``lemongraph ARGS`` starts as a fork (see the module docstring)."""
    if os.environ.get(ENABLED, "1").strip() == "0":
        return False
    return bool(args) and args[0] in COMMANDS


class ForkedProcess:
    """What the tests use of ``subprocess.Popen``, for a forked process: ``pid``,
    ``args``, ``stdout`` (text), ``poll``, ``wait``, ``send_signal``,
    ``terminate``, ``kill`` and ``returncode`` (negative: the signal that ended it)."""

    def __init__(self, conn: socket.socket, pid: int, args: list[str], stdout: io.TextIOWrapper):
        self._conn = conn
        self._buffer = b""
        self.pid = pid
        self.args = args
        self.stdout: io.TextIOWrapper | None = stdout
        self.returncode: int | None = None
        #: CPU seconds (user + system) the process used, once it has ended.
        self.cpu = 0.0

    def _read_status(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return False
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the fork server ended before process {self.pid} did")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        status = orjson.loads(line)
        self.returncode = int(status["returncode"])
        self.cpu = float(status["cpu"])
        self._conn.close()
        costs.forked_process_ended(self.cpu)
        return True

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Client:
    """The test process's side: starts the server once, asks it for processes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: subprocess.Popen[bytes] | None = None
        self.path = ""

    def start(self) -> None:
        folder = tempfile.mkdtemp(prefix="lemongraph-fork-")
        self.path = os.path.join(folder, "socket")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote", self.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        if line.strip() != b"ready":
            self.server.kill()
            raise RuntimeError(f"the fork server did not start: {line!r}")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.server.wait(10)
        self.server = None

    def spawn(self, args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> ForkedProcess:
        with self.lock:
            if self.server is None or self.server.poll() is not None:
                self.start()
        read, write = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            request = {"args": list(args), "cwd": str(cwd), "env": dict(env)}
            socket.send_fds(conn, [orjson.dumps(request) + b"\n"], [write])
        except BaseException:
            conn.close()
            os.close(read)
            raise
        finally:
            os.close(write)
        buffer = b""
        while b"\n" not in buffer:
            chunk = conn.recv(4096)
            if not chunk:
                os.close(read)
                raise RuntimeError("the fork server did not start the process")
            buffer += chunk
        line, _, rest = buffer.partition(b"\n")
        stdout = io.TextIOWrapper(io.FileIO(read, "r"), encoding="utf-8", errors="replace")
        process = ForkedProcess(conn, int(orjson.loads(line)["pid"]), list(args), stdout)
        process._buffer = rest
        costs.forked_process_started(["lemongraph", *args])
        return process


_CLIENT = _Client()


def spawn(args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> ForkedProcess:
    """``lemongraph ARGS`` in ``cwd`` with exactly ``env``, as a fork of the
    test process's fork server; stdout and stderr together on ``stdout``."""
    return _CLIENT.spawn(args, cwd, env)


# --- the server -----------------------------------------------------------------


def _serve(path: str) -> None:
    from stream.runtime.broker import die_with_parent

    die_with_parent()  # a test process killed leaves no fork server behind
    for name in PRELOAD:
        importlib.import_module(name)
    from stream.cli.commands import main

    for command in COMMANDS:  # the commands' own modules, loaded lazily by click
        main.get_command(None, command)  # type: ignore[arg-type]
    gc.collect()
    gc.freeze()  # the imported objects stay out of the children's collections
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    signal.signal(signal.SIGTERM, _stop_serving)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.data is None:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 1)
                while not message.endswith(b"\n"):
                    more = conn.recv(1 << 20)
                    if not more:
                        break
                    message += more
                request = orjson.loads(message)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    selector.close()
                    for pidfd, other in children.items():
                        os.close(pidfd)
                        other.close()
                    conn.close()
                    _child(request, fds[0])  # never returns
                os.close(fds[0])
                conn.sendall(orjson.dumps({"pid": pid}) + b"\n")
                pidfd = os.pidfd_open(pid)
                children[pidfd] = conn
                selector.register(pidfd, selectors.EVENT_READ, pid)
            else:
                pidfd, pid = key.fd, key.data
                selector.unregister(pidfd)
                os.close(pidfd)
                conn = children.pop(pidfd)
                _, status, usage = os.wait4(pid, 0)
                result = {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "cpu": usage.ru_utime + usage.ru_stime,
                }
                with contextlib.suppress(OSError):
                    conn.sendall(orjson.dumps(result) + b"\n")
                conn.close()


def _child(request: dict[str, Any], output: int) -> None:
    """In the fork: become ``lemongraph ARGS`` and end as an interpreter ends."""
    code = 1
    try:
        # Die with the fork server, as with a test process that is killed.
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        args = request["args"]
        sys.argv = [str(Path(sys.executable).parent / "lemongraph"), *args]
        from stream.cli.commands import main

        main(args=args, prog_name="lemongraph")
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        _end(lambda: os.kill(os.getpid(), signal.SIGINT), 130)
    except BaseException:
        traceback.print_exc()
        code = 1
    _end(None, code)


def _end(kill: Any, code: int) -> None:
    """Python's own exit, in its order, then the process's end."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads joined
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if kill is not None:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            kill()
        os._exit(code)


def _stop_serving(signum: int, frame: Any) -> None:
    """SIGTERM (the test process ends, or dies): the socket removed, and the end at
    once (freeing the libraries imported took over a second)."""
    with contextlib.suppress(OSError):
        os.unlink(sys.argv[1])
    os._exit(0)


if __name__ == "__main__":
    _serve(sys.argv[1])
