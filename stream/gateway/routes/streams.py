"""A job as it changes (docs/api.md, "Live"): ``GET /v1/jobs/{key}/events``,
server-sent events resumable from a position."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from stream.gateway.errors import error_responses
from stream.gateway.routes.shared import SECURED, Gateway, GatewayDep, visible
from stream.gateway.views import held_view

__all__ = ["job_events", "router"]

router = APIRouter(dependencies=SECURED, tags=["streams"])

_KEEPALIVE_SECONDS = 15.0
#: A job stream's position: decisions, journal records and messages read for the job.
_POSITION = r"^\s*\d{1,15}\.\d{1,15}\.\d{1,15}\s*$"
_POSITION_RE = re.compile(_POSITION)


@router.get(
    "/v1/jobs/{key}/events",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"},
        **error_responses("job_not_found", "invalid_query", "too_many_streams", "streams_full"),
    },
    operation_id="streamJobEvents",
    response_class=StreamingResponse,
)
async def job_events(
    gateway: GatewayDep,
    key: str,
    access_token: Annotated[
        str | None,
        Query(description="The token, for clients that cannot send headers (EventSource)."),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            pattern=_POSITION,
            description="Resume after `D.J.M`: the `total`s of the job's decisions, "
            "journal and messages as read (the lists' `total`); what came after "
            "them comes first. Without it, only what comes from now on.",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            description="Where the stream was (each record's `id`, sent back by "
            "EventSource when it reconnects): it resumes there, before `after`."
        ),
    ] = None,
) -> StreamingResponse:
    """Server-sent events as the job changes: `job` (the full view, first at
    once and then on every change), `decision` (each new decision) and
    `journal` (each new record of the agents' journal: model calls, tool
    calls, run ends) and `message` (each new message of the conversation).
    Each record's `id` is where the stream is (`D.J.M`); `after`, or
    `Last-Event-ID` on a reconnect, resumes from such a position."""
    del access_token  # the guard read it
    visible(gateway.model, key)
    start = _position(last_event_id) or _position(after)
    return StreamingResponse(
        _follow(gateway, key, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _newest(kept: Iterable[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The last ``count`` records kept (all kept, when more came than are kept)."""
    records = list(kept)
    return records[max(0, len(records) - count) :] if count > 0 else []


def _sse(event: str, data: Any, ident: str | None = None) -> bytes:
    head = b"id: " + ident.encode() + b"\n" if ident is not None else b""
    return head + b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _position(text: str | None) -> tuple[int, int, int] | None:
    """``D.J.M`` (decisions, journal records and messages read for a job) as
    numbers; None for none or for what is not one."""
    if text is None or _POSITION_RE.fullmatch(text.strip()) is None:
        return None
    decisions, journal, messages = (int(part) for part in text.strip().split("."))
    return decisions, journal, messages


async def _follow(
    gateway: Gateway, key: str, start: tuple[int, int, int] | None = None
) -> AsyncIterator[bytes]:
    """The job's stream. Its position counts the records read for the job, of
    each kind; it starts at ``start`` (what the client has: a list's ``total``,
    or the ``id`` of the last record it got), else at what is read now. Records
    past it that are still kept come at once, so that nothing read between the
    client's lists and its stream (or while it reconnected) is lost. A position
    past what this gateway read (one still reading after a restart) waits for it."""
    model = gateway.model
    flag = model.watch(key)
    kinds = (
        ("decision", model.decisions, model.decision_totals),
        ("journal", model.journal, model.journal_totals),
        ("message", model.messages, model.message_totals),
    )
    at = list(start) if start is not None else [totals.get(key, 0) for _, _, totals in kinds]

    def since() -> Iterator[bytes]:
        for i, (event, kept, totals) in enumerate(kinds):
            total = totals.get(key, 0)
            records = _newest(kept.get(key, ()), total - at[i])
            if total > at[i]:
                at[i] = total
            for n, record in enumerate(records):
                # the position after this record (the ones before it of its kind
                # counted, the later kinds not yet)
                here = [*at]
                here[i] = total - len(records) + n + 1
                yield _sse(event, record, ".".join(map(str, here)))

    shown: dict[str, Any] | None = None

    def job() -> bytes:
        """The job's view, when it is not the one this stream sent last (a
        message or a journal record wakes the stream too, and leaves it alone)."""
        nonlocal shown
        entry = model.jobs.get(key)
        if entry is None:
            return b""
        view = held_view(model, entry).model_dump(mode="json")
        if view == shown:
            return b""
        shown = view
        return _sse("job", view)

    try:
        yield b"retry: 2000\n\n"
        if viewed := job():
            yield viewed
        for chunk in since():
            yield chunk
        while not gateway.stopping.is_set():
            try:
                await asyncio.wait_for(flag.wait(), timeout=_KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            flag.clear()
            if gateway.stopping.is_set():
                break
            for chunk in since():
                yield chunk
            if viewed := job():
                yield viewed
    finally:
        model.unwatch(key, flag)
