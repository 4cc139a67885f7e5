"""The error tree of the pure core.

    LemongraphError                 root of everything this package raises on bad input
    ├── SourceError                 a YAML/JSON document that cannot be read (with position)
    ├── ConditionError              a condition that does not parse or fails a static check
    ├── PlaybookError               a playbook that fails validation (one or more problems)
    ├── ScenarioError               a scenario file that cannot be used
    └── GraphMismatch               a job handed to the graph of another playbook version

Every error carries data (``code``, and where it applies ``line``/``column``) so
that callers never parse a message to decide what to do.
"""

from __future__ import annotations

__all__ = ["ConditionError", "GraphMismatch", "LemongraphError", "caret_excerpt"]


class LemongraphError(Exception):
    """Root of the errors the core raises for bad input. ``code`` is stable."""

    code: str = "invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConditionError(LemongraphError):
    """A condition that is not valid.

    ``line`` and ``column`` are 1-based and point into ``text``; ``reason`` is the
    short message without the excerpt; ``str(error)`` shows the text with a caret
    under the problem.
    """

    code = "invalid_condition"

    def __init__(self, reason: str, text: str, line: int, column: int) -> None:
        self.reason = reason
        self.text = text
        self.line = line
        self.column = column
        super().__init__(
            f"line {line}, column {column}: {reason}\n{caret_excerpt(text, line, column)}"
        )


class GraphMismatch(LemongraphError, ValueError):
    """``JobGraph.next`` was given a job pinned to another playbook version than
    the graph runs: the caller chose the wrong graph (``job_playbook`` and
    ``graph_playbook`` say which, as ``(key, version)``)."""

    code = "playbook_mismatch"

    def __init__(
        self, job: str, job_playbook: tuple[str, int], graph_playbook: tuple[str, int]
    ) -> None:
        self.job = job
        self.job_playbook = job_playbook
        self.graph_playbook = graph_playbook
        super().__init__(
            f"job {job!r} pinned playbook {job_playbook[0]} v{job_playbook[1]}; "
            f"this graph runs {graph_playbook[0]} v{graph_playbook[1]}"
        )


def caret_excerpt(text: str, line: int, column: int, indent: str = "  ") -> str:
    """The line ``line`` of ``text`` with a caret under ``column`` (both 1-based)."""
    lines = text.splitlines() or [""]
    row = lines[min(max(line, 1), len(lines)) - 1]
    # Keep tabs as tabs so the caret lines up in a terminal.
    pad = "".join(ch if ch == "\t" else " " for ch in row[: max(column - 1, 0)])
    return f"{indent}{row}\n{indent}{pad}^"
