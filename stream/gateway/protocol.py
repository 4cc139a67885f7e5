"""uvicorn's h11 protocol, with what the gateway needs to hold against clients
that misbehave (uvicorn has none of these; its ``timeout_keep_alive`` only runs
between requests, and is reset by every byte received):

- a **request deadline**: a connection whose request headers and body have not
  all arrived ``request_timeout`` seconds after it opened (for a later request
  on a kept-alive connection: after that request's first byte) is answered 408
  and closed. Once a request is complete the deadline is off, so a long answer
  (a live event stream) is never cut;
- a **connection bound**: at ``max_connections`` open connections on a port, a
  new one closes the port's oldest *idle* kept-alive connection (one between
  requests) to make room; when none is idle, the new one is answered 503 and
  closed at once. The bound is ours alone (uvicorn's ``limit_concurrency`` is
  off: it answered text/plain 503 on the last connection under the bound);
- a **request budget**: a connection is closed after ``REQUESTS_PER_CONNECTION``
  answers (the last one says ``Connection: close``), so that no client keeps one
  forever by finishing each request just before the deadline;
- a **lingering close**: when the server closes a connection whose client is
  still sending a body (a 413 answered before the body was read), it half-closes,
  reads and discards what comes (bounded in bytes and time), then closes. Closing
  with unread bytes in the receive buffer makes the kernel send a reset, which
  the client sees before the answer it has not read yet.

:func:`quiet_accept_errors` keeps the event loop from logging every failed
``accept()`` when the process runs out of file descriptors, and from retrying
each one (:func:`one_retry_per_shortage`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, cast

import h11
import orjson
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "GatewayConfig",
    "GatewayProtocol",
    "OncePer",
    "one_retry_per_shortage",
    "quiet_accept_errors",
    "quiet_uvicorn",
]

log = logging.getLogger("lemongraph.gateway")

#: What a lingering close reads and discards at most, and for how long.
LINGER_BYTES = 16 << 20
LINGER_SECONDS = 5.0
#: Answers one connection gets before the gateway closes it.
REQUESTS_PER_CONNECTION = 100


class GatewayConfig(uvicorn.Config):
    """A uvicorn config that carries the request deadline and connection bound."""

    def __init__(
        self, app: Any, *, request_timeout: float, max_connections: int, **options: Any
    ) -> None:
        super().__init__(app, http=GatewayProtocol, limit_concurrency=None, **options)
        self.request_timeout = request_timeout
        self.max_connections = max_connections


#: What the server's own answers (not the app's) say, like every answer of the
#: app's (server.SecurityHeaders): load nothing, never framed, never sniffed.
_SAFE = [
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
]
_SAFE_HEAD = "".join(f"{k.decode()}: {v.decode()}\r\n" for k, v in _SAFE)


def _raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{_SAFE_HEAD}\r\n"
    )
    return head.encode("ascii") + body


TIMED_OUT = _raw_error(
    408, "Request Timeout", "request_timeout", "the request did not arrive in time"
)
TOO_MANY = _raw_error(
    503, "Service Unavailable", "too_many_connections", "too many open connections"
)
MALFORMED = "malformed_request"
_CLOSE = (b"connection", b"close")


def _idle_of(protocol: H11Protocol) -> dict[GatewayProtocol, None]:
    """The port's idle kept-alive connections, oldest first (kept on the state
    uvicorn shares between a server's connections)."""
    state = protocol.server_state
    idle: dict[GatewayProtocol, None] | None = getattr(state, "gateway_idle", None)
    if idle is None:
        idle = {}
        state.gateway_idle = idle  # type: ignore[attr-defined]
    return idle


class _Lingering:
    """The transport, whose ``close()`` lingers while the client still sends."""

    def __init__(self, transport: asyncio.Transport, protocol: GatewayProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False
        self.discarded = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if self.lingering or transport.is_closing():
            return
        if self._protocol.conn.their_state is not h11.SEND_BODY or not transport.can_write_eof():
            transport.close()
            return
        # The client is still sending its body: let the answer reach it first.
        self.lingering = True
        transport.resume_reading()
        transport.write_eof()
        self._protocol.loop.call_later(LINGER_SECONDS, transport.close)

    def discard(self, data: bytes) -> None:
        self.discarded += len(data)
        if self.discarded > LINGER_BYTES:
            self._transport.close()


class GatewayProtocol(H11Protocol):
    """h11 with a request deadline, a connection bound and a lingering close."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        gateway = cast(GatewayConfig, config)
        self.request_timeout: float = gateway.request_timeout
        self.max_connections: int = gateway.max_connections
        self._deadline: asyncio.TimerHandle | None = None
        self._lingering: _Lingering | None = None
        self._answered = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        lingering = _Lingering(transport, self)
        super().connection_made(cast(asyncio.Transport, lingering))
        self._lingering = lingering
        if len(self.connections) > self.max_connections and not self._evict_idle():
            transport.write(TOO_MANY)
            transport.close()
            return
        self._arm()

    def _evict_idle(self) -> bool:
        """Close the port's oldest idle kept-alive connection (False: none is)."""
        idle = _idle_of(self)
        while idle:
            oldest = next(iter(idle))
            del idle[oldest]
            if oldest is not self and not oldest.transport.is_closing():
                oldest.timeout_keep_alive_handler()  # what uvicorn does after 5 s idle
                return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        _idle_of(self).pop(self, None)
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None and self._lingering.lingering:
            self._lingering.discard(data)
            return
        _idle_of(self).pop(self, None)
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._arm()  # a new request on a kept-alive connection
        super().data_received(data)
        self._check()

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        last = self._answered + 1 >= REQUESTS_PER_CONNECTION
        if last and cycle is not None and not cycle.response_started and cycle.keep_alive:
            # The budget's last request: its answer says Connection: close.
            cycle.keep_alive = False
            if _CLOSE not in cycle.scope["headers"]:
                cast(list[tuple[bytes, bytes]], cycle.scope["headers"]).append(_CLOSE)

    def on_response_complete(self) -> None:
        self._answered += 1
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            # Answered before the body was read (a refusal): uvicorn would read
            # and drop the rest for as long as it comes; close (lingering) instead.
            self.transport.close()
        super().on_response_complete()
        self._check()
        conn = self.conn
        if (
            not self.transport.is_closing()
            and conn.our_state is h11.IDLE
            and conn.their_state is h11.IDLE
            and not conn.trailing_data[0]
        ):
            _idle_of(self)[self] = None  # kept alive, between requests

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse, answered in the gateway's error shape."""
        body = orjson.dumps({"error": {"code": MALFORMED, "message": msg}})
        headers = [(b"content-type", b"application/json"), _CLOSE, *_SAFE]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers)))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()

    def _check(self) -> None:
        """The deadline runs while a request is coming in, and only then."""
        if self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
            if self._deadline is None:
                self._arm()
        elif state is not h11.IDLE:
            self._disarm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if not answering and self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.write(TIMED_OUT)
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
        raw = self._lingering._transport if self._lingering is not None else self.transport
        raw.close()


