"""The gateway's own routes (docs/api.md): ``GET /`` and ``GET /healthz``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from stream.gateway.models import Health
from stream.gateway.routes.shared import GatewayDep

__all__ = ["healthz", "home", "router"]

router = APIRouter(tags=["health"])


@router.get("/", include_in_schema=False)
async def home() -> HTMLResponse:
    return HTMLResponse(
        '<p>lemongraph gateway: <a href="/docs">API docs</a>, '
        '<a href="/openapi.json">OpenAPI</a></p>'
    )


@router.get(
    "/healthz",
    response_model=Health,
    operation_id="getHealth",
    responses={503: {"model": Health, "description": "Not ready: starting or degraded"}},
)
async def healthz(gateway: GatewayDep) -> Response:
    """Is the broker reachable and the read model caught up? 200 when both, else
    503; also 503, with the ``problem`` named, once a log it follows went
    backwards (the broker was reset under it)."""
    model = gateway.model
    broker = await gateway.broker_reachable()
    schedules, subjects = gateway.schedules, gateway.subjects
    caught_up = (
        model.caught_up
        and (schedules is None or schedules.caught_up)
        and (subjects is None or subjects.caught_up)
    )
    status = "ok" if broker and caught_up else ("starting" if broker else "degraded")
    problem = (
        model.reset
        or (schedules.reset if schedules is not None else None)
        or (subjects.reset if subjects is not None else None)
    )
    if problem is not None:
        status = "degraded"
    body = Health(
        status=status,
        broker=broker,
        caught_up=caught_up,
        jobs=len(model.jobs),
        playbooks=len(model.playbooks),
        schedules=len(schedules.schedules) if schedules is not None else 0,
        problem=problem,
    )
    return Response(
        body.model_dump_json(),
        status_code=200 if status == "ok" else 503,
        media_type="application/json",
    )
