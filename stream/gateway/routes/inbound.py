"""Inbound email by webhook (docs/api.md): ``POST /v1/inbound/email``, signed
with LEMONGRAPH_INBOUND_SECRET instead of a bearer token."""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter, Request
from pydantic import ValidationError

from stream.gateway.errors import WRITE_CODES, ApiError, error_responses
from stream.gateway.models import InboundAccepted, InboundEmail
from stream.gateway.readmodels.jobs import idem
from stream.gateway.routes.shared import Gateway, GatewayDep, now_iso
from topics import InboxEvent, JournalMail, MessageRecord, encode, first_error
from topics.mail import (
    MailSettings,
    SenderNotContact,
    automatic_reason,
    inbound_message_id,
    received,
    sender_of,
    unverified,
)
from topics.replies import ReplyRoute, ReplyTokenError, read_reply_address

__all__ = ["inbound_email", "router"]

router = APIRouter(tags=["inbound"])


def _configured(gateway: Gateway) -> MailSettings:
    """The mail settings, when the webhook is on; 404 ``inbound_not_configured`` else."""
    mail = gateway.mail
    if mail is None or not mail.inbound_secret:
        raise ApiError(
            404, "inbound_not_configured",
            "LEMONGRAPH_INBOUND_SECRET is empty: this gateway has no inbound webhook",
        )  # fmt: skip
    return mail


def _check_signature(mail: MailSettings, raw: bytes, given: str) -> None:
    """401 ``signature_invalid`` unless ``given`` signs ``raw``."""
    expected = "sha256=" + hmac.new(mail.inbound_secret.encode(), raw, "sha256").hexdigest()
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(
            401, "signature_invalid",
            "X-Lemongraph-Signature is missing or does not match the body "
            "(sha256=<hex HMAC-SHA256 of the exact body under LEMONGRAPH_INBOUND_SECRET>)",
        )  # fmt: skip


async def _route(gateway: Gateway, mail: MailSettings, body: InboundEmail) -> ReplyRoute:
    """The job the reply address names; 403 ``reply_refused`` (journaled) else."""
    try:
        lookup = gateway.tokens.get if gateway.tokens is not None else None
        return read_reply_address(
            mail.reply_secret, body.to, mail.reply_domain, int(time.time()), lookup
        )
    except ReplyTokenError as exc:
        refusal = JournalMail(
            job_key="", at=now_iso(), direction="in", outcome="refused",
            address=body.from_, detail=f"webhook: {exc.reason}: to {body.to}: {exc}"[:500],
        )  # fmt: skip
        await gateway.send(gateway.model.topics.journal, "", encode(refusal))
        raise ApiError(403, "reply_refused", f"{exc.reason} reply address: {exc}") from None


async def _write(
    gateway: Gateway,
    record: MessageRecord | None,
    event: InboxEvent,
    answer: InboundAccepted,
    sender: str | None,
) -> InboundAccepted:
    """Write what a mail not yet taken adds: its message (once per message id,
    whatever wrote it before: this gateway before a restart, or a try whose event
    was not acknowledged), its event (once per idempotency key the gateway
    remembers; the engine applies a key once anyway) and the journal's line."""
    model, key = gateway.model, answer.key
    entry = model.entry(key)
    remembered = entry is not None and (
        idem(event.source, event.idempotency_key) in entry.idempotency
    )
    written = record is None or (key, answer.message_id) in gateway.received
    if remembered and written:
        return answer.model_copy(update={"duplicate": True})
    fresh = not written if record is not None else not remembered
    gateway.room()
    if record is not None and not written:
        await gateway.send(model.topics.messages, key, encode(record))
        gateway.received.note(key, answer.message_id)
    if not remembered:
        await gateway.produce(key, event)
    if not fresh:  # only the event was missing: the mail itself was taken before
        return answer.model_copy(update={"duplicate": True})
    journaled = JournalMail(
        job_key=key, at=now_iso(), direction="in",
        outcome="received" if record is not None else "bounced",
        message_id=answer.message_id, address=sender, detail="webhook",
    )  # fmt: skip
    await gateway.send(model.topics.journal, key, encode(journaled))
    return answer


