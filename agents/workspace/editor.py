"""The editor's tools, confined to the job's worktree (docs/coding.md, "The
editor's tools").

The trusted executor (agents/tools/executor.py) calls :func:`perform` for a
catalog tool of kind ``workspace``: one op (read, write, replace, list,
search) in one worktree. Every path the model gives is relative to the
worktree and checked before anything is read or written: an absolute path, a
``..``, anything under ``.git``, a symbolic link on the path that leads out of
the worktree (or, for a write, any symbolic link at all) is refused with the
reason, and nothing is touched. A write is text (no NUL), at most
:data:`~agents.workspace.ops.MAX_FILE_BYTES`; so is what is read. A search is a
``git grep`` with the pattern after ``-e`` and literal pathspecs: an argv,
never a shell. The model never runs git.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agents.errors import AgentsError
from agents.workspace.fingerprint import fingerprint
from agents.workspace.gitrun import GitError, git, git_argv, git_env
from agents.workspace.ops import MAX_FILE_BYTES, MAX_PATH_CHARS, OUTPUT_CHARS

__all__ = ["MAX_LIST_ENTRIES", "MAX_MATCHES", "Edited", "perform"]

#: The most entries a listing returns.
MAX_LIST_ENTRIES = 500
#: The most matches a search returns.
MAX_MATCHES = 100
#: How much of a matching line a search returns.
MATCH_CHARS = 200
#: Seconds a search may take.
SEARCH_TIMEOUT = 20.0


class _Refused(AgentsError):
    """The op is not allowed: nothing was done."""


class _Failed(AgentsError):
    """The op was allowed and did not work (no such file, ...)."""


@dataclass(frozen=True)
class Edited:
    """How an op ended: ``done`` with its result, or ``refused``/``failed`` with why."""

    status: Literal["done", "refused", "failed"]
    why: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def perform(root: Path, op: str, args: dict[str, Any]) -> Edited:
    """Do ``op`` with the model's (schema-checked) ``args`` in the worktree at
    ``root``."""
    real = Path(os.path.realpath(root))
    try:
        return Edited("done", data=_OPS[op](real, args))
    except _Refused as exc:
        return Edited("refused", str(exc))
    except (_Failed, GitError) as exc:
        return Edited("failed", str(exc))
    except OSError as exc:
        return Edited(
            "failed", f"{exc.strerror or type(exc).__name__}: {_shown(real, exc.filename)}"
        )


# -- where: a path the model gives, checked --------------------------------------------------


def _argument(args: dict[str, Any], name: str, default: Any = None) -> Any:
    value = args.get(name, default)
    if value is None:
        raise _Refused(f"{name} is missing")
    return value


def _text_argument(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = _argument(args, name, default)
    if not isinstance(value, str):
        raise _Refused(f"{name} must be text")
    return value


def _parts(given: str) -> list[str]:
    """The components of a path the model gave, refused when it is absolute,
    goes up, or names git's own files."""
    if not given or len(given) > MAX_PATH_CHARS or "\0" in given:
        raise _Refused(f"{given[:80]!r} is not a path")
    if given.startswith("/"):
        raise _Refused(f"{given!r} is absolute: a path is relative to the worktree")
    parts = [part for part in given.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _Refused(f"{given!r} goes up ('..'): a path stays inside the worktree")
    if any(part.lower() == ".git" for part in parts):
        raise _Refused(f"{given!r} is in .git: git's own files are not the editor's")
    return parts


def _where(root: Path, given: str, *, writing: bool) -> Path:
    """The file ``given`` names in the worktree at ``root`` (resolved), or
    :class:`_Refused`: a link that leads out of the worktree or into its
    ``.git`` is never followed, and a write follows no link at all."""
    parts = _parts(given)
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            break
        if not stat.S_ISLNK(st.st_mode):
            continue
        shown = "/".join(parts[: i + 1])
        if writing:
            raise _Refused(f"{shown} is a symbolic link: the editor does not write through one")
        _inside(root, Path(os.path.realpath(here)), f"{shown} is a symbolic link that leads")
    resolved = Path(os.path.realpath(root.joinpath(*parts)))
    _inside(root, resolved, f"{given!r} leads")
    return resolved


def _inside(root: Path, target: Path, what: str) -> None:
    if not target.is_relative_to(root):
        raise _Refused(f"{what} outside the worktree")
    if any(part.lower() == ".git" for part in target.relative_to(root).parts):
        raise _Refused(f"{what} into .git: git's own files are not the editor's")


def _shown(root: Path, path: Any) -> str:
    """A path an error names, relative to the worktree (the model is not
    told where the service keeps its data)."""
    if not isinstance(path, str | os.PathLike):
        return ""
    found = Path(path)
    return _relative(root, found) if found.is_relative_to(root) else found.name


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() or "."


# -- reading and writing a file ---------------------------------------------------------------


def _read_text(root: Path, path: Path) -> str:
    """A file's text, whole: refused when it is too big, binary or not UTF-8."""
    shown = _relative(root, path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _Failed(f"{shown}: no such file") from None
    if stat.S_ISDIR(st.st_mode):
        raise _Failed(f"{shown} is a folder: list it")
    if not stat.S_ISREG(st.st_mode):
        raise _Refused(f"{shown} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise _Refused(f"{shown} is {st.st_size:,} bytes, over the editor's {MAX_FILE_BYTES:,}")
    raw = path.read_bytes()
    if b"\0" in raw:
        raise _Refused(f"{shown} is binary: the editor reads and writes text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"{shown} is not UTF-8 text") from None


def _store(root: Path, path: Path, text: str) -> dict[str, Any]:
    """Write ``text`` to ``path`` (no link followed, folders made); what changed."""
    data = text.encode("utf-8")
    shown = _relative(root, path)
    if b"\0" in data:
        raise _Refused(f"{shown}: the content is binary (a NUL): the editor writes text")
    if len(data) > MAX_FILE_BYTES:
        raise _Refused(f"{shown}: {len(data):,} bytes, over the editor's {MAX_FILE_BYTES:,}")
    if path.is_dir():
        raise _Failed(f"{shown} is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise _Failed(f"{shown}: a part of the path is a file, not a folder") from None
    before = _size(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    now = fingerprint(root)
    return {
        "path": shown,
        "bytes": len(data),
        "created": before is None,
        "bytes_before": before,
        "diff_sha256": now["diff_sha256"],
        "untracked_sha256": now["untracked_sha256"],
    }


def _size(path: Path) -> int | None:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return None


# -- the ops ----------------------------------------------------------------------------------


def _read(root: Path, args: dict[str, Any]) -> dict[str, Any]:
    """A file's lines (all, or ``start_line``..``end_line``), at most
    :data:`OUTPUT_CHARS` characters of them: ``truncated`` and ``next_line``
    say where to go on. A first line longer than that is cut (``line_cut``),
    so that reading on always moves on."""
    path = _where(root, _text_argument(args, "path"), writing=False)
    lines = _read_text(root, path).splitlines(keepends=True)
    start = int(args.get("start_line") or 1)
    end = min(int(args.get("end_line") or len(lines)), len(lines))
    if start > max(len(lines), 1):
        raise _Failed(f"{_relative(root, path)} has {len(lines)} lines: none from {start}")
    taken: list[str] = []
    size = 0
    line = start
    while line <= end and size + len(lines[line - 1]) <= OUTPUT_CHARS:
        taken.append(lines[line - 1])
        size += len(lines[line - 1])
        line += 1
    cut = not taken and line <= end
    if cut:
        taken, line = [lines[line - 1][:OUTPUT_CHARS]], line + 1
    return {
        "path": _relative(root, path),
        "start_line": start,
        "end_line": line - 1,
        "total_lines": len(lines),
        "text": "".join(taken),
        "truncated": line <= end,
        "next_line": line if line <= end else None,
        "line_cut": cut,
    }


def _write(root: Path, args: dict[str, Any]) -> dict[str, Any]:
    """Write a whole file (made, with its folders, when it is not there)."""
    path = _where(root, _text_argument(args, "path"), writing=True)
    return _store(root, path, _text_argument(args, "content"))


def _replace(root: Path, args: dict[str, Any]) -> dict[str, Any]:
    """Replace the one occurrence of ``old`` with ``new``; refused when ``old``
    is not there, or is there more than once (say more of the text around it)."""
    path = _where(root, _text_argument(args, "path"), writing=True)
    old, new = _text_argument(args, "old"), _text_argument(args, "new")
    if not old:
        raise _Refused("old is empty: say the text to replace")
    text = _read_text(root, path)
    first = text.find(old)
    shown = _relative(root, path)
    if first < 0:
        raise _Refused(f"{shown}: the text to replace is not in the file: nothing changed")
    second = text.find(old, first + 1)
    if second >= 0:
        count = max(text.count(old), 2)
        at = sorted({text.count("\n", 0, where) + 1 for where in (first, second)})
        lines = ("lines " if len(at) > 1 else "line ") + " and ".join(str(n) for n in at)
        raise _Refused(
            f"{shown}: the text to replace is there {count} times (first at {lines}): "
            "give more of the text around it, so that it is there once; nothing changed"
        )
    done = _store(root, path, text[:first] + new + text[first + len(old) :])
    done["line"] = text.count("\n", 0, first) + 1
    return done


def _list(root: Path, args: dict[str, Any]) -> dict[str, Any]:
    """A folder's entries (``.git`` left out), or with ``recursive`` the files
    under it that git sees (tracked, and untracked not ignored)."""
    given = _text_argument(args, "path", ".")
    path = root if given in (".", "./") else _where(root, given, writing=False)
    shown = _relative(root, path)
    if not path.is_dir():
        raise _Failed(f"{shown}: no such folder")
    entries = _files_under(root, path) if args.get("recursive") else _entries(path)
    taken: list[str] = []
    size = 0
    for entry in entries:
        size += len(entry) + 4
        if len(taken) >= MAX_LIST_ENTRIES or size > OUTPUT_CHARS:
            break
        taken.append(entry)
    return {"path": shown, "entries": taken, "truncated": len(taken) < len(entries)}


def _entries(path: Path) -> list[str]:
    """A folder's names, sorted: a folder's with ``/``, a link's with ``@``."""
    out = []
    with os.scandir(path) as found:
        for entry in found:
            if entry.name.lower() == ".git":
                continue
            mark = "@" if entry.is_symlink() else "/" if entry.is_dir() else ""
            out.append(entry.name + mark)
    return sorted(out)


def _files_under(root: Path, path: Path) -> list[str]:
    args = ["--literal-pathspecs", "ls-files", "-z", "--cached", "--others"]
    out = git([*args, "--exclude-standard", "--", _relative(root, path)], root)
    names = {n for n in out.decode("utf-8", "replace").split("\0") if n}
    return sorted(n for n in names if os.path.lexists(root / n))


def _search(root: Path, args: dict[str, Any]) -> dict[str, Any]:
    """Lines matching ``pattern`` (literal text, or with ``regex`` an extended
    regular expression) in the text files git sees under ``path``: at most
    :data:`MAX_MATCHES`, each cut at :data:`MATCH_CHARS` characters."""
    pattern = _text_argument(args, "pattern")
    given = _text_argument(args, "path", ".")
    under = "." if given in (".", "./") else _relative(root, _where(root, given, writing=False))
    kind = "-E" if args.get("regex") else "-F"
    argv = git_argv(
        [
            "--literal-pathspecs", "grep", "--untracked", "--no-color", "-I", "-n", "-z",
            "--full-name", kind, "-e", pattern, "--", under,
        ]
    )  # fmt: skip
    matches, more, said = _grep(root, argv)
    if said:
        raise _Failed(f"the search did not run: {said}")
    return {"pattern": pattern, "path": under, "matches": matches, "truncated": more}


def _grep(root: Path, argv: list[str]) -> tuple[list[dict[str, Any]], bool, str]:
    """Run ``git grep``; (matches, whether there were more, what it said on
    an error). Reading stops at the bound, and the search with it; after
    :data:`SEARCH_TIMEOUT` seconds the search is stopped."""
    matches: list[dict[str, Any]] = []
    size = 0
    more = False
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen(  # noqa: S603 - an argv of ours; the pattern after -e
            argv, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
            env=git_env(),
        ) as proc,
    ):  # fmt: skip
        stopped = threading.Event()
        timer = threading.Timer(SEARCH_TIMEOUT, _stop, (proc, stopped))
        timer.start()
        try:
            more = _read_matches(proc, matches, size)
            if more:
                _stop(proc, stopped)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                _stop(proc, stopped)
                proc.wait()
        errors.seek(0)
        said = errors.read().decode("utf-8", "replace").strip()
    failed = proc.returncode not in (0, 1) and not stopped.is_set()
    return matches, more or stopped.is_set(), said if failed else ""


def _stop(proc: subprocess.Popen[bytes], stopped: threading.Event) -> None:
    stopped.set()
    proc.kill()


def _read_matches(proc: subprocess.Popen[bytes], matches: list[dict[str, Any]], size: int) -> bool:
    """Read ``git grep -z -n`` lines into ``matches`` up to the bounds;
    whether there were more."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        name, _, rest = raw.partition(b"\0")
        number, _, text = rest.partition(b"\0")
        line = text.rstrip(b"\n").decode("utf-8", "replace")[:MATCH_CHARS]
        size += len(name) + len(line) + 24
        if len(matches) >= MAX_MATCHES or size > OUTPUT_CHARS:
            return True
        path = name.decode("utf-8", "replace")
        matches.append({"path": path, "line": int(number or 0), "text": line})
    return False


_OPS: dict[str, Callable[[Path, dict[str, Any]], dict[str, Any]]] = {
    "read": _read,
    "write": _write,
    "replace": _replace,
    "list": _list,
    "search": _search,
}
