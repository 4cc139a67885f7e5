"""An MCP server for the tests, built with the SDK's own server API (MCPServer,
once FastMCP), run over stdio (``python tests/agents/tools/mcp_fixture.py``) or,
by :func:`build`, served over streamable HTTP in the test's process.

- ``slow(seconds)``: writes its process id and the call's idempotency key to
  ``$MARK_DIR/slow-<key>.pid``, then sleeps: a test kills the process mid-call.
- ``echo_key()``: answers the ``_meta`` idempotency key it was sent (and, over
  HTTP, the ``Authorization`` header it came with is checked by the app).
- ``fails()``: an MCP error result (``isError``) with a JSON text.
- ``lookup(id)``: ``id`` is a string, or an integer when ``$SHAPE`` (or the
  ``shape`` argument of :func:`build`) is ``v2``; absent when it is ``gone``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent


def build(shape: str = "v1") -> MCPServer:
    server = MCPServer("lemongraph-test-fixture", log_level="WARNING")

    def _key(ctx: Context) -> Any:
        meta = ctx.request_context.meta or {}
        return meta.get("idempotency_key")

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> dict[str, Any]:
        """Sleep a while (it says first where it runs)."""
        marks = Path(os.environ.get("MARK_DIR", "."))
        (marks / f"slow-{_key(ctx)}.pid").write_text(str(os.getpid()))
        time.sleep(seconds)  # blocks the process: the kill finds it mid-call
        return {"slept": seconds}

    @server.tool()
    async def echo_key(ctx: Context) -> dict[str, Any]:
        """Answer the idempotency key the call carried in its _meta."""
        return {"key": _key(ctx)}

    @server.tool()
    def fails() -> CallToolResult:
        """Always an error result, its text JSON."""
        text = json.dumps({"reason": "out of stock"})
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    if shape == "v2":

        @server.tool()
        def lookup(id: int) -> dict[str, Any]:
            """Look an item up (by number)."""
            return {"id": id}

    elif shape != "gone":

        @server.tool()
        def lookup(id: str) -> dict[str, Any]:  # type: ignore[misc]  # the other shape
            """Look an item up."""
            return {"id": id}

    return server


if __name__ == "__main__":
    build(os.environ.get("SHAPE", "v1")).run()
