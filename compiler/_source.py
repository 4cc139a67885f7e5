"""Structured text (YAML or JSON) → Python data, remembering where every value
was written so that validation can point at a line and a column."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic_core import ErrorDetails

from compiler._errors import LemongraphError

__all__ = ["Located", "Position", "SourceError", "did_you_mean", "field_problem", "load_located"]

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Position:
    """1-based line and column of a value in its file, and how it was written."""

    line: int
    column: int
    style: str | None = None  # YAML scalar style: None (plain), '"', "'", "|", ">"


class SourceError(LemongraphError):
    """The text is not well-formed YAML/JSON, or repeats a mapping key."""

    code = "invalid_source"

    def __init__(self, source: str, reason: str, line: int | None, column: int | None) -> None:
        self.source = source
        self.reason = reason
        self.line = line
        self.column = column
        where = f"{source}:{line}:{column}" if line is not None else source
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True, slots=True)
class Located:
    """Parsed data, the text it came from, and the position of every value by path."""

    data: Any
    text: str
    positions: dict[Path, Position]

    def subtree(self, path: Path) -> Located:
        """The value at ``path`` with positions relative to it (same text)."""
        n = len(path)
        positions = {k[n:]: v for k, v in self.positions.items() if k[:n] == tuple(path)}
        data = self.data
        for part in path:
            data = data[part]
        return Located(data, self.text, positions)

    def position(self, path: Path) -> Position | None:
        """Where ``path`` was written; the nearest enclosing value if not itself."""
        for end in range(len(path), -1, -1):
            found = self.positions.get(tuple(path[:end]))
            if found is not None:
                return found
        return None


def load_located(text: str, source: str) -> Located:
    """Parse YAML (JSON is a subset) and record every value's position."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = " ".join(p for p in (exc.context, exc.problem) if p) or "not valid YAML"
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        raise SourceError(source, reason, line, column) from None
    except yaml.YAMLError as exc:
        raise SourceError(source, f"not valid YAML: {exc}", None, None) from None
    if node is None:
        raise SourceError(source, "the file is empty", 1, 1)
    positions: dict[Path, Position] = {}
    data = _Builder(source, positions).build(node, ())
    return Located(data, text, positions)


class _Builder:
    """Walks the composed node tree, constructing values and noting positions."""

    def __init__(self, source: str, positions: dict[Path, Position]) -> None:
        self.source = source
        self.positions = positions
        self.constructor = yaml.constructor.SafeConstructor()

    def fail(self, reason: str, node: yaml.Node) -> SourceError:
        mark = node.start_mark
        return SourceError(self.source, reason, mark.line + 1, mark.column + 1)

    def build(self, node: yaml.Node, path: Path) -> Any:
        mark = node.start_mark
        style = getattr(node, "style", None)
        self.positions[path] = Position(mark.line + 1, mark.column + 1, style)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) and key is not None:
                    raise self.fail("a mapping key must be a plain value", key_node)
                if key in out:
                    raise self.fail(f"the key {key!r} is given twice", key_node)
                out[key] = self.build(value_node, (*path, str(key)))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.constructor.construct_object(node, deep=True)


#: Fields people write for one we have (other tools' words, and guesses): the
#: unknown field on the left gets "did you mean" the known one on the right,
#: when the known one is a field there.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "after": ("needs",),
    "depends_on": ("needs",),
    "dependencies": ("needs",),
    "requires": ("needs",),
    "prerequisites": ("needs",),
    "when": ("condition", "at"),
    "time": ("at",),
    "expected": ("expect",),
    "expectation": ("expect",),
    "props": ("properties",),
    "done_when": ("condition",),
    "until": ("condition",),
    "name": ("id", "instructions"),
    "title": ("name",),
    "description": ("instructions", "name"),
    "prompt": ("instructions",),
    "steps": ("milestones",),
    "tasks": ("milestones",),
    "goal": ("goals",),
    "deadline": ("due",),
    "tools": ("integrations",),
    "channels": ("integrations",),
    "complete": ("complete_when", "done"),
    "completed": ("done",),
    "finished": ("done",),
    "succeeded": ("done",),
    "passed": ("done",),
    "timed_out": ("knocked",),
    "failed": ("knocked",),
    "skipped": ("dropped",),
    "cancelled": ("dropped",),
    "blocked": ("unreachable",),
    "waiting": ("pending",),
}


def did_you_mean(word: str, known: Collection[str]) -> str | None:
    """The known field ``word`` most likely meant: a synonym's (``after`` →
    ``needs``), else the closest spelling (difflib), else None."""
    import difflib

    for candidate in SYNONYMS.get(word.lower(), ()):
        if candidate in known:
            return candidate
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.7)
    return close[0] if close else None


def field_problem(err: ErrorDetails, document: str, known: Collection[str] = ()) -> str:
    """One pydantic error as ``dotted.path: what``, in the words a file's author
    reads (``document`` names the whole when the path is empty). ``known``: the
    fields allowed where the error is, for "did you mean" on an unknown one."""
    loc = tuple(err["loc"])
    dotted = ".".join(str(p) for p in loc) or document
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = f"unknown field {loc[-1]!r}"
        near = did_you_mean(str(loc[-1]), known)
        if near is not None:
            message += f" (did you mean {near!r}?)"
    elif err["type"] == "missing":
        message = "this field is required"
    return f"{dotted}: {message}"
