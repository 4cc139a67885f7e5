"""Running the gateway: the read model, a producer, and two uvicorn servers in
one event loop — the API on ``api_port`` and the UI on ``ui_port``. The UI app
mounts the API app too, so the page reaches the API on its own origin (no CORS).

``serve`` runs until ``stopping`` is set; ``run_gateway`` is the blocking entry
point of ``lemongraph gateway`` (SIGINT/SIGTERM stop it); :class:`GatewayThread`
runs it beside the Faust worker of ``lemongraph dev``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from aiokafka import AIOKafkaProducer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stream.gateway.api import build_api
from stream.gateway.guard import Guard
from stream.gateway.protocol import GatewayConfig, quiet_accept_errors, quiet_uvicorn
from stream.gateway.ratelimit import RateLimiter
from stream.gateway.readmodels.jobs import ReadModel
from stream.gateway.routes.shared import Gateway
from stream.runtime.config import Settings
from stream.runtime.errors import GatewayStartError
from stream.runtime.files import load_playbooks_dir
from stream.runtime.filestore import FileStore
from stream.runtime.kafka import bootstrap_of, client_kwargs, compression_type
from stream.runtime.metrics import TASKS_OPEN, MetricsServer, serve_metrics
from stream.runtime.tracing import start_tracing
from topics import Topics
from topics.mail import MailSettings

__all__ = ["GatewayThread", "addresses", "build_ui", "run_gateway", "serve", "ui_address"]

log = logging.getLogger("lemongraph.gateway")
UI_DIR = Path(__file__).with_name("ui")


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to its owner (two run in one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


#: What the page may load: its own scripts, styles and API (the live streams are
#: EventSource requests to the same origin), nothing inline, never in a frame.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
#: The API docs page (Swagger UI) starts itself with an inline script and styles
#: itself inline; it loads its files and the OpenAPI document from this origin.
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: A stored file (GET /v1/files/{id}): shown, if at all, in a sandbox where no
#: script runs, and loading nothing (docs/api.md, "Files").
FILE_POLICY = "sandbox; default-src 'none'; img-src 'self'; style-src 'unsafe-inline'"
#: Everything else (JSON, the API port's home page, errors) loads nothing.
OTHER_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
COMMON_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def _policy(path: str, ui: bool) -> bytes:
    if path.startswith("/v1/files/"):
        return FILE_POLICY.encode()
    if ui and (path in ("/", "/schedules") or path.startswith(("/jobs/", "/schedules/", "/ui/"))):
        return CONTENT_SECURITY_POLICY.encode()
    if path == "/docs":
        return DOCS_POLICY.encode()
    return OTHER_POLICY.encode()


_ADDED = frozenset({b"content-security-policy", *(name for name, _ in COMMON_HEADERS)})


class SecurityHeaders:
    """Adds a Content-Security-Policy (:data:`CONTENT_SECURITY_POLICY` for the
    UI's page and assets when ``ui``, :data:`DOCS_POLICY` for /docs,
    :data:`OTHER_POLICY` for the rest) and :data:`COMMON_HEADERS` to every
    answer of ``app``, errors included: no page of either origin (which holds
    the UI's token) can be framed or sniffed into another type."""

    def __init__(self, app: ASGIApp, ui: bool = False) -> None:
        self.app = app
        self.ui = ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        added = [
            (b"content-security-policy", _policy(scope.get("path", ""), self.ui)),
            *COMMON_HEADERS,
        ]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in _ADDED]
                message = {**message, "headers": [*headers, *added]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def build_ui(api: Any) -> Starlette:
    """The UI app: the page and its assets, with the API mounted beside them."""

    async def index(_request: Any) -> FileResponse:
        return FileResponse(UI_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    return Starlette(
        routes=[
            Route("/", index),
            Route("/jobs/{key}", index),  # deep links: the page reads the path
            Route("/schedules", index),
            Route("/schedules/{schedule_id}", index),
            # The address `lemongraph dev` prints, `/ui/#token=...` (docs/operations.md, "The UI").
            Route("/ui/", index),
            Mount("/ui", StaticFiles(directory=UI_DIR), name="ui"),
            Mount("", api),
        ],
        middleware=[Middleware(SecurityHeaders, ui=True)],
    )


def _playbooks(settings: Settings, say: Callable[[str], None]) -> dict[str, dict[int, Any]]:
    found = load_playbooks_dir(settings.playbooks_dir)
    for problem in found.problems:
        say(f"gateway: playbooks: problem: {str(problem).splitlines()[0]}")
    return {key: {p.version: p.to_json()} for key, p in found.by_key.items()}


def _config(app: Any, host: str, port: int, settings: Settings) -> uvicorn.Config:
    return GatewayConfig(
        app,
        request_timeout=settings.request_timeout,
        max_connections=settings.max_connections,
        host=host,
        port=port,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )


async def serve(
    settings: Settings,
    stopping: asyncio.Event,
    *,
    say: Callable[[str], None] = log.info,
    ready: Callable[[], None] | None = None,
    dev_mail: Callable[[], list[dict[str, Any]]] | None = None,
) -> None:
    """Run the gateway until ``stopping`` is set (``dev_mail``: what ``lemongraph
    dev``'s mail catcher holds, served at ``GET /v1/dev/mail``)."""
    assert settings.kafka_url is not None
    bootstrap = bootstrap_of(settings.kafka_url)
    model = ReadModel(
        Topics(settings.topic_prefix), _playbooks(settings, say),
        pending_ttl=settings.gateway_pending_ttl, jobs_kept=settings.gateway_jobs,
        job_bytes=settings.gateway_job_bytes, memory_bytes=settings.gateway_memory,
    )  # fmt: skip
    # Everything the gateway writes (the inbox, schedules, messages, the journal)
    # is compressed like every other producer's: LEMONGRAPH_KAFKA_COMPRESSION
    # (docs/kafka.md, "Compression").
    producer = AIOKafkaProducer(
        **client_kwargs(bootstrap, settings.kafka_security),
        acks="all",
        request_timeout_ms=15000,
        compression_type=compression_type(settings.kafka_compression),
    )
    await producer.start()
    guard = Guard(
        settings.api_token_secret,
        RateLimiter(settings.rate_limit, settings.rate_burst),
        settings.max_body,
        streams_per_token=settings.streams_per_token,
        max_streams=max(1, settings.max_connections // 2),
        # An upload's body: the file and room for its multipart framing.
        max_upload=settings.file_max_bytes + (64 << 10),
    )
    try:
        mail: MailSettings | None = MailSettings.from_env(dict(os.environ))
    except ValueError as exc:
        say(f"gateway: the inbound email webhook is off: {exc}")
        mail = None
    gateway = Gateway(
        model, producer, guard, dev_mail=dev_mail, mail=mail,
        send_timeout=settings.gateway_write_timeout, bootstrap=bootstrap,
        security=settings.kafka_security,
        files=FileStore(settings.file_store_dir, settings.file_max_bytes, settings.file_types),
    )  # fmt: skip
    tracing = start_tracing("gateway", say)  # docs/operations.md, "Tracing"
    api = build_api(gateway)
    quiet_accept_errors(asyncio.get_running_loop(), say)
    quiet_uvicorn()
    _raise_file_limit(settings, say)
    servers = [
        _Server(_config(SecurityHeaders(api), settings.gateway_host, settings.api_port, settings)),
        _Server(_config(build_ui(api), settings.gateway_host, settings.ui_port, settings)),
    ]
    follower = asyncio.create_task(
        model.follow(bootstrap, settings.kafka_security, gateway.stopping, say)
    )
    assert gateway.schedules is not None  # build_api made it
    schedules = asyncio.create_task(
        gateway.schedules.follow(bootstrap, settings.kafka_security, gateway.stopping, say)
    )
    assert gateway.subjects is not None  # build_api made it
    subjects = asyncio.create_task(
        gateway.subjects.follow(bootstrap, settings.kafka_security, gateway.stopping, say)
    )
    running = [asyncio.create_task(s.serve()) for s in servers]
    TASKS_OPEN.set_function(model.open_task_count)
    metrics: MetricsServer | None = None
    try:
        metrics = serve_metrics("gateway", settings.metrics_port, settings.metrics_host, say)
        while not all(s.started for s in servers):
            if any(t.done() for t in running):
                failed = next(t for t in running if t.done())
                failed.result()  # raises what stopped it
                raise SystemExit("gateway: a server stopped while starting (is the port taken?)")
            await asyncio.sleep(0.02)
        if ready is not None:
            ready()
        await stopping.wait()
    finally:
        gateway.stopping.set()
        model.wake_all()
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*running, return_exceptions=True)
        await asyncio.gather(follower, schedules, subjects, return_exceptions=True)
        await producer.stop()
        if metrics is not None:
            metrics.stop()
        if tracing is not None:
            tracing.stop()
        refused = ", ".join(f"{n}×{s}" for s, n in sorted(guard.refused.items())) or "none"
        say(f"gateway: stopped; {gateway.accepted_writes} writes accepted; refused: {refused}")


#: File descriptors kept for everything but the two ports' connections (the
#: broker connections, the page's files, the log).
FILE_RESERVE = 256


def _raise_file_limit(settings: Settings, say: Callable[[str], None]) -> None:
    """Raise the soft file limit to what both ports' connection bounds need (up
    to the hard limit), and say so when it is still too low for them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * settings.max_connections + FILE_RESERVE
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft != resource.RLIM_INFINITY and soft < wanted:
        say(
            f"gateway: the file limit ({soft}) is below what "
            f"LEMONGRAPH_GATEWAY_MAX_CONNECTIONS={settings.max_connections} needs on two "
            f"ports ({wanted}): raise it (ulimit -n) or lower the bound"
        )


def run_gateway(settings: Settings, say: Callable[[str], None] = print) -> int:
    """Run the gateway in this thread's own loop until SIGINT or SIGTERM."""

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await serve(settings, stopping, say=say, ready=lambda: say(addresses(settings)))

    asyncio.run(main())
    return 0


def _host(settings: Settings) -> str:
    """Where a browser on this machine reaches the gateway."""
    host = settings.gateway_host
    return host if host not in ("0.0.0.0", "::") else "127.0.0.1"  # noqa: S104


def ui_address(settings: Settings) -> str:
    """The UI's address: ``http://HOST:PORT/``."""
    return f"http://{_host(settings)}:{settings.ui_port}/"


def addresses(settings: Settings) -> str:
    """The status line that says where the gateway listens."""
    return (
        f"gateway: UI on {ui_address(settings)} ; "
        f"API on http://{_host(settings)}:{settings.api_port}/v1 "
        f"(docs /docs, OpenAPI /openapi.json)"
    )


class GatewayThread:
    """The gateway in a thread of its own (beside a Faust worker that owns the
    main thread and its loop)."""

    def __init__(
        self,
        settings: Settings,
        say: Callable[[str], None] = print,
        dev_mail: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.settings = settings
        self.say = say
        self.dev_mail = dev_mail
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lemongraph-gateway", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            await serve(
                self.settings, self._stopping, say=self.say, ready=self._ready.set,
                dev_mail=self.dev_mail,
            )  # fmt: skip

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start(); the thread just ends
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout: float = 30.0) -> None:
        """Start it and wait until both servers listen; raises what went wrong."""
        self._thread.start()
        self._ready.wait(timeout)
        if self._error is not None:
            raise GatewayStartError(f"gateway did not start: {self._error}") from self._error
        if not self._ready.is_set():
            raise GatewayStartError(f"gateway did not start within {timeout:g}s")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop it and wait for the thread."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
        self._thread.join(timeout)
