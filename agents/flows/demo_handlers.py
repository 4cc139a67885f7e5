"""The handlers and routers of the example flows (playbooks/flows/, docs/flows.md,
"Handlers and routers"), registered through this package's own entry point
(``[project.entry-points."lemongraph.handlers"]`` in pyproject.toml)."""

from __future__ import annotations

import re
from typing import Any

from agents.flows.handlers import handler, router

__all__ = ["count_run", "review_note", "route_decision", "route_ticket", "split_ids"]


@router("route_ticket")
def route_ticket(view: dict[str, Any]) -> str:
    """classify-ticket: an urgent ticket goes to a person whatever its
    category; else the category is the route."""
    classification = view.get("classification") or {}
    if classification.get("urgent") is True:
        return "urgent"
    return str(classification.get("category") or "other")


@handler("split_ids")
def split_ids(view: dict[str, Any]) -> list[str]:
    """review-orders: the order ids in a text ("A-1, A-2 and A-3"), each once,
    in order."""
    text = str(view.get("order_ids") or "")
    found = re.findall(r"[A-Za-z0-9][A-Za-z0-9\-]*[0-9]", text)
    return list(dict.fromkeys(found))


@handler("count_run")
def count_run(view: dict[str, Any]) -> int:
    """docs/flows.md's review example: one more run."""
    runs = view.get("runs")
    return (runs if isinstance(runs, int) else 0) + 1


@router("route_decision")
def route_decision(view: dict[str, Any]) -> str:
    """The issue's pinned example: act on a decision, unless it is nothing."""
    decision = view.get("decision") or {}
    return "done" if decision.get("action") in (None, "nothing") else "act"


@handler("review_note")
def review_note(view: dict[str, Any]) -> dict[str, Any]:
    """The issue's pinned example: a note, reviewed (its length)."""
    note = view.get("order")
    return {"note": note, "length": len(str(note or ""))}
