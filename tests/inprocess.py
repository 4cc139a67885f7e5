"""Run a `lemongraph` command in the test's own process: the same click command
the console script runs (stream.cli.main), without the 1-2 s of CPU a new
interpreter spends importing it. Tests of what only a real process shows (its
start-up, signals, the console script itself) run the script instead; see
tests/lanes.py ``Lane.cli`` and tests/stream/cli/test_cli_commands.py."""

from __future__ import annotations

import os
import subprocess
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner

from stream.cli import main

__all__ = ["invoke"]


def invoke(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``lemongraph ARGS`` with exactly ``env`` as its environment and ``cwd`` as
    its working folder; what a process would give: its exit code, stdout and stderr
    (an exception no command caught is printed to stderr and exits 1, as Python does)."""
    overrides: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
    overrides.update({k: None for k in os.environ if k not in env})
    before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(
            main, list(args), env=overrides, input=input, prog_name="lemongraph"
        )
    finally:
        os.chdir(before)
    stderr = result.stderr
    code = result.exit_code
    crash = result.exception
    if crash is not None and not isinstance(crash, SystemExit):
        stderr += "".join(traceback.format_exception(crash))
        code = 1
    return subprocess.CompletedProcess(["lemongraph", *args], code, result.stdout, stderr)
