"""The demo MCP server (docs/agents.md, "MCP servers"): built with the ``mcp``
SDK's server API (MCPServer), so that ``lemongraph dev`` shows an MCP tool's
result settling a milestone offline. ``lemongraph dev`` serves it, and the
demo order desk (its customers and orders: the MCP order desk of
docs/flows.md, "Coming from LGFlow"), over streamable HTTP from threads of
their own (``SETUP_MCP_URL`` and ``ORDERS_MCP_URL``, when unset: ``DEMO_MCP``);
``python -m agents.dev.demo_mcp`` runs the first over stdio, ``python -m
agents.dev.demo_mcp orders`` the second.

Its one tool, ``setup_progress``, says how far a customer is through the
self-service setup guide; the demo says every step is done, so the bundled
catalog's ``check_setup`` records ``self_service_completed``. Its answer is
structured content, which the catalog's ``records`` paths read.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer

__all__ = ["DEMO_MCP", "SETUP_MCP_URL", "build_demo_mcp", "build_orders_mcp"]

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


#: The order desk's one customer and her orders (docs/flows.md, "Coming from
#: LGFlow": the MCP order desk, examples/flows/mcp-order-desk.yaml).
CUSTOMERS = {"ada@example.com": {"id": "C-1", "name": "Ada Lovelace", "email": "ada@example.com"}}
ORDERS = {"C-1": [{"id": "O-1", "item": "notebook", "quantity": 2, "status": "shipped"}]}


def build_orders_mcp() -> MCPServer:
    """The demo order desk (``python -m agents.dev.demo_mcp orders`` over stdio):
    find a customer, list her orders, add one."""
    server = MCPServer("lemongraph demo order desk", log_level="WARNING")
    for tool in (find_customer, customer_orders, add_order):
        server.add_tool(tool)
    return server


def find_customer(email: str) -> dict[str, Any]:
    """The customer with this email address: her id and name (found: false when
    there is none)."""
    found = CUSTOMERS.get(email.strip().lower())
    return {**found, "found": True} if found else {"email": email, "found": False}


def customer_orders(customer_id: str) -> dict[str, Any]:
    """The orders of the customer with this id: each order's id, item,
    quantity and status."""
    return {"customer_id": customer_id, "orders": ORDERS.get(customer_id, [])}


def add_order(customer_id: str, item: str, quantity: int = 1) -> dict[str, Any]:
    """Place an order of ``quantity`` of ``item`` for the customer with this
    id; the order's id is made from what was ordered, so the same order placed
    twice is one order."""
    digest = hashlib.sha256(f"{customer_id}/{item}/{quantity}".encode()).hexdigest()[:6]
    return {
        "id": f"O-{digest}",
        "customer_id": customer_id,
        "item": item,
        "quantity": quantity,
        "status": "placed",
    }


#: What ``lemongraph dev`` serves: the catalog's ``${VAR}`` → the server it names.
DEMO_MCP: dict[str, Callable[[], MCPServer]] = {
    SETUP_MCP_URL: build_demo_mcp,
    "ORDERS_MCP_URL": build_orders_mcp,
}


if __name__ == "__main__":
    (build_orders_mcp() if sys.argv[1:] == ["orders"] else build_demo_mcp()).run()
