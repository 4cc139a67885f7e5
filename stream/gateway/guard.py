"""The checks every ``/v1`` request passes before any route sees it, in order:
a valid token (401), the token's rate limit (429 with Retry-After), a body no
larger than the limit (413). Every refusal here closes its connection
(``Connection: close``): a refused client holds no connection while it idles.
An event stream (``GET /v1/jobs/{key}/events``, open until the client leaves)
also needs a free stream: at most ``streams_per_token`` for one token (429
``too_many_streams``) and ``max_streams`` in all (503 ``streams_full``), so that
streams cannot take every connection a port holds.

It is ASGI middleware rather than a route dependency so that the order holds
for every request: a framework parses a JSON body before it runs dependencies,
and an unauthenticated caller must learn nothing but 401.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stream.gateway.errors import ApiError, error_response
from stream.gateway.ratelimit import RateLimiter
from stream.gateway.tokens import Principal, verify_token

__all__ = ["Guard", "GuardMiddleware", "principal_of"]

#: The routes that accept the token as ``?access_token=`` too (EventSource cannot
#: set headers): the server-sent-events GETs only, matched exactly, so that no
#: write takes a token from a URL (where logs and Referer headers keep it).
_SSE_ROUTE = re.compile(r"/v1/jobs/[^/]+/events")
#: Routes a mail provider calls: no token, a signature over the body instead
#: (the route checks it), and a rate limit of their own.
SIGNED_PATHS = frozenset({"/v1/inbound/email"})
#: Routes whose body is a file (docs/api.md, "Files"): read up to ``max_upload``
#: rather than ``max_body``.
UPLOAD_PATHS = frozenset({"/v1/files"})


@dataclass
class Guard:
    """What the checks need: the secret, the limiter, the body limit, clocks."""

    secret: str
    limiter: RateLimiter
    max_body: int
    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    refused: dict[int, int] = field(default_factory=dict)  # status → count, for status lines
    streams_per_token: int = 20
    max_streams: int = 500
    streams: dict[str, int] = field(default_factory=dict)  # token ident → open streams
    #: The body limit of an upload (:data:`UPLOAD_PATHS`): the largest file and
    #: room for its multipart framing (0: ``max_body``).
    max_upload: int = 0

    def open_stream(self, ident: str) -> None:
        """Count a new event stream of ``ident``'s, or refuse it (:class:`ApiError`)."""
        if self.streams.get(ident, 0) >= self.streams_per_token:
            raise ApiError(
                429, "too_many_streams",
                f"this token has {self.streams_per_token} event streams open already",
            )  # fmt: skip
        if sum(self.streams.values()) >= self.max_streams:
            raise ApiError(503, "streams_full", "the gateway serves all the event streams it can")
        self.streams[ident] = self.streams.get(ident, 0) + 1

    def close_stream(self, ident: str) -> None:
        left = self.streams.get(ident, 0) - 1
        if left > 0:
            self.streams[ident] = left
        else:
            self.streams.pop(ident, None)

    def admit(self, scope: Scope) -> Principal | None:
        """The principal of the request (None for a signed route, whose handler
        checks the signature), or :class:`ApiError`."""
        if scope["path"] in SIGNED_PATHS:
            wait = self.limiter.take("signed:" + scope["path"], self.monotonic())
            if wait is not None:
                raise ApiError(
                    429, "rate_limited", f"too many requests: retry in {wait}s",
                    headers={"Retry-After": str(wait)},
                )  # fmt: skip
            return None
        token = _bearer(scope)
        if token is None and _sse_get(scope):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = query.get("access_token")
            token = given[0] if given else None
        principal = verify_token(self.secret, token, now=self.wall())
        wait = self.limiter.take(principal.ident, self.monotonic())
        if wait is not None:
            raise ApiError(
                429,
                "rate_limited",
                f"too many requests for this token: retry in {wait}s",
                headers={"Retry-After": str(wait)},
            )
        return principal


def _sse_get(scope: Scope) -> bool:
    """A GET of a server-sent-events route (the only place a query token counts)."""
    return scope["method"] == "GET" and _SSE_ROUTE.fullmatch(scope["path"]) is not None


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text: str = bytes(value).decode("latin-1")
            scheme, _, credentials = text.partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
            return None
    return None


def principal_of(scope: Scope) -> Principal:
    """The principal :class:`GuardMiddleware` admitted (routes under /v1 only)."""
    principal = scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):
        raise ApiError(401, "token_missing", "no token was checked for this request")
    return principal


class GuardMiddleware:
    """Applies :class:`Guard` to every HTTP request under ``/v1``."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        stream: str | None = None
        try:
            principal = self.guard.admit(scope)
            body = await self._body(scope, receive)
            if principal is not None and _sse_get(scope):
                self.guard.open_stream(principal.ident)
                stream = principal.ident
        except ApiError as error:
            self.guard.refused[error.status] = self.guard.refused.get(error.status, 0) + 1
            # A refused client holds no connection while it idles or retries.
            error.headers.setdefault("Connection", "close")
            await error_response(error)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        if stream is not None:
            try:
                await self.app(scope, receive, send)
            finally:
                self.guard.close_stream(stream)
            return
        if body is None:
            await self.app(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body (for methods that carry one), refused past the limit."""
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return None
        limit = self.guard.max_body
        if scope["path"] in UPLOAD_PATHS and self.guard.max_upload:
            limit = self.guard.max_upload
        # Connection: close: the server does not read the rest of the body.
        too_large = ApiError(
            413, "body_too_large", f"the body is larger than {limit} bytes",
            headers={"Connection": "close"},
        )  # fmt: skip
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        raise too_large
                except ValueError:
                    raise ApiError(400, "malformed_request", "bad Content-Length") from None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                # Gone (or cut off by the request deadline) before the whole body
                # came: what did come is not the request, so no route sees it.
                raise ApiError(400, "malformed_request", "the body ended early")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            message: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
            return message
        return await receive()

    return replay
