"""The HTTP API of docs/api.md (FastAPI): writes go to the inbox, reads come from
the read models. ``build_api`` returns the ASGI app, composed of one router per
resource (stream/gateway/routes/); :class:`Gateway` holds what its routes share
and is reached by them through ``request.app.state.gateway``."""

from __future__ import annotations

from pathlib import Path

import stream.gateway.docs as docs
from stream.gateway.contract import TAGS, GatewayApp
from stream.gateway.errors import install_handlers
from stream.gateway.guard import GuardMiddleware
from stream.gateway.metering import RequestMetrics, RequestSpans
from stream.gateway.readmodels.memory import SubjectModel
from stream.gateway.readmodels.reply_lookup import ReplyTokens
from stream.gateway.readmodels.schedules import ScheduleModel
from stream.gateway.routes import (
    answers,
    dev,
    events,
    files,
    health,
    inbound,
    jobs,
    messages,
    playbooks,
    schedule_controls,
    schedules,
    streams,
    subjects,
)
from stream.gateway.routes.shared import Gateway
from stream.runtime.filestore import DEFAULT_FILE_TYPES, FileStore
from stream.runtime.tracing import tracer

__all__ = ["ROUTERS", "build_api"]

#: The routers, in the order their routes are matched and listed.
ROUTERS = (
    docs.router,
    schedule_controls.router,
    schedules.router,
    health.router,
    jobs.router,
    events.router,
    messages.router,
    answers.router,
    files.router,
    inbound.router,
    dev.router,
    streams.router,
    playbooks.router,
    subjects.router,
)


def build_api(gateway: Gateway) -> GatewayApp:
    """The API app."""
    app = GatewayApp(
        title="lemongraph gateway",
        version="1",
        summary=(
            "Start jobs, send events, read jobs, decisions and playbooks, run schedules, "
            "and read or erase what is remembered of a subject."
        ),
        description=(
            "Every `/v1` call needs `Authorization: Bearer lemongraph_sk_...` "
            "(mint one with `lemongraph token`). Errors are always "
            '`{"error": {"code", "message"}}`. `GET /v1/jobs/{key}/events` also accepts '
            "the token as `?access_token=` because a browser's EventSource cannot send "
            "headers."
        ),
        openapi_tags=TAGS,
        docs_url=None,
        redoc_url=None,
    )
    install_handlers(app)
    app.add_middleware(GuardMiddleware, guard=gateway.guard)
    # Outermost: the guard's refusals are counted too (docs/operations.md, "Metrics").
    app.add_middleware(RequestMetrics, routes=app.router.routes)
    if tracer("gateway") is not None:
        # Outermost of all when tracing (docs/operations.md, "Tracing").
        app.add_middleware(RequestSpans, routes=app.router.routes)
    if gateway.schedules is None:
        gateway.schedules = ScheduleModel(gateway.model.topics)
    # A run whose input the core refused reads refused (stream/gateway/readmodels/run_verdicts.py).
    gateway.model.decision_readers.append(gateway.schedules.decided)
    if gateway.subjects is None:
        gateway.subjects = SubjectModel(gateway.model.topics)
    # Jobs by subject, from their applied starts (stream/gateway/readmodels/memory.py).
    gateway.model.decision_readers.append(gateway.subjects.decided)
    mail = gateway.mail
    if mail is not None and mail.inbound_secret and gateway.tokens is None:
        # What the webhook knows of messages, from those read
        # (stream/gateway/readmodels/reply_lookup.py).
        gateway.tokens = ReplyTokens(mail)
        gateway.model.message_readers.append(gateway.tokens.read)
        gateway.model.message_readers.append(gateway.received.read)
    if gateway.files is None:
        gateway.files = FileStore(Path("data") / "files", 10 << 20, DEFAULT_FILE_TYPES)
    app.state.gateway = gateway
    for router in ROUTERS:
        app.include_router(router)
    return app
