"""One call of an ``mcp`` tool, and what its answer comes to (docs/agents.md,
"MCP servers").

The executor checks the call (granted, the arguments fit the schema) and hands
it here; :func:`run_mcp` makes it through the supervisor (agents/tools/mcp.py)
with our derived idempotency key in the request's ``_meta``, and maps the
answer onto the same :class:`Outcome` an HTTP call gives:

- an MCP error result (``isError``) is ``failed``: it records nothing, or the
  tool's ``records_on_failure``;
- a result is ``done`` (when the tool's ``success:`` rule, if it has one,
  passes); ``records`` paths read its structured content, or else its text
  parsed as JSON (text that is not JSON is ``$``);
- no answer (the server died mid-call, the connection broke, a timeout) is
  ``failed`` for an idempotent tool and ``outcome_unknown`` for any other: a
  writing tool cut short may have done its work.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import orjson
from mcp_types import CallToolResult, TextContent
from topics import InboxEvent

from agents.catalog import Records, ToolSpec
from agents.tools.mcp import McpServers
from agents.tools.outcome import Outcome, tell
from agents.tools.success import Verdict, judge

__all__ = ["Settling", "result_data", "run_mcp"]


class Settling(Protocol):
    """What of the executor (agents/tools/executor.py) an mcp call needs: the
    supervisor, the answer bound, and the rules every kind shares for a fact and
    for an answer that never came."""

    mcp: McpServers | None
    max_response: int

    def _fact(
        self, records: Records | None, job_key: str, key: str, data: Any
    ) -> tuple[InboxEvent | None, str | None]: ...

    def _unanswered(
        self,
        tool: ToolSpec,
        key: str,
        url: str,
        seconds: float,
        reason: str,
        http_status: int | None = None,
    ) -> Outcome: ...


async def run_mcp(
    executor: Settling, tool: ToolSpec, *, name: str, args: Any, key: str, job_key: str
) -> Outcome:
    """Call mcp tool ``name`` (checked by the executor) and say what came of it."""
    servers = executor.mcp
    if servers is None:
        return Outcome("refused", tell(False, "refused: no MCP server is connected here"), key)
    shown = servers.where(name)
    started = time.monotonic()
    answer = await servers.call(name, args, key)
    seconds = time.monotonic() - started
    if answer.refused is not None:
        return Outcome("refused", tell(False, answer.refused), key, url=shown)
    if answer.unsent is not None or answer.error is not None:
        # Not run: not sent, or the server refused the request itself.
        why = answer.unsent or answer.error
        return Outcome("failed", tell(False, why), key, url=shown, seconds=seconds)
    if answer.lost is not None or answer.result is None:
        return executor._unanswered(tool, key, shown, seconds, answer.lost or "no answer")
    result = answer.result
    data = result_data(result)
    size = len(orjson.dumps(data, default=str))
    if size > executor.max_response:
        why = (
            f"the answer is {size:,} bytes, over LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES "
            f"({executor.max_response:,}): not read"
        )
        return executor._unanswered(tool, key, shown, seconds, why)
    if result.is_error:
        return _failed(executor, tool, key, job_key, data, shown, seconds)
    if tool.success is not None:
        # The tool says what its answer must say (docs/agents.md, "What success is").
        judged = judge(tool.success, orjson.dumps(data, default=str))
        if judged.verdict is Verdict.FAILED:
            return _failed(executor, tool, key, job_key, data, shown, seconds, judged.why)
        if judged.verdict is Verdict.UNSAID:
            return executor._unanswered(tool, key, shown, seconds, judged.why)
    fact, oversize = executor._fact(tool.records, job_key, key, data)
    told = tell(True, oversize or data)
    return Outcome("done", told, key, fact=fact, url=shown, seconds=seconds, data=data)


def result_data(result: CallToolResult) -> Any:
    """What a result's ``records`` paths read: its structured content, else its
    text (its text blocks, joined) parsed as JSON, else that text."""
    if result.structured_content is not None:
        return result.structured_content
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _failed(
    executor: Settling,
    tool: ToolSpec,
    key: str,
    job_key: str,
    data: Any,
    shown: str,
    seconds: float,
    why: str | None = None,
) -> Outcome:
    """The server said the call failed: what ``records_on_failure`` records, if anything."""
    fact, oversize = executor._fact(tool.records_on_failure, job_key, key, data)
    detail = f"{why}: {orjson.dumps(data, default=str).decode()}" if why else data
    told = tell(False, oversize or detail)
    return Outcome("failed", told, key, fact=fact, url=shown, seconds=seconds, data=data)
