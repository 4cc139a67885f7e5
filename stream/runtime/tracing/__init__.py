"""OpenTelemetry traces (docs/operations.md, "Tracing"): off unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; then each long-running process exports
its spans over OTLP/HTTP under its own service name, and one trace follows an
input across processes through the records' W3C headers.

A process plugs in like its metrics (stream/runtime/metrics): call
``start_tracing("worker", say)`` once at start and ``stop()`` what it returns
as it stops; its hooks ask ``tracer("worker")`` (None: not tracing, so no
span object is built) or use ``span("worker", name, attributes)``.
No span carries message text, tool arguments or secrets."""

from stream.runtime.tracing._carry import (
    TRACE_HEADERS,
    annotate,
    carried,
    context_of,
    current_headers,
    headers_of,
    resumed,
    span,
    with_current,
)
from stream.runtime.tracing._provider import (
    Tracing,
    endpoint,
    start_tracing,
    stop_tracing,
    tracer,
    tracing_line,
)

__all__ = [
    "TRACE_HEADERS",
    "Tracing",
    "annotate",
    "carried",
    "context_of",
    "current_headers",
    "endpoint",
    "headers_of",
    "resumed",
    "span",
    "start_tracing",
    "stop_tracing",
    "tracer",
    "tracing_line",
    "with_current",
]
