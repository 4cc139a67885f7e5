"""Demo endpoints for the bundled catalog's tools (calendar, CRM, billing), so
that ``lemongraph dev`` closes the loop offline: a booking the agent makes is
confirmed, and the milestone moves on that confirmation (docs/agents.md,
"Demo tools"). ``GET /crm/orders?id=`` and ``POST /billing/refunds`` serve the
shop tools of the example flows (docs/flows.md).

They behave as a careful real endpoint would: an ``Idempotency-Key`` seen before
gets the first answer again, and nothing happens twice. They keep what they did
in memory (``app.state.done``) and forget it when the process stops.

Their answers pass the bundled catalog's success rules (docs/agents.md, "What
success is"), and two of them can decline with a 200 that says so, as real
endpoints do: the calendar has no slot on a Sunday, and an order whose id starts
with ``final`` is a final sale that is not refunded.
"""

from __future__ import annotations

import itertools
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["TOOL_URLS", "build_demo_tools"]

#: The catalog's ``${VAR}`` and the path under the demo server it points at.
TOOL_URLS = {"CALENDAR_URL": "/calendar", "CRM_URL": "/crm", "BILLING_URL": "/billing"}


def build_demo_tools() -> FastAPI:
    """The demo endpoints as an ASGI app."""
    app = FastAPI(title="lemongraph demo tools")
    app.state.done = {}
    numbers = itertools.count(1)

    async def once(request: Request, answer: dict[str, Any]) -> dict[str, Any]:
        key = request.headers.get("idempotency-key")
        if key is None:
            return answer
        earlier: dict[str, Any] = app.state.done.setdefault(key, answer)
        return earlier

    @app.post("/calendar/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        when = str(body.get("when", ""))
        if "sunday" in when.lower():
            declined = {"ok": False, "status": "declined", "error": "no free slot on a Sunday"}
            return await once(request, declined)
        return await once(
            request, {"status": "confirmed", "when": when, "id": f"M-{next(numbers)}"}
        )

    @app.post("/crm/activate")
    async def activate(request: Request) -> dict[str, Any]:
        return await once(request, {"active": True, "id": f"A-{next(numbers)}"})

    @app.post("/crm/deal")
    async def deal(request: Request) -> dict[str, Any]:
        body = await request.json()
        return await once(request, {"stage": body.get("stage"), "id": f"D-{next(numbers)}"})

    @app.get("/crm/orders", response_model=None)
    async def order(id: str = "") -> Any:
        # A read: the same order for the same id, made up from the id; an id
        # starting with "missing" is no order.
        if not id or id.lower().startswith("missing"):
            return JSONResponse({"error": f"no order {id!r}"}, status_code=404)
        digits = sum(ord(c) for c in id)
        return {
            "id": id,
            "status": ("delivered", "shipped", "late")[digits % 3],
            "items": [{"sku": f"SKU-{digits % 97}", "quantity": 1 + digits % 3}],
            "total": round(10 + digits % 90 + 0.5, 2),
        }

    @app.post("/billing/refunds")
    async def refund(request: Request) -> dict[str, Any]:
        body = await request.json()
        order = body.get("id")
        if str(order).lower().startswith("final"):
            declined = {"ok": False, "order": order, "error": "a final sale is not refunded"}
            return await once(request, declined)
        answer = {"status": "refunded", "order": order, "id": f"R-{next(numbers)}"}
        return await once(request, answer)

    @app.post("/billing/trials")
    async def trial(request: Request) -> dict[str, Any]:
        body = await request.json()
        return await once(request, {"plan": body.get("plan"), "id": f"T-{next(numbers)}"})

    return app
