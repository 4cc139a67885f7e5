"""Trusted validation: which commands decide whether a change passes, and running
them as command tools (docs/coding.md, "Validation").

The commands come from the target repository's own files, and only from a file
git tracks, unmodified against HEAD, read as committed (``git show HEAD:./FILE``):
``.lemongraph.json`` (``{"setup": [...], "validate": [...]}``), else a root
``AGENTS.md``'s setup, build, test and check sections, copied exactly. The
operator's ``--validate`` commands replace both. Never from a model: nothing a
model says reaches this module.

Each command becomes a catalog ``command:`` tool (``sh -c`` and the exact text,
in the job's worktree): the text is the repository's or the operator's, never
the model's, so a shell is what the repository meant (pipes, ``&&``, variables).
:func:`run_validation` runs them in order through the trusted executor
(agents/tools/executor.py: our derived keys, ``source: tool``), stops at the
first that fails, and tells an environment failure (the program not found, a
native module built for another runtime) from a failed check:
:func:`environment_failure`, a short and conservative list.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import httpx2
import orjson
from compiler import LemongraphError, load_located
from topics import InboxEvent

from agents.catalog import Catalog, CommandAction, Records, ToolSpec
from agents.tools.executor import Executor, Outcome

__all__ = [
    "AGENTS_FILE",
    "CONFIG_FILE",
    "DEFAULT_ENV",
    "ENV_FAILED",
    "FAILED",
    "PASSED",
    "QUIET_ENV",
    "STEP_PASSED",
    "StepRun",
    "Validation",
    "ValidationCommand",
    "ValidationRun",
    "agents_commands",
    "as_command_tools",
    "config_commands",
    "discover",
    "environment_failure",
    "run_validation",
    "tool_name",
]

#: The files read, at the repository's root.
AGENTS_FILE: Final = "AGENTS.md"
CONFIG_FILE: Final = ".lemongraph.json"
#: The facts a validation records (docs/coding.md, "Validation"): every command
#: passed (the last one's record); a command before the last passed; a command
#: failed; a command could not run in this environment.
PASSED: Final = "validation_passed"
STEP_PASSED: Final = "validation_step_passed"
FAILED: Final = "validation_failed"
ENV_FAILED: Final = "validation_env_failed"
#: Set for every validation command (through ``env``, before ``sh``): Python
#: writes no bytecode cache into the worktree (a ``__pycache__`` the repository
#: does not ignore would be a file of the job's; docs/coding.md, "Environment").
QUIET_ENV: Final = ("env", "PYTHONDONTWRITEBYTECODE=1")
#: What a validation command's environment lets through (besides these, nothing
#: of the service's environment reaches it: docs/agents.md, "Command tools").
DEFAULT_ENV: Final = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR"
)  # fmt: skip
#: How long one command may run, in seconds.
DEFAULT_TIMEOUT: Final = 900.0
#: A longer command is not taken (its fact would carry it whole).
MAX_COMMAND_CHARS: Final = 4000

Kind = Literal["setup", "build", "test", "check", "validate"]
#: An ``AGENTS.md`` heading's title (lower case, a trailing ``:`` and a trailing
#: word ``commands`` or ``instructions`` left out) → the kind of its commands.
HEADINGS: Final[Mapping[str, Kind]] = {
    "setup": "setup",
    "build": "build",
    "test": "test",
    "tests": "test",
    "testing": "test",
    "check": "check",
    "checks": "check",
    "lint": "check",
    "linting": "check",
    "validation": "check",
}
#: The order the kinds run in, whatever the order of the sections.
KIND_ORDER: Final[tuple[Kind, ...]] = ("setup", "build", "test", "check")
#: A fenced block's language that holds commands (the first word of its info string).
SHELL_FENCES: Final = frozenset({"", "sh", "bash", "shell", "zsh"})

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+`([^`]+)`\s*$")
_TITLE_TAIL = re.compile(r"\s+(commands|instructions)$")


@dataclass(frozen=True)
class ValidationCommand:
    """One command and where it was written: ``source`` (a file, or ``operator``)
    and ``line`` (1-based in the file; the operator's: its place among ``--validate``)."""

    text: str
    source: str
    line: int
    kind: Kind

    @property
    def where(self) -> str:
        """``AGENTS.md:14``, ``.lemongraph.json:3``, ``--validate #1``."""
        if self.source == "operator":
            return f"--validate #{self.line}"
        return f"{self.source}:{self.line}"


@dataclass(frozen=True)
class Validation:
    """The commands that decide, in the order they run, and where they come from
    (``source``: a file name, ``operator``, or None when there is no trusted
    source); ``notes`` says why each source looked at was not used."""

    commands: tuple[ValidationCommand, ...]
    source: str | None
    notes: tuple[str, ...] = ()


# -- where the commands come from ---------------------------------------------------


def discover(repo: Path, operator: Sequence[str] = ()) -> Validation:
    """The validation commands of the repository at ``repo``: the operator's
    (``--validate``, in order) when given; else ``.lemongraph.json``'s; else
    ``AGENTS.md``'s; a file only when git tracks it and it is unmodified against
    HEAD (docs/coding.md, "Validation"). Call it once, on the source repository,
    when the job starts: the model edits a worktree, never what was read here."""
    if operator:
        return Validation(_operator_commands(operator), "operator")
    notes: list[str] = []
    text, why = trusted_text(repo, CONFIG_FILE)
    if text is not None:
        commands, problem = config_commands(text, CONFIG_FILE)
        if problem is not None:  # a broken config is fixed, not guessed around
            return Validation((), None, (problem,))
        if commands:
            return Validation(commands, CONFIG_FILE)
        notes.append(f"{CONFIG_FILE} names no command")
    elif why is not None:
        notes.append(why)
    text, why = trusted_text(repo, AGENTS_FILE)
    if text is not None:
        commands = agents_commands(text, AGENTS_FILE)
        if commands:
            return Validation(commands, AGENTS_FILE, tuple(notes))
        notes.append(f"{AGENTS_FILE} has no setup, build, test or check section with a command")
    elif why is not None:
        notes.append(why)
    else:
        notes.append(f"no {AGENTS_FILE} and no {CONFIG_FILE}")
    return Validation((), None, tuple(notes))


def _operator_commands(operator: Sequence[str]) -> tuple[ValidationCommand, ...]:
    commands = []
    for i, text in enumerate(operator, 1):
        if not text.strip():
            raise ValueError(f"--validate #{i} is empty")
        if len(text) > MAX_COMMAND_CHARS:
            raise ValueError(f"--validate #{i} is over {MAX_COMMAND_CHARS} characters")
        commands.append(ValidationCommand(text, "operator", i, "validate"))
    return tuple(commands)


def trusted_text(repo: Path, name: str) -> tuple[str | None, str | None]:
    """(the committed text of ``name`` at the root of ``repo``, None) when git
    tracks it and it is unmodified against HEAD; else (None, why not), or
    (None, None) when there is no such file at all."""
    tracked = _git(repo, "ls-files", "--error-unmatch", "--", name).returncode == 0
    if not tracked:
        if (repo / name).exists() or (repo / name).is_symlink():
            return None, f"{name} is not tracked by git: not trusted"
        return None, None
    if _git(repo, "rev-parse", "--verify", "--quiet", "HEAD").returncode != 0:
        return None, f"{name}: the repository has no commit yet: not trusted"
    diff = _git(repo, "diff", "--quiet", "--no-ext-diff", "--no-textconv", "HEAD", "--", name)
    if diff.returncode == 1:
        return None, f"{name} has changes against HEAD: not trusted"
    shown = _git(repo, "show", f"HEAD:./{name}")  # ./: at ``repo``, as ls-files and diff
    if diff.returncode != 0 or shown.returncode != 0:
        error = (diff.stderr or shown.stderr).decode("utf-8", "replace").strip()
        return None, f"{name}: git could not read it ({error[:200]}): not trusted"
    try:
        return shown.stdout.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, f"{name} is not UTF-8 text: not read"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run git in ``repo``, reading only: no optional lock, no fsmonitor hook."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    return subprocess.run(  # noqa: S603 - git, with our own arguments
        ["git", "-c", "core.fsmonitor=false", "-C", str(repo), *args],  # noqa: S607 - git on PATH
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def config_commands(
    text: str, source: str = CONFIG_FILE
) -> tuple[tuple[ValidationCommand, ...], str | None]:
    """The commands of a ``.lemongraph.json`` (``setup`` first, then ``validate``),
    or why it is refused: not a JSON object, another key, a list that is not of
    non-empty strings."""
    try:
        data = orjson.loads(text)
        located = load_located(text, source)
    except (orjson.JSONDecodeError, LemongraphError) as exc:
        return (), f"{source}: not JSON: {exc}"
    if not isinstance(data, dict):
        return (), f'{source}: must be an object: {{"setup": [...], "validate": [...]}}'
    unknown = sorted(set(data) - {"setup", "validate"})
    if unknown:
        return (), f"{source}: unknown key {unknown[0]!r} (it takes setup and validate)"
    commands: list[ValidationCommand] = []
    for key in ("setup", "validate"):
        items = data.get(key, [])
        if not isinstance(items, list):
            return (), f"{source}: {key} must be a list of commands"
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                return (), f"{source}: {key}[{i}] must be a command (a non-empty string)"
            if len(item) > MAX_COMMAND_CHARS:
                return (), f"{source}: {key}[{i}] is over {MAX_COMMAND_CHARS} characters"
            position = located.position((key, i))
            line = position.line if position is not None else 1
            kind: Kind = "setup" if key == "setup" else "validate"
            commands.append(ValidationCommand(item, source, line, kind))
    return tuple(commands), None


def agents_commands(text: str, source: str = AGENTS_FILE) -> tuple[ValidationCommand, ...]:
    """The commands of an ``AGENTS.md``'s setup, build, test and check sections
    (:data:`HEADINGS`), setup first, then build, test and check, each kind in the
    order written: every command line of a fenced shell block (:data:`SHELL_FENCES`)
    and every list item that is one code span (``- `make test` ``); docs/coding.md,
    "Validation", says exactly what is read."""
    found: list[ValidationCommand] = []
    for kind, line, command in _Sections(text.splitlines()).commands():
        if len(command) <= MAX_COMMAND_CHARS:
            found.append(ValidationCommand(command, source, line, kind))
    return tuple(sorted(found, key=lambda c: (KIND_ORDER.index(c.kind), c.line)))


class _Sections:
    """A walk over a Markdown file's lines that yields the commands of its
    validation sections (ATX headings only; a section runs to the next heading
    of its level or above, so its subsections are part of it)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.kind: Kind | None = None
        self.level = 0

    def commands(self) -> list[tuple[Kind, int, str]]:
        out: list[tuple[Kind, int, str]] = []
        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            fence = _FENCE.match(line)
            if fence is not None:
                end = _fence_end(self.lines, i + 1, fence.group(2))
                language = (fence.group(3).split() or [""])[0].lower()
                if self.kind is not None and language in SHELL_FENCES and "`" not in language:
                    out += [(self.kind, n, c) for n, c in _block_commands(self.lines, i + 1, end)]
                i = end + 1
                continue
            heading = _HEADING.match(line)
            if heading is not None:
                self._heading(len(heading.group(1)), heading.group(2) or "")
            elif self.kind is not None:
                bullet = _BULLET.match(line)
                if bullet is not None:
                    out.append((self.kind, i + 1, bullet.group(1).strip()))
            i += 1
        return out

    def _heading(self, level: int, title: str) -> None:
        if self.kind is not None and level > self.level:
            return  # a subsection of a validation section
        name = _TITLE_TAIL.sub("", title.strip().rstrip(":").strip().lower())
        kind = HEADINGS.get(name)
        self.kind, self.level = (kind, level) if kind is not None else (None, 0)


def _fence_end(lines: list[str], start: int, fence: str) -> int:
    """The index of the line closing a fence opened with ``fence`` (the end of
    the file when none does)."""
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return j
    return len(lines)


def _block_commands(lines: list[str], start: int, end: int) -> list[tuple[int, str]]:
    """Each command of a fenced block: a line that is not blank and not a ``#``
    comment, with the lines a trailing ``\\`` continues, as written (1-based line)."""
    out: list[tuple[int, str]] = []
    j = start
    while j < end:
        text = lines[j].strip()
        first = j
        while text.endswith("\\") and j + 1 < end:
            j += 1
            text += "\n" + lines[j].rstrip()
        j += 1
        if text and not text.startswith("#"):
            out.append((first + 1, text))
    return out


# -- the commands as command tools --------------------------------------------------


def tool_name(step: int) -> str:
    """The name of the tool that runs command number ``step`` (1-based)."""
    return f"validate_{step}"


#: What every validation fact reads from the command's result.
_RESULT: Final = {
    "exit_code": "$.exit_code",
    "output_sha256": "$.output_sha256",
    "output_bytes": "$.output_bytes",
    "duration_ms": "$.duration_ms",
    "timed_out": "$.timed_out",
}


def as_command_tools(
    validation: Validation,
    worktree: Path,
    fingerprint: Mapping[str, object],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: Sequence[str] = DEFAULT_ENV,
) -> dict[str, ToolSpec]:
    """The catalog ``command:`` tools that run ``validation`` in ``worktree``, by
    name (:func:`tool_name`), in order. Each runs ``sh -c`` and the command's
    exact text; its fact (``validation_passed`` for the last, else
    ``validation_step_passed``; ``validation_failed`` when it fails) carries the
    exit code, the output's hash and size, the step, the command and where it
    was written, and ``fingerprint``: the worktree's state being validated."""
    commands = validation.commands
    tools: dict[str, ToolSpec] = {}
    for step, command in enumerate(commands, 1):
        fixed: dict[str, Any] = {
            "step": step,
            "steps": len(commands),
            "command": command.text,
            "source": command.where,
            "fingerprint": dict(fingerprint),
        }
        passed = PASSED if step == len(commands) else STEP_PASSED
        tools[tool_name(step)] = ToolSpec(
            description=(
                f"Run validation command {step} of {len(commands)} ({command.where}): "
                f"{command.text[:200]}"
            ),
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
            command=CommandAction(
                argv=(*QUIET_ENV, "sh", "-c", command.text),
                cwd=str(worktree),
                timeout=timeout,
                env=tuple(env),
            ),
            # A validation run may run again (a resumed job's): its fact's key is
            # the same, so it is recorded once.
            idempotent=True,
            records=Records(fact=passed, properties=_RESULT, fixed=fixed),
            records_on_failure=Records(fact=FAILED, properties=_RESULT, fixed=fixed),
        )
    return tools


# -- environment failures ------------------------------------------------------------


@dataclass(frozen=True)
class _Sign:
    """Output that says the environment, not the change, failed."""

    pattern: re.Pattern[str]
    why: str
    exit_code: int | None = None  # only with this exit code


#: The signs, conservative: each says for certain that the command could not run
#: here (docs/coding.md, "Environment failures").
ENV_SIGNS: Final = (
    _Sign(re.compile(r"\bnot found\b"), "a program the command runs was not found", 127),
    _Sign(
        re.compile(r"was compiled against a different Node\.js version|NODE_MODULE_VERSION \d+"),
        "a native Node.js module was built for another Node.js version",
    ),
    _Sign(re.compile(r"\bERR_DLOPEN_FAILED\b"), "a native Node.js module failed to load"),
    _Sign(
        re.compile(
            r"\.(?:so|node|dylib)(?:\.[\w.]+)?: (?:undefined symbol|cannot open shared object "
            r"file|invalid ELF header|wrong ELF class|file too short)"
        ),
        "a native module failed to load (built for another runtime or machine)",
    ),
    _Sign(re.compile(r"version `GLIBC_[\d.]+' not found"), "a binary needs another C library"),
    _Sign(re.compile(r"Exec format error"), "a binary was built for another machine"),
    _Sign(
        re.compile(r"npm (?:ERR!|error) code EBADENGINE|ERR_PNPM_UNSUPPORTED_ENGINE"),
        "a package needs another version of its runtime",
    ),
    _Sign(re.compile(r"UnsupportedClassVersionError"), "Java classes built for a newer Java"),
    _Sign(
        re.compile(
            r"No module named '?(?:pytest|mypy|ruff|pip|setuptools|wheel|tox|nox|black|"
            r"flake8|pylint|coverage|hatchling|poetry|isort|pyright)'?(?![\w.])"
        ),
        "a Python build or test tool is not installed",
    ),
)


def environment_failure(result: Mapping[str, Any]) -> str | None:
    """Why a command's result (agents/tools/command.py's fields) is an
    environment failure, or None: a check that ran and failed, or a success.
    A timeout is never one."""
    exit_code = result.get("exit_code")
    if exit_code == 0 or result.get("timed_out"):
        return None
    output = str(result.get("output_tail") or "")
    for sign in ENV_SIGNS:
        if sign.exit_code is not None and sign.exit_code != exit_code:
            continue
        found = sign.pattern.search(output)
        if found is not None:
            return f"{sign.why} ({found.group(0)!r}, exit {exit_code})"
    return None


# -- one validation run -----------------------------------------------------------------

Verdict = Literal["passed", "failed", "env_failed"]


@dataclass(frozen=True)
class StepRun:
    """One command run: the executor's outcome, what it means, and the fact it
    records (``source: tool``, our key); ``why`` for an environment failure."""

    command: ValidationCommand
    tool: str
    outcome: Outcome
    verdict: Verdict
    fact: InboxEvent | None
    why: str | None = None


@dataclass(frozen=True)
class ValidationRun:
    """A whole validation: ``passed`` (every command), ``failed`` or ``env_failed``
    (at ``steps[-1]``, the first that did not pass: none after it ran), or
    ``none`` (no trusted command: nothing ran, nothing recorded)."""

    verdict: Literal["passed", "failed", "env_failed", "none"]
    steps: tuple[StepRun, ...]
    #: Where the commands ran: shown as ``./`` in the excerpt, so that a person
    #: at a checkpoint reads the repository's paths, not the service's data folder.
    worktree: Path | None = None

    @property
    def facts(self) -> tuple[InboxEvent, ...]:
        """What the run records, in order."""
        return tuple(s.fact for s in self.steps if s.fact is not None)

    @property
    def exit_codes(self) -> tuple[int | None, ...]:
        """Each command's exit code, in order (None: it did not start)."""
        return tuple(_data(s.outcome).get("exit_code") for s in self.steps)

    def excerpt(self, limit: int = 2000) -> str:
        """What a model's next attempt is told of the failure, at most ``limit``
        characters: the command, where it is written, how it ended, the end of
        its output."""
        if self.verdict in ("passed", "none"):
            return ""
        step = self.steps[-1]
        data = _data(step.outcome)
        head = (
            f"validation command {len(self.steps)} ({step.command.where}) `{step.command.text}` "
            + (f"exited with {data.get('exit_code')}" if "exit_code" in data else "did not run")
            + (f": {step.why}" if step.why else "")
        )
        tail = str(data.get("output_tail") or step.outcome.output)
        if self.worktree is not None:
            for root in {str(self.worktree), str(self.worktree.resolve())}:
                tail = tail.replace(root + "/", "./")
        room = max(0, limit - len(head) - 1)
        return (head + "\n" + tail[-room:] if room else head)[:limit]


async def run_validation(
    validation: Validation,
    worktree: Path,
    fingerprint: Mapping[str, object],
    *,
    job_key: str,
    task_id: str,
    attempt: int,
    env: Mapping[str, str] | None = None,
    env_names: Sequence[str] = DEFAULT_ENV,
    timeout: float = DEFAULT_TIMEOUT,
) -> ValidationRun:
    """Run ``validation`` once, in order, in ``worktree``, through the trusted
    executor; stop at the first command that does not pass. ``attempt`` is the
    calls' occurrence: the same job, task and attempt make the same keys, so a
    run repeated (a resumed job) records its facts once. ``env``: the
    environment the allowed names are taken from (None: this process's)."""
    if not validation.commands:
        return ValidationRun("none", ())
    tools = as_command_tools(validation, worktree, fingerprint, timeout=timeout, env=env_names)
    catalog = Catalog("<validation>", {}, {}, tools, {})
    source = os.environ if env is None else env
    # Only the allowed names: a ${VAR} in a command then reads what its shell
    # would have (docs/coding.md, "Validation").
    allowed = {name: source[name] for name in env_names if name in source}
    steps: list[StepRun] = []
    async with httpx2.AsyncClient() as client:
        executor = Executor(catalog, client, allowed)
        for (name, tool), command in zip(tools.items(), validation.commands, strict=True):
            outcome = await executor.run(
                job_key=job_key,
                task_id=task_id,
                name=name,
                arguments="{}",
                granted=tuple(tools),
                occurrence=attempt,
            )
            step = _judged(command, name, tool, outcome, job_key)
            steps.append(step)
            if step.verdict != "passed":
                return ValidationRun(step.verdict, tuple(steps), worktree)
    return ValidationRun("passed", tuple(steps), worktree)


def _judged(
    command: ValidationCommand, name: str, tool: ToolSpec, outcome: Outcome, job_key: str
) -> StepRun:
    """What one outcome means: passed, failed (its ``validation_failed`` fact), or
    an environment failure (the same fact named ``validation_env_failed``, with
    ``reason``; or, for a command that did not start, one made the same way)."""
    if outcome.status == "done":
        return StepRun(command, name, outcome, "passed", outcome.fact)
    data = _data(outcome)
    why = environment_failure(data) if data else _not_run(outcome)
    if why is None:
        return StepRun(command, name, outcome, "failed", outcome.fact)
    fact = outcome.fact
    if fact is not None:
        properties = {**fact.properties, "reason": why}
        fact = fact.model_copy(update={"action": ENV_FAILED, "properties": properties})
    else:  # it did not start: the same fact, made the executor's way
        assert tool.records_on_failure is not None
        fact = InboxEvent(
            key=job_key,
            action=ENV_FAILED,
            properties={**tool.records_on_failure.fixed, "reason": why},
            idempotency_key=outcome.key,
            source="tool",
        )
    return StepRun(command, name, outcome, "env_failed", fact, why)


def _data(outcome: Outcome) -> dict[str, Any]:
    return outcome.data if isinstance(outcome.data, dict) else {}


def _not_run(outcome: Outcome) -> str:
    """Why a command that produced no result did not run (it did not start: no
    ``sh``, no worktree)."""
    try:
        said = orjson.loads(outcome.output)
    except orjson.JSONDecodeError:
        said = {}
    error = said.get("error") if isinstance(said, dict) else None
    return str(error or outcome.output or outcome.status)
