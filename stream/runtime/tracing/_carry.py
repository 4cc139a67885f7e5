"""A trace's context across Kafka (docs/operations.md, "Tracing"; docs/kafka.md,
"Headers"): the W3C ``traceparent`` and ``tracestate`` headers of a record,
written by the propagator OTEL_PROPAGATORS names (W3C trace context by
default). Headers only: a record's key and value, and so the golden
histories, are the same traced or not."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from stream.runtime.tracing._provider import _TRACERS, tracer

__all__ = [
    "TRACE_HEADERS",
    "annotate",
    "carried",
    "context_of",
    "current_headers",
    "headers_of",
    "resumed",
    "span",
    "with_current",
]

#: The headers of a record that carry its trace (W3C trace context).
TRACE_HEADERS = ("traceparent", "tracestate")

Headers = list[tuple[str, bytes]]

#: What :func:`span` gives when the process does not trace: no span is made.
_OFF: nullcontext[None] = nullcontext()


def carried(headers: Sequence[tuple[str, bytes]]) -> Headers | None:
    """The trace headers among ``headers`` (None: the record carries no trace)."""
    found = [(n, v) for n, v in headers if n in TRACE_HEADERS]
    return found if any(n == "traceparent" for n, _ in found) else None


def context_of(headers: Sequence[tuple[str, bytes]]) -> Context:
    """The context a record's headers carry (the root context when none)."""
    carrier = {n: v.decode("ascii", "replace") for n, v in headers if n in TRACE_HEADERS}
    return propagate.extract(carrier)


def headers_of(where: Span | Context | None = None) -> Headers:
    """The headers that carry ``where`` (a span, a context; None: the current
    context) to the next process."""
    ctx = trace.set_span_in_context(where) if isinstance(where, Span) else where
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return [(n, v.encode("ascii")) for n, v in carrier.items() if n in TRACE_HEADERS]


def current_headers() -> Headers | None:
    """The current span's headers, for a record produced under it; None when no
    process here traces or no span is current (cheap then)."""
    if not _TRACERS or not trace.get_current_span().get_span_context().is_valid:
        return None
    return headers_of() or None


def with_current(headers: Headers | None) -> Headers | None:
    """``headers`` with the current span's trace headers in place of any they
    carried (a dead letter keeps its original's headers); unchanged when no
    span is current."""
    ours = current_headers()
    if ours is None:
        return headers
    return [*((n, v) for n, v in headers or () if n not in TRACE_HEADERS), *ours]


@contextmanager
def _attached(ctx: Context) -> Iterator[None]:
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def resumed(process: str, headers: Sequence[tuple[str, bytes]]) -> Any:
    """A context manager under which the trace ``headers`` carry is current
    (what a record read starts, a task made then inherits); nothing when
    ``process`` does not trace or the record carries no trace."""
    if tracer(process) is None or carried(headers) is None:
        return _OFF
    return _attached(context_of(headers))


def span(
    process: str,
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Any:
    """A context manager for a span of ``process``, current inside it (its
    ``as`` target is the span, or None when ``process`` does not trace: then
    nothing is made). An exception out of it is recorded and sets its status."""
    found = tracer(process)
    if found is None:
        return _OFF
    return found.start_as_current_span(name, kind=kind, attributes=attributes)


def annotate(attributes: dict[str, AttributeValue]) -> None:
    """Set attributes on the current span (none recording: nothing)."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(attributes)
