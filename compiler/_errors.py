"""The error tree of the pure core.

    LemongraphError                 root of everything this package raises on bad input
    ├── ConditionError              a condition that does not parse or fails a static check
    ├── PlaybookError               a playbook that fails validation (one or more problems)
    └── ScenarioError               a scenario file that cannot be used

Every error carries data (``code``, and where it applies ``line``/``column``) so
that callers never parse a message to decide what to do (STYLE §6).
"""

from __future__ import annotations

__all__ = ["ConditionError", "LemongraphError", "caret_excerpt"]


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


def caret_excerpt(text: str, line: int, column: int, indent: str = "  ") -> str:
    """The line ``line`` of ``text`` with a caret under ``column`` (both 1-based)."""
    lines = text.splitlines() or [""]
    row = lines[min(max(line, 1), len(lines)) - 1]
    # Keep tabs as tabs so the caret lines up in a terminal.
    pad = "".join(ch if ch == "\t" else " " for ch in row[: max(column - 1, 0)])
    return f"{indent}{row}\n{indent}{pad}^"