class _Quiet:
    """An event-loop exception handler that logs a failed ``accept()`` (out of
    file descriptors) once per ``every`` seconds, with a count, and hands every
    other report to the handler it replaced."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(
        self,
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None,
        every: float,
        say: Callable[[str], None],
    ) -> None:
        self.previous = previous
        self.every = every
        self.say = say
        self.suppressed = 0
        self.last = -float("inf")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != self.MESSAGE:
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self.last < self.every:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
        self.say(
            f"gateway: cannot accept connections: {context.get('exception')}{more}; "
            "raise the file limit (ulimit -n) or lower LEMONGRAPH_GATEWAY_MAX_CONNECTIONS"
        )
        self.last = now
        self.suppressed = 0


def quiet_accept_errors(
    loop: asyncio.AbstractEventLoop, say: Callable[[str], None], every: float = 10.0
) -> None:
    """Make ``loop`` report running out of file descriptors at ``accept()`` once
    per ``every`` seconds instead of once per attempt, and retry once per
    shortage (:func:`one_retry_per_shortage`)."""
    loop.set_exception_handler(_Quiet(loop.get_exception_handler(), every, say))
    one_retry_per_shortage(loop)


#: accept()'s errors that mean "out of resources, try again later".
_SHORTAGES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class _ShortageEndsTheRound:
    """A listening socket whose ``accept()``, once it failed for lack of
    resources, says "nothing more to accept" for the rest of the round."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.short = False

    def accept(self) -> tuple[socket.socket, Any]:
        if self.short:
            raise BlockingIOError(errno.EAGAIN, "out of resources: the next round retries")
        try:
            return self.sock.accept()
        except OSError as exc:
            self.short = exc.errno in _SHORTAGES
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def one_retry_per_shortage(loop: asyncio.AbstractEventLoop) -> None:
    """Backport the fix of CPython gh-151615 to ``loop`` (a selector loop; any
    other is left as it is).

    When ``accept()`` fails for lack of file descriptors, Python 3.11's selector
    loop stops watching the listening socket and schedules a retry a second
    later, but goes on trying: up to the listen backlog (2048 here) more failed
    ``accept()`` calls and as many scheduled retries per round, each round. A
    gateway stopped after such a shortage then logged a traceback per retry left
    (each found its socket closed) and took 9-13 s to stop instead of 0.2 s.
    Here a round ends at its first shortage, as the fixed CPython does, and a
    retry that finds its server closed does nothing."""
    accept = getattr(loop, "_accept_connection", None)
    serve = getattr(loop, "_start_serving", None)
    if accept is None or serve is None or getattr(accept, "one_retry", False):
        return

    def accept_round(factory: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
        listening = sock.sock if isinstance(sock, _ShortageEndsTheRound) else sock
        return accept(factory, _ShortageEndsTheRound(listening), *args, **kwargs)

    def retry(factory: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
        if sock.fileno() == -1:
            return None  # its server closed while the retry waited
        return serve(factory, sock, *args, **kwargs)

    accept_round.one_retry = True  # type: ignore[attr-defined]
    loop._accept_connection = accept_round  # type: ignore[attr-defined]
    loop._start_serving = retry  # type: ignore[attr-defined]


class OncePer(logging.Filter):
    """Lets each distinct message through once per ``every`` seconds (uvicorn
    logs a warning for every request refused past its concurrency limit and
    every malformed request: a client could fill the log with them)."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self.every = every
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        key = str(record.msg)
        if now - self.last.get(key, -float("inf")) < self.every:
            return False
        if len(self.last) > 1000:
            self.last.clear()
        self.last[key] = now
        return True


def quiet_uvicorn(every: float = 10.0) -> None:
    """Install :class:`OncePer` on uvicorn's logger (once per process)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, OncePer) for f in logger.filters):
        logger.addFilter(OncePer(every))
