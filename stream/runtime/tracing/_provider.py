"""One tracer provider per process kind, exporting over OTLP/HTTP, and only
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
is set (docs/operations.md, "Tracing").

``lemongraph dev`` runs the worker and the gateway in one process: like their
metrics registries (stream/runtime/metrics/_serve.py), each kind has a provider
of its own, so each exports under its own ``service.name``
(``lemongraph-worker``, ``lemongraph-gateway``, ...). None is made the global
provider: nothing but lemongraph's own spans is exported.

The SDK reads the standard variables itself: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` (the
sampler), ``OTEL_BSP_*`` (the batch processor), ``OTEL_EXPORTER_OTLP_*``
(headers, timeout, compression); ``OTEL_SDK_DISABLED=true`` and
``OTEL_TRACES_EXPORTER=none`` turn it off."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.trace import Tracer

from stream.runtime.metrics import PROCESSES

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["Tracing", "endpoint", "start_tracing", "stop_tracing", "tracer", "tracing_line"]

#: The process kind's tracer, once started (read on every span: a dict lookup).
_TRACERS: dict[str, Tracer] = {}
_STARTED: dict[str, Tracing] = {}
_LOCK = threading.Lock()


def endpoint(env: Mapping[str, str]) -> str | None:
    """Where spans are exported (the traces endpoint as the exporter resolves
    it), or None when tracing is off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return None
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not base:
        return None
    return base if base.endswith("/v1/traces") else base.rstrip("/") + "/v1/traces"


def tracing_line(process: str, service: str, url: str) -> str:
    """The line a process says when it exports its spans."""
    return f"tracing: {process} as {service} to {url}"


@dataclass
class Tracing:
    """A process kind's provider, exporting to ``url`` as ``service``."""

    process: str
    service: str
    url: str
    provider: TracerProvider

    def stop(self) -> None:
        """Export what is left and stop (a process calls this as it stops)."""
        stop_tracing(self.process)


def start_tracing(
    process: str, say: Callable[[str], None], env: Mapping[str, str] | None = None
) -> Tracing | None:
    """Start exporting ``process``'s spans (one of the metrics' PROCESSES) when
    an OTLP endpoint is set, and say where; None (and nothing made) when it is
    not. Started twice, the first one is kept."""
    if process not in PROCESSES:
        raise ValueError(f"unknown process {process!r}: one of {', '.join(PROCESSES)}")
    env = os.environ if env is None else env
    url = endpoint(env)
    if url is None:
        return None
    # The SDK and its exporter are imported only here, where tracing is on: they
    # are a tenth of a process's imports (about 60 ms of CPU at every start).
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with _LOCK:
        found = _STARTED.get(process)
        if found is not None:
            return found
        # OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) wins;
        # else the process's own name.
        named = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
        resource = Resource.create({} if named else {SERVICE_NAME: f"lemongraph-{process}"})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
        service = str(resource.attributes.get(SERVICE_NAME, ""))
        started = _STARTED[process] = Tracing(process, service, url, provider)
        _TRACERS[process] = provider.get_tracer("lemongraph")
    say(tracing_line(process, service, url))
    return started


def stop_tracing(process: str) -> None:
    """Flush and shut down ``process``'s provider (not started: nothing)."""
    with _LOCK:
        found = _STARTED.pop(process, None)
        _TRACERS.pop(process, None)
    if found is not None:
        found.provider.shutdown()


def tracer(process: str) -> Tracer | None:
    """``process``'s tracer, or None when it does not trace (then no span is
    made at all: the hooks' cost is this lookup)."""
    return _TRACERS.get(process)
