"""``lemongraph_gateway_requests_total{route,status}`` (docs/operations.md,
"Metrics"): every answer of the API, on either port, counted under its route's
template (``/v1/jobs/{key}``), never the path as sent, so a job key never
becomes a label. And, when the gateway traces (docs/operations.md, "Tracing"),
each request's span (:class:`RequestSpans`), named by the same template."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import SpanKind, StatusCode
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stream.runtime.metrics import GATEWAY_REQUESTS
from stream.runtime.tracing import context_of, tracer

__all__ = ["UNMATCHED", "RequestMetrics", "RequestSpans", "route_template"]

#: The request headers that carry a caller's trace (W3C trace context).
_TRACE_HEADERS = (b"traceparent", b"tracestate")

#: The route label of a request no route matches (a 404 of an unknown path).
UNMATCHED = "unmatched"


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that answered ``scope`` (set by the router),
    or of the one that would have (a request the guard refused before
    routing), else :data:`UNMATCHED`."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    for candidate in routes:
        match, _child = candidate.matches(scope)
        if match == Match.FULL:
            found = getattr(candidate, "path", None)
            return found if isinstance(found, str) else UNMATCHED
    return UNMATCHED


class RequestMetrics:
    """Counts each HTTP answer of ``app`` once it is sent (a stream when it
    ends), by :func:`route_template` and status; the outermost middleware of
    the API, so refusals of the guard are counted too."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def send_noting_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except BaseException:
            status.append(500)  # the server's error middleware answers it
            raise
        finally:
            self.count(scope, status[0] if status else 500)

    def count(self, scope: Scope, status: int) -> None:
        """Count one answer."""
        GATEWAY_REQUESTS.labels(route_template(scope, self.routes), str(status)).inc()


class RequestSpans:
    """One server span per HTTP request of ``app``, the child of the trace its
    ``traceparent`` header names (else a new trace's root): current while the
    route runs, so what the route writes to Kafka carries it on. Named
    ``METHOD /route/{template}``; it records the method, the route and the
    status, never the path, the query (a token may be there) or a body.
    Installed only when the gateway traces."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = tracer("gateway")
        if scope["type"] != "http" or found is None:
            await self.app(scope, receive, send)
            return
        parent = context_of(
            [(n.decode("latin-1"), v) for n, v in scope["headers"] if n in _TRACE_HEADERS]
        )
        method = str(scope["method"])
        status: list[int] = []

        async def send_noting_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        with found.start_as_current_span(
            method, context=parent, kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.scheme": str(scope["scheme"])},
        ) as span:  # fmt: skip
            try:
                await self.app(scope, receive, send_noting_status)
            finally:
                route = route_template(scope, self.routes)
                code = status[0] if status else 500
                span.update_name(f"{method} {route}")
                span.set_attributes({"http.route": route, "http.response.status_code": code})
                if code >= 500:
                    span.set_status(StatusCode.ERROR)
