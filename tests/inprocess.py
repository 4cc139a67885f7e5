"""Run a `lemongraph` command in the test's own process: the same click command
the console script runs (stream.cli.main), without the 1-2 s of CPU a new
interpreter spends importing it. Tests of what only a real process shows (its
start-up, signals, the console script itself) run the script instead
(``lemongraph(..., process=True)``); see tests/lanes.py ``Lane.cli`` and
tests/stream/cli/test_cli_commands.py.

A command run here must leave the test's process as it found it: ``invoke``
puts back the environment, the working folder, the logging set-up (``main``
calls ``logging.basicConfig`` and quietens aiokafka) the SIGINT/SIGTERM
handlers, and ``sys.path`` (``LEMONGRAPH_HANDLERS`` names a module of the
working folder, agents/flows/handlers.py adds that folder and imports it: the
modules imported from there are forgotten too, so that the next test's folder
is imported afresh), whatever the command changed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

from stream.cli import main

__all__ = ["LEMONGRAPH", "invoke", "lemongraph"]

#: The console script of this environment (what a user runs).
LEMONGRAPH = Path(sys.executable).parent / "lemongraph"

#: Loggers a command sets a level on (stream/cli/commands.py, ``main``).
_LOGGERS = ("aiokafka",)
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def lemongraph(
    *args: str,
    env: Mapping[str, str],
    cwd: Path,
    input: str | None = None,
    process: bool = False,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``lemongraph ARGS``: in the test's process (``invoke``), or with ``process``
    as its own process through the console script (``timeout`` applies to it)."""
    if not process:
        return invoke(args, env=env, cwd=cwd, input=input)
    return subprocess.run(
        [str(LEMONGRAPH), *args],
        cwd=cwd,
        env=dict(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def invoke(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``lemongraph ARGS`` with exactly ``env`` as its environment and ``cwd`` as
    its working folder, ``input`` on its stdin (empty when None); what a process
    would give: its exit code, stdout and stderr (an exception no command caught
    is printed to stderr and exits 1, as Python does)."""
    overrides: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
    overrides.update({k: None for k in os.environ if k not in env})
    with _restored(cwd):
        result = CliRunner().invoke(
            main, list(args), env=overrides, input=input, prog_name="lemongraph"
        )
    stderr = result.stderr
    code = result.exit_code
    crash = result.exception
    if crash is not None and not isinstance(crash, SystemExit):
        stderr += "".join(traceback.format_exception(crash))
        code = 1
    return subprocess.CompletedProcess(["lemongraph", *args], code, result.stdout, stderr)


@contextmanager
def _restored(cwd: Path) -> Iterator[None]:
    """In ``cwd``; afterwards the process's environment, working folder, logging
    and signal handlers as they were before."""
    environ = dict(os.environ)
    before = os.getcwd()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    handlers_of = {s: signal.getsignal(s) for s in _SIGNALS}
    path, modules = list(sys.path), set(sys.modules)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)
        _forget_imports(path, modules)
        os.environ.clear()
        os.environ.update(environ)
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        for name, was in levels.items():
            logging.getLogger(name).setLevel(was)
        for number, handler in handlers_of.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)


def _forget_imports(path: list[str], modules: set[str]) -> None:
    """``sys.path`` back to ``path``, and the modules imported since ``modules``
    from a folder the command added to it removed from ``sys.modules``."""
    added = [Path(p).resolve() for p in sys.path if p not in path and p]
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        file = getattr(sys.modules[name], "__file__", None)
        if file and any(Path(file).resolve().is_relative_to(folder) for folder in added):
            del sys.modules[name]
