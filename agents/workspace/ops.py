"""The editor's operations as the catalog names them (docs/coding.md, "The
editor's tools"): ``workspace: {op: read}`` and the schema each op implies.

The catalog (agents/catalog.py) imports this module and nothing else of the
coding package: what an op takes and its bounds are data; the editor
(agents/workspace/editor.py) does the work.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_PATH_CHARS",
    "OP_PARAMETERS",
    "OUTPUT_CHARS",
    "Op",
    "WorkspaceAction",
    "implied_fields",
    "parameter_problems",
]

Op = Literal["read", "write", "replace", "list", "search"]

#: The largest file the editor reads, replaces in or writes (bytes): a bigger
#: one is refused (docs/coding.md, "The editor's tools").
MAX_FILE_BYTES = 1 << 20
#: The longest path the editor takes.
MAX_PATH_CHARS = 1024
#: The most of a result (a file's text, a listing, matches) one call returns,
#: in characters: the rest is marked ``truncated`` and read by range.
OUTPUT_CHARS = 12_000

_PATH: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS}
_LINE: dict[str, Any] = {"type": "integer", "minimum": 1}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


#: The parameters each op implies when a tool gives none (docs/coding.md, "The
#: editor's tools").
OP_PARAMETERS: dict[str, dict[str, Any]] = {
    "read": _object({"path": _PATH, "start_line": _LINE, "end_line": _LINE}, ["path"]),
    "write": _object(
        {"path": _PATH, "content": {"type": "string", "maxLength": MAX_FILE_BYTES}},
        ["path", "content"],
    ),
    "replace": _object(
        {
            "path": _PATH,
            "old": {"type": "string", "minLength": 1, "maxLength": MAX_FILE_BYTES},
            "new": {"type": "string", "maxLength": MAX_FILE_BYTES},
        },
        ["path", "old", "new"],
    ),
    "list": _object({"path": _PATH, "recursive": {"type": "boolean"}}, []),
    "search": _object(
        {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 500},
            "regex": {"type": "boolean"},
            "path": _PATH,
        },
        ["pattern"],
    ),
}
#: The ops that change nothing (``writes: false`` unless the tool says).
_READ_ONLY = ("read", "list", "search")
#: The ops that may run twice with the same arguments to the same end
#: (``idempotent: true`` unless the tool says): a whole-file write is one.
_IDEMPOTENT = ("read", "list", "search", "write")


class WorkspaceAction(BaseModel):
    """A tool that works in the job's worktree (docs/coding.md, "The editor's tools")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Op


def implied_fields(data: Any) -> Any:
    """A tool's raw catalog entry with what its ``workspace`` op implies filled
    in where the tool says nothing: ``parameters``, ``writes``, ``idempotent``."""
    if not isinstance(data, dict):
        return data
    action = data.get("workspace")
    op = action.get("op") if isinstance(action, dict) else None
    if op not in OP_PARAMETERS:
        return data
    filled = dict(data)
    filled.setdefault("parameters", OP_PARAMETERS[op])
    filled.setdefault("writes", op not in _READ_ONLY)
    filled.setdefault("idempotent", op in _IDEMPOTENT)
    return filled


def parameter_problems(op: str, parameters: dict[str, Any]) -> list[str]:
    """What is wrong with a workspace tool's own ``parameters``: it must take
    (and require) what its op requires, and nothing the op does not read."""
    implied = OP_PARAMETERS[op]
    known = set(implied["properties"])
    given = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    problems = [
        f"the op {op} needs {name!r}: name it in properties and required"
        for name in implied["required"]
        if name not in given or name not in required
    ]
    problems += [
        f"{name!r} is not an argument of the op {op} ({', '.join(sorted(known))})"
        for name in given
        if name not in known
    ]
    return problems
