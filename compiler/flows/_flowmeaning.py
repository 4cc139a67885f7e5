"""What a value means to a flow (docs/flows.md, "Edges" and "Nodes"): the
route a ``when`` value chooses, and whether an approval's answer is yes."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["APPROVAL_YES", "approval_says_yes", "route_of"]

#: An approval's answers that mean yes (compared trimmed and case-folded).
APPROVAL_YES = frozenset({"yes", "y", "approve", "ok", "true"})


def approval_says_yes(answer: Any) -> bool:
    """``yes``, ``y``, ``approve``, ``ok``, ``true`` (any case, trimmed), the
    boolean ``true`` or ``{approved: true}``; anything else is no."""
    if answer is True:
        return True
    if isinstance(answer, str):
        return answer.strip().casefold() in APPROVAL_YES
    if isinstance(answer, dict):
        return answer.get("approved") is True
    return False


def route_of(value: Any) -> str:
    """The route name a ``when`` value chooses (docs/flows.md, "Edges")."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return "nonempty" if value else "empty"
    return json.dumps(value)
