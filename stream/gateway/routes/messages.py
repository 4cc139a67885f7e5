"""A job's conversation on the web channel (docs/api.md): a person's message in,
and the conversation read."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from stream.gateway.errors import BODY_CODES, WRITE_CODES, ApiError, error_responses
from stream.gateway.models import MessageAccepted, MessageBody, MessageList
from stream.gateway.readmodels.jobs import idem
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, GatewayDep, PrincipalDep, newest_of, now_iso
from topics import encode, inbound_message

__all__ = ["get_messages", "post_message", "router"]

router = APIRouter(dependencies=SECURED, tags=["messages"])


@router.post(
    "/v1/jobs/{key}/messages",
    status_code=202,
    response_model=MessageAccepted,
    operation_id="sendMessage",
    responses=error_responses(*BODY_CODES, *WRITE_CODES, "source_not_allowed", "job_not_found"),
)
async def post_message(
    gateway: GatewayDep, key: str, body: MessageBody, principal: PrincipalDep
) -> MessageAccepted:
    """A person's message in the job's conversation (the web channel): it goes
    on `messages`, where the agents read it, and as a `message_received` event
    (`source: world`) on the inbox. The event proves that someone wrote, never
    what the text claims. A retried `message_id` answers 202 again, once. Only a
    `world` token writes a person's message (403 `source_not_allowed`)."""
    require(principal, "write_message")
    model = gateway.model
    async with gateway.lock(key):
        entry = model.entry(key)
        if entry is None or not entry.visible:
            raise ApiError(404, "job_not_found", f"no job {key!r}")
        gateway.room()
        message_id = body.message_id or f"web-{uuid.uuid4().hex}"
        event_key = f"msg:{message_id}"
        earlier = entry.idempotency.get(idem("world", event_key))
        if earlier is not None or message_id in model.message_ids.get(key, ()):
            return MessageAccepted(
                key=key, message_id=message_id, event_id=event_key,
                partition=earlier.partition if earlier else -1,
                offset=earlier.offset if earlier else -1, duplicate=True,
            )  # fmt: skip
        record, event = inbound_message(key, message_id, "web", body.contact, body.text, now_iso())
        meta = await gateway.send(model.topics.messages, key, encode(record))
        await gateway.produce(key, event)
    return MessageAccepted(
        key=key,
        message_id=message_id,
        event_id=event_key,
        partition=meta.partition,
        offset=meta.offset,
    )


@router.get(
    "/v1/jobs/{key}/messages",
    response_model=MessageList,
    operation_id="listMessages",
    responses=error_responses("job_not_found", "invalid_query"),
)
async def get_messages(
    gateway: GatewayDep, key: str, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> MessageList:
    """The job's conversation, oldest first: every message in and out (channel,
    direction, contact, text, message id, task, when)."""
    model = gateway.model
    newest, kept = newest_of(model, model.messages, key, limit)
    total = model.message_totals.get(key, 0)
    return MessageList(key=key, messages=newest, kept=kept, total=total)
