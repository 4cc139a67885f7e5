"""The coding flow's optional research step (docs/coding.md, "Research"):
trusted code around the ``research`` node of ``coding-change``, taken only when
the operator asked for it (``lemongraph code run --research``, the job's input
``research: true``), never on a model's word.

In it the model may only read: a call of a tool that writes (any tool whose
catalog entry is not ``writes: false``) is refused here, before any tool runs,
and journaled (a ``journal.tool_call`` with the outcome ``refused``), and the
model is told why. What the model ends with, its findings and the files it
names, are its own notes: bounded, shown to the edit step as a claim, never a
fact (nothing here records one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import orjson
from topics import JournalToolCall

from agents.flows.handlers import HandlerContext, handler

__all__ = ["MAX_FILES", "MAX_FINDINGS", "coding_research", "coding_research_calls"]

#: The bounds of the notes the edit step is shown (docs/coding.md, "Research"):
#: the findings and the files kept, in the order the model gave them; each
#: finding's and path's length is bounded by the node's schema.
MAX_FINDINGS: Final = 20
MAX_FILES: Final = 50
#: The agent name a flow's own calls are journaled under (agents/flows/executor.py).
_FLOW_AGENT: Final = "flow"


def _read_only(context: HandlerContext, name: Any) -> bool:
    """Whether ``name`` is a catalog tool that does not write (``writes: false``:
    a workspace ``read``, ``list`` or ``search``, docs/coding.md, "The editor's
    tools")."""
    catalog = getattr(context.tools, "catalog", None)
    spec = catalog.tools.get(name) if catalog is not None and isinstance(name, str) else None
    return spec is not None and spec.writes is False


async def _refuse(context: HandlerContext, call: dict[str, Any], why: str) -> None:
    """The refused call on the journal, as the trusted executor journals one."""
    if context.publish is None or context.job_key is None:
        return
    record = JournalToolCall(
        job_key=context.job_key, run_id=context.run_id, agent=_FLOW_AGENT,
        at=datetime.now(UTC).isoformat().replace("+00:00", "Z"), tool=str(call.get("name")),
        arguments=orjson.dumps(call.get("args"), option=orjson.OPT_SORT_KEYS).decode()[:2000],
        outcome="refused", result=why, latency_ms=0, flow=context.flow, node=context.node,
    )  # fmt: skip
    await context.publish("journal", context.job_key, record)


def _strings(value: Any, most: int) -> list[str]:
    return [str(v) for v in value[:most]] if isinstance(value, list) else []


@handler("coding_research", context=True)
async def coding_research(view: dict[str, Any], context: HandlerContext) -> dict[str, Any]:
    """The model's research answer, checked: the calls it may make (the tools
    that only read), those refused (a tool that writes: journaled, and said to
    the model), whether it asked for any (``asked``: another round), and its
    findings and files, bounded."""
    said = view.get("research_out") or {}
    given_calls = said.get("calls")
    calls: list[Any] = given_calls if isinstance(given_calls, list) else []
    allowed: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for call in calls:
        given = call if isinstance(call, dict) else {}
        if _read_only(context, given.get("name")):
            allowed.append(given)
            continue
        why = (
            f"refused: the research step only reads: {given.get('name')!r} is not a tool "
            "that only reads (read_file, list_files, search_files); nothing was changed"
        )
        await _refuse(context, given, why)
        refused.append({"id": given.get("id"), "name": given.get("name"), "error": why})
    return {
        "asked": bool(calls),
        "calls": allowed,
        "refused": refused,
        "findings": _strings(said.get("findings"), MAX_FINDINGS),
        "files": _strings(said.get("files"), MAX_FILES),
    }


@handler("coding_research_calls")
def coding_research_calls(view: dict[str, Any]) -> list[Any]:
    """The research calls that may run (only reads), as the list the
    ``research_tools`` node reads."""
    calls = (view.get("notes") or {}).get("calls")
    return list(calls) if isinstance(calls, list) else []
