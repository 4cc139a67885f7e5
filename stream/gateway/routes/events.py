"""Events (docs/api.md, "Sending an event"): ``POST /v1/events``."""

from __future__ import annotations

from fastapi import APIRouter

from stream.gateway.errors import BODY_CODES, WRITE_CODES, ApiError, error_responses
from stream.gateway.models import Accepted, EventBody
from stream.gateway.readmodels.jobs import idem
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, GatewayDep, PrincipalDep
from topics import InboxEvent, event_id

__all__ = ["router", "send_event"]

router = APIRouter(dependencies=SECURED, tags=["events"])


@router.post(
    "/v1/events",
    status_code=202,
    response_model=Accepted,
    operation_id="sendEvent",
    responses=error_responses(*BODY_CODES, *WRITE_CODES, "job_not_found"),
)
async def send_event(gateway: GatewayDep, body: EventBody, principal: PrincipalDep) -> Accepted:
    """Send an event to a job. Its source is the token's. A retried
    `idempotency_key` answers 202 again and is applied once."""
    require(principal, "send_event")
    async with gateway.lock(body.key):
        entry = gateway.model.entry(body.key)
        if entry is None:
            raise ApiError(404, "job_not_found", f"no job {body.key!r}")
        given = body.idempotency_key
        earlier = entry.idempotency.get(idem(principal.source, given)) if given else None
        if earlier is not None:
            return Accepted(
                type="event",
                key=body.key,
                partition=earlier.partition,
                offset=earlier.offset,
                event_id=body.idempotency_key,
                source=earlier.message.get("source"),
                duplicate=True,
            )
        gateway.room()
        message = InboxEvent(
            key=body.key,
            action=body.action,
            value=body.value,
            properties=body.properties,
            idempotency_key=body.idempotency_key,
            source=principal.source,
        )
        write = await gateway.produce(body.key, message)
    return Accepted(
        type="event",
        key=body.key,
        partition=write.partition,
        offset=write.offset,
        # What verdict explanations will cite (the engine's naming).
        event_id=body.idempotency_key or event_id(write.partition, write.offset),
        source=principal.source,
    )
