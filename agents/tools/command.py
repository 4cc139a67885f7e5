"""Command tools: trusted code runs a program the catalog names
(docs/agents.md, "Command tools").

The model never supplies a program or a shell string. The catalog's ``argv``
is the command; an element that is exactly ``{name}`` is filled with the
model's argument ``name`` (already checked against the tool's schema), whole:
the list goes to ``exec`` as it is, never through a shell, so ``; rm -rf /``
arrives as one literal argument. ``${VAR}`` in argv and cwd comes from the
service's environment, and is shown as ``***`` wherever the command is shown.

The child gets only the variables the tool's ``env`` allows through, stdin
from ``/dev/null``, and a session (so a process group) of its own: a timeout
stops the whole group (SIGTERM, then SIGKILL), and whatever the command leaves
running in its group when it exits goes too. Its output (stdout and stderr,
merged) is read as a stream: the last :data:`OUTPUT_TAIL_BYTES` kept, the whole
hashed and counted, never held.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from agents.catalog import PLACEHOLDER, CommandAction, expand_env, redact_env
from agents.errors import AgentsError

__all__ = [
    "KILL_GRACE",
    "OUTPUT_TAIL_BYTES",
    "CommandError",
    "CommandResult",
    "Prepared",
    "prepare",
    "run_command",
    "told",
]

#: How much of a command's output (the end of it) its result keeps.
OUTPUT_TAIL_BYTES = 4096
#: Seconds between the SIGTERM a timed-out command's group gets and the SIGKILL.
KILL_GRACE = 2.0
#: How much of the output is read at once.
_CHUNK = 1 << 16
#: What stands for a value read from the service's environment, when shown.
REDACTED = "***"


class CommandError(AgentsError):
    """The command did not start (no such program, no such cwd, ...)."""


@dataclass(frozen=True)
class Prepared:
    """A command ready to run: its argv (placeholders filled, ``${VAR}``
    expanded), what is shown of it (``${VAR}`` values as ``***``), its cwd and
    its environment (the allow-list only)."""

    argv: tuple[str, ...]
    shown: str
    cwd: str | None
    env: Mapping[str, str]


@dataclass(frozen=True)
class CommandResult:
    """How a command ended. ``exit_code`` is negative when a signal ended it
    (``-15``: SIGTERM)."""

    exit_code: int
    duration_ms: int
    output_tail: str
    output_sha256: str
    output_bytes: int
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def data(self) -> dict[str, Any]:
        """The result as the call's data: what ``records`` paths read."""
        return {
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "output_tail": self.output_tail,
            "output_sha256": self.output_sha256,
            "output_bytes": self.output_bytes,
            "timed_out": self.timed_out,
        }


def prepare(action: CommandAction, args: Any, env: Mapping[str, str] | None) -> Prepared:
    """The command of ``action`` for the model's (checked) ``args``, with
    ``env`` (None: this process's environment) for ``${VAR}`` and the allow-list."""
    source: Mapping[str, str] = os.environ if env is None else env
    given = args if isinstance(args, dict) else {}
    argv: list[str] = []
    shown: list[str] = []
    for element in action.argv:
        placeholder = PLACEHOLDER.match(element)
        if placeholder is None:
            argv.append(expand_env(element, source))
            shown.append(redact_env(element, REDACTED))
            continue
        values = _filled(given.get(placeholder.group(1)))
        argv += values
        shown += values
    cwd = expand_env(action.cwd, source) if action.cwd is not None else None
    allowed = {name: source[name] for name in action.env if name in source}
    return Prepared(tuple(argv), shlex.join(shown), cwd, allowed)


