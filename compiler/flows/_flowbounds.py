"""The bounds of a flow run (docs/flows.md, "Bounds"): how many items a fan-out
spreads over, how large a node's output may be, how many ``tools`` results a
run keeps for reuse. Pure: sizes are measured on values, never on a clock.

A result over the output bound is not kept: ``bound_input`` turns it into the
failure ``output_too_large`` of the call, before the runtime records or steps
it, so neither the run's state nor its checkpoint ever holds it; the node then
fails as any failing call does (``retry``, then ``onError``).
"""

from __future__ import annotations

import json
from typing import Any

from compiler.flows._flowvalues import FlowInput, HandlerResult, ModelReply, ToolResult

__all__ = [
    "FANOUT_MAX_ITEMS",
    "OUTPUT_MAX_BYTES",
    "TOOL_RESULTS_KEPT",
    "bound_input",
    "fanout_too_large",
    "output_too_large",
    "size_of",
]

#: The most items one fan-out spreads over: a longer list fails the fan-out
#: node (``fanout_too_large``) before any copy runs or any call is made.
FANOUT_MAX_ITEMS = 10_000
#: The most bytes (UTF-8, as JSON; a string as it stands) a node's output, a
#: model's answer or a call's result may have: over it, ``output_too_large``.
OUTPUT_MAX_BYTES = 256 * 1024
#: The most ``tools`` results a run keeps for reuse (the latest): a call whose
#: result was let go is made again on a loop back, under the same id.
TOOL_RESULTS_KEPT = 64


def size_of(value: Any) -> int:
    """Bytes of ``value``: a string's UTF-8, anything else's JSON."""
    if isinstance(value, str):
        return len(value.encode("utf-8", errors="replace"))
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode("utf-8", errors="replace"))


def _words(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    return f"{size // 1024} KB" if size >= 1024 else f"{size} bytes"


def output_too_large(value: Any, what: str = "the output") -> str | None:
    """``output_too_large: ...`` when ``value`` is over ``OUTPUT_MAX_BYTES``."""
    size = size_of(value)
    if size <= OUTPUT_MAX_BYTES:
        return None
    return (
        f"output_too_large: {what} is {_words(size)}, over the {_words(OUTPUT_MAX_BYTES)} "
        "a flow node's output may be"
    )


def fanout_too_large(count: int) -> str | None:
    """``fanout_too_large: ...`` when a fan-out's list has too many items."""
    if count <= FANOUT_MAX_ITEMS:
        return None
    return (
        f"fanout_too_large: the list has {count} items, over the {FANOUT_MAX_ITEMS} "
        "a fan-out spreads over"
    )


def bound_input(given: FlowInput) -> FlowInput:
    """``given``, or, when the answer or result it carries is over the output
    bound, the same call failed with ``output_too_large`` (what the runtime
    records and steps instead: the value itself is never kept)."""
    if isinstance(given, ModelReply) and given.error is None:
        problem = output_too_large(given.text, "the answer")
        if problem is not None:
            return ModelReply(call_id=given.call_id, text="", error=problem)
    elif isinstance(given, ToolResult | HandlerResult) and given.ok:
        problem = output_too_large(given.result, "the result")
        if problem is not None:
            return type(given)(call_id=given.call_id, ok=False, error=problem)
    return given