def _automatic(body: InboundEmail) -> str | None:
    """Why the mail is automatic (its ``headers``, and ``from`` as its From), or
    None: the same rules as the mail ingress's (docs/agents.md, "Mail loops")."""
    headers = list(body.headers.items())
    if body.from_ is not None:
        headers.append(("From", body.from_))
    return automatic_reason(headers)


async def _journal_automatic(
    gateway: Gateway, route: ReplyRoute, body: InboundEmail, message_id: str, why: str
) -> InboundAccepted:
    """An automatic mail at a reply address: journaled, nothing written, no run."""
    held = JournalMail(
        job_key=route.job_key, at=now_iso(), direction="in", outcome="automatic",
        message_id=message_id, address=sender_of(body.from_), contact=route.contact,
        detail=f"webhook: not a person's reply, no run: {why}"[:500],
    )  # fmt: skip
    await gateway.send(gateway.model.topics.journal, route.job_key, encode(held))
    return InboundAccepted(key=route.job_key, kind="automatic", message_id=message_id, event_id="")


@router.post(
    "/v1/inbound/email",
    status_code=202,
    response_model=InboundAccepted,
    operation_id="receiveEmail",
    responses=error_responses(
        # The body is read as JSON here, not by the framework: not JSON is 422.
        "malformed_request",
        "body_too_large",
        "invalid_body",
        *WRITE_CODES,
        "signature_invalid",
        "rate_limited",
        "reply_refused",
        "sender_not_contact",
        "inbound_not_configured",
        "job_not_found",
        token=False,
    ),
)
async def inbound_email(gateway: GatewayDep, request: Request) -> InboundAccepted:
    """For mail providers that deliver by webhook: an email received for a
    `reply+<token>@REPLY_DOMAIN` (or `bounce+...`) address. No bearer token:
    `X-Lemongraph-Signature: sha256=<hex HMAC-SHA256 of the body under
    LEMONGRAPH_INBOUND_SECRET>`. The reply token is checked as the mail ingress
    checks it (403 `reply_refused`, journaled, nothing written), and so is the
    sender: a reply `from` anyone but the contact its address was issued to is
    403 `sender_not_contact` (journaled `unverified`, nothing written). A reply
    becomes a message and its `message_received` event, a bounce `email_bounced`.
    A reply that its `headers` (or `from`) mark automatic (`Auto-Submitted`,
    `Precedence: bulk`, a list's `List-Id`, ...) is 202 `kind: automatic`:
    journaled, nothing written, no run."""
    model = gateway.model
    mail = _configured(gateway)
    raw = await request.body()
    _check_signature(mail, raw, request.headers.get("x-lemongraph-signature", ""))
    try:
        body = InboundEmail.model_validate_json(raw)
    except ValidationError as exc:
        raise ApiError(422, "invalid_body", first_error(exc, "body")) from None
    route = await _route(gateway, mail, body)
    key = route.job_key
    message_id = inbound_message_id(body.message_id, raw)
    async with gateway.lock(key):
        entry = model.entry(key)
        if entry is None or not entry.visible:
            raise ApiError(404, "job_not_found", f"no job {key!r}")
        why = _automatic(body) if route.kind == "reply" else None
        if why is not None:
            return await _journal_automatic(gateway, route, body, message_id, why)
        try:
            record, event = received(
                route, message_id, sender_of(body.from_), body.text, now_iso(), body.reason
            )
        except SenderNotContact as refusal:
            held = unverified(route, refusal, message_id, now_iso(), "webhook")
            await gateway.send(model.topics.journal, key, encode(held))
            raise ApiError(403, "sender_not_contact", str(refusal)) from None
        answer = InboundAccepted(
            key=key, kind="bounce" if record is None else "reply",
            message_id=message_id, event_id=str(event.idempotency_key),
        )  # fmt: skip
        return await _write(gateway, record, event, answer, sender_of(body.from_))