def _filled(value: Any) -> list[str]:
    """The argv elements one placeholder becomes: none for an absent (or null)
    argument, one per item of a list, else one (text as it is, other values as
    JSON: ``true``, ``3``, ``{"a":1}``)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [_text(item) for item in value]
    return [_text(value)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


async def run_command(
    prepared: Prepared,
    timeout: float,
    *,
    tail_bytes: int = OUTPUT_TAIL_BYTES,
    grace: float = KILL_GRACE,
) -> CommandResult:
    """Run ``prepared`` to its end, or to ``timeout`` seconds and then stop its
    process group. :class:`CommandError` when it does not start. Cancelled,
    the group is killed before the cancellation goes on."""
    if not prepared.argv or not prepared.argv[0]:
        raise CommandError("the program is empty (is the ${VAR} it names set?)")
    if prepared.cwd == "":
        raise CommandError("the cwd is empty (is the ${VAR} it names set?)")
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=prepared.cwd,
            env=dict(prepared.env),
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        raise CommandError(_why(exc)) from None
    assert proc.stdout is not None
    sink = _Sink(tail_bytes)
    reader = asyncio.create_task(sink.drain(proc.stdout))
    try:
        timed_out = await _wait(proc, timeout, grace)
    except BaseException:
        _signal_group(proc.pid, signal.SIGKILL)
        reader.cancel()
        raise
    # What the command left running in its group goes with it (docs/agents.md,
    # "Command tools"): then nothing holds the output open.
    _signal_group(proc.pid, signal.SIGKILL)
    await _finish(reader, grace)
    assert proc.returncode is not None
    return CommandResult(
        exit_code=proc.returncode,
        duration_ms=round((time.monotonic() - started) * 1000),
        output_tail=sink.tail_text(),
        output_sha256=sink.hash.hexdigest(),
        output_bytes=sink.count,
        timed_out=timed_out,
    )


async def _wait(proc: asyncio.subprocess.Process, timeout: float, grace: float) -> bool:
    """Wait for the command's end; at ``timeout``, SIGTERM its group, and
    SIGKILL it ``grace`` seconds later if it has not ended. Whether it timed out."""
    try:
        await asyncio.wait_for(proc.wait(), timeout)
        return False
    except TimeoutError:
        pass
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        _signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()
    return True


async def _finish(reader: asyncio.Task[None], grace: float) -> None:
    """Read the output to its end; a process that left the command's group may
    hold it open: after ``grace`` seconds, reading stops."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader, grace)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, sig)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        what = f": {exc.filename}" if exc.filename is not None else ""
        return f"{exc.strerror or type(exc).__name__}{what}"
    return str(exc)


class _Sink:
    """The output as it streams by: hashed and counted whole, its last
    ``keep`` bytes kept."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.hash = hashlib.sha256()
        self.count = 0
        self.tail = bytearray()

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            self.add(chunk)

    def add(self, chunk: bytes) -> None:
        self.hash.update(chunk)
        self.count += len(chunk)
        if len(chunk) >= self.keep:
            self.tail[:] = chunk[len(chunk) - self.keep :]
            return
        self.tail += chunk
        if len(self.tail) > self.keep:
            del self.tail[: len(self.tail) - self.keep]

    def tail_text(self) -> str:
        """The kept bytes as text; cut, it starts at a whole character."""
        kept = bytes(self.tail)
        if self.count > len(kept):
            skip = 0
            while skip < min(3, len(kept)) and 0x80 <= kept[skip] < 0xC0:
                skip += 1
            kept = kept[skip:]
        return kept.decode("utf-8", "replace")


def told(result: CommandResult, limit: int) -> str:
    """What the model is told, as JSON of at most ``limit`` characters: ok or
    why not, and the result with as much of the output's end as fits."""
    data = result.data()
    body: dict[str, Any] = {"ok": result.ok}
    if not result.ok:
        body["error"] = (
            "timed out: the command was stopped"
            if result.timed_out
            else f"the command exited with {result.exit_code}"
        )
    body["result"] = data
    tail = result.output_tail
    while True:
        data["output_tail"] = tail
        text = orjson.dumps(body).decode()
        if len(text) <= limit or not tail:
            return text
        # each character cut takes at least one character off the JSON
        tail = tail[len(text) - limit :]
