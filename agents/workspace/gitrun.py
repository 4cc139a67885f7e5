"""Trusted code runs git (docs/coding.md, "What is trusted and what is not").

Always an argv, never a shell; hooks off (``core.hooksPath=/dev/null``), no
terminal prompt, no optional locks (a fingerprint never takes the index lock
while a validation command runs), and none of the caller's ``GIT_*``
variables: a service started from a git hook (``GIT_DIR``, ``GIT_INDEX_FILE``)
still works on the repository it names. The model never reaches this module
with arguments of its choosing except a search pattern, passed after ``-e``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from agents.errors import AgentsError

__all__ = ["GIT_TIMEOUT", "GitError", "git", "git_argv", "git_env"]

#: Seconds a git command may take before it is stopped.
GIT_TIMEOUT = 120.0
#: Set on every git command: no hooks, no pager, no prompt, plain output.
_CONFIG = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "color.ui=false",
    "-c", "core.quotepath=false",
    "-c", "commit.gpgsign=false",
    "-c", "user.name=lemongraph",
    "-c", "user.email=lemongraph@localhost",
)  # fmt: skip


class GitError(AgentsError):
    """A git command that failed: its arguments, exit code and what it said."""

    def __init__(self, args: Sequence[str], code: int, said: str) -> None:
        self.code = code
        self.said = said.strip()
        super().__init__(f"git {' '.join(args[:3])}… exited with {code}: {self.said[:500]}")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``GIT_*``, plus what git needs here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_PAGER="cat",
        LC_ALL="C",
    )
    env.update(extra or {})
    return env


def git_argv(args: Sequence[str]) -> list[str]:
    """The argv that runs ``git args`` with the settings above."""
    return ["git", *_CONFIG, *args]


def git(
    args: Sequence[str],
    cwd: Path,
    *,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    ok: Sequence[int] = (0,),
    timeout: float = GIT_TIMEOUT,
) -> bytes:
    """Run ``git args`` in ``cwd``; its stdout. :class:`GitError` when its exit
    code is not in ``ok``. ``env``: variables added (``GIT_INDEX_FILE``)."""
    argv = git_argv(args)
    try:
        done = subprocess.run(  # noqa: S603 - an argv of ours, never a shell
            argv,
            cwd=cwd,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            env=git_env(env),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitError(args, -1, f"timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise GitError(args, -1, f"git did not start: {exc.strerror}") from exc
    if done.returncode not in ok:
        said = (done.stderr or done.stdout).decode("utf-8", "replace")
        raise GitError(args, done.returncode, said)
    return done.stdout
