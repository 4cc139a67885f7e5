"""One Prometheus registry per process kind, and the HTTP server that serves
it at ``/metrics`` (docs/operations.md, "Metrics").

``lemongraph dev`` runs the worker and the gateway in one process: each kind
has a registry of its own, served on a port of its own, so a scrape of the
worker's address never reads the gateway's series and the dashboard's
``job`` label means the same with ``dev`` as in a deployment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from stream.runtime.errors import ConfigError

__all__ = ["PROCESSES", "MetricsServer", "metrics_line", "registry", "serve_metrics"]

#: The processes that serve metrics, as ``lemongraph dev`` names them in its
#: ``metrics: <process> URL`` lines (pinned: docs/operations.md, "Metrics").
PROCESSES = ("worker", "gateway", "agents", "mail-ingress", "memory")

_REGISTRIES: dict[str, CollectorRegistry] = {}
_LOCK = threading.Lock()


def registry(process: str) -> CollectorRegistry:
    """The registry of ``process`` (one of :data:`PROCESSES`), made on first use
    with the process's own CPU, memory and file descriptor series
    (``process_*``, ``python_info``)."""
    if process not in PROCESSES:
        raise ValueError(f"unknown process {process!r}: one of {', '.join(PROCESSES)}")
    with _LOCK:
        found = _REGISTRIES.get(process)
        if found is None:
            found = _REGISTRIES[process] = CollectorRegistry()
            ProcessCollector(registry=found)
            PlatformCollector(registry=found)
        return found


def metrics_line(process: str, url: str) -> str:
    """The line a process says when its metrics are served (``lemongraph dev``
    prints one per process; the form is pinned)."""
    return f"metrics: {process} {url}"


class MetricsServer:
    """``registry(process)`` over HTTP on ``host:port`` (0: a free port), in a
    daemon thread; ``url`` is where ``/metrics`` answers once started."""

    def __init__(self, process: str, host: str, port: int) -> None:
        self.process = process
        self.host = host
        self.port = port
        self.url = ""
        self._server: Any = None

    def start(self) -> MetricsServer:
        """Listen; raises ``ConfigError`` naming the setting when the port is taken."""
        try:
            server, _thread = start_http_server(
                self.port, addr=self.host, registry=registry(self.process)
            )
        except OSError as exc:
            raise ConfigError(
                f"port {self.port} is in use or cannot be listened on ({exc.strerror}): the "
                f"{self.process}'s metrics; set LEMONGRAPH_METRICS_PORT to change it "
                "(0: a free port)"
            ) from None
        self._server = server
        self.port = int(server.server_port)
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        self.url = f"http://{shown}:{self.port}/metrics"
        return self

    def stop(self) -> None:
        """Stop serving (a server that never started: nothing)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def serve_metrics(
    process: str, port: int | None, host: str, say: Callable[[str], None]
) -> MetricsServer | None:
    """Serve ``process``'s metrics when ``port`` is set (LEMONGRAPH_METRICS_PORT;
    None: off) and say where (:func:`metrics_line`)."""
    if port is None:
        return None
    server = MetricsServer(process, host, port).start()
    say(metrics_line(process, server.url))
    return server
