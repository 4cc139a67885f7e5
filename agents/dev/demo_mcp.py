"""The demo MCP server (docs/agents.md, "MCP servers"): built with the ``mcp``
SDK's server API (MCPServer), so that ``lemongraph dev`` shows an MCP tool's
result settling a milestone offline. ``lemongraph dev`` serves it over
streamable HTTP from a thread of its own (``SETUP_MCP_URL``, when unset);
``python -m agents.dev.demo_mcp`` runs it over stdio.

Its one tool, ``setup_progress``, says how far a customer is through the
self-service setup guide; the demo says every step is done, so the bundled
catalog's ``check_setup`` records ``self_service_completed``. Its answer is
structured content, which the catalog's ``records`` paths read.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

__all__ = ["SETUP_MCP_URL", "build_demo_mcp"]

#: The catalog's ``${VAR}`` for the demo server's streamable HTTP endpoint.
SETUP_MCP_URL = "SETUP_MCP_URL"
#: The steps of the demo's setup guide.
STEPS = ("workspace", "team", "billing", "first_project")


def build_demo_mcp() -> MCPServer:
    """The demo MCP server (``.streamable_http_app()`` serves it over HTTP)."""
    server = MCPServer("lemongraph demo setup guide", log_level="WARNING")
    server.add_tool(setup_progress)
    return server


def setup_progress(email: str = "") -> dict[str, Any]:
    """How far the customer is through the self-service setup guide: the steps
    done, and whether the guide is complete."""
    return {
        "email": email,
        "steps_done": list(STEPS),
        "steps": len(STEPS),
        "completed": True,
    }


if __name__ == "__main__":
    build_demo_mcp().run()
