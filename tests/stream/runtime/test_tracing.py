"""The tracing module's own parts (docs/operations.md, "Tracing"): off unless
an OTLP endpoint is set (and then nothing is built), the service name per
process, the W3C headers a record carries, and a worker that does not trace
passing a record's context on."""

from __future__ import annotations

import time

import pytest
from opentelemetry import trace

from stream.engine.app import trace_batch
from stream.engine.batch import Batch, Output, Record
from stream.runtime.tracing import (
    carried,
    context_of,
    current_headers,
    endpoint,
    headers_of,
    resumed,
    span,
    start_tracing,
    tracer,
    with_current,
)
from tests.otlp import Receiver

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_off_unless_an_endpoint_is_set() -> None:
    assert endpoint({}) is None
    assert endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}) is None
    assert endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == "http://c:4318/v1/traces"
    assert endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert endpoint({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/t"}) == "http://c/t"
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert endpoint({**on, "OTEL_SDK_DISABLED": "true"}) is None
    assert endpoint({**on, "OTEL_TRACES_EXPORTER": "none"}) is None
    said: list[str] = []
    assert start_tracing("memory", said.append, {}) is None
    assert said == []
    assert tracer("memory") is None
    # Off, a hook builds nothing: no span, no context, no headers.
    with span("memory", "anything", {"a": 1}) as made:
        assert made is None
        assert current_headers() is None
    with resumed("memory", [("traceparent", PARENT.encode())]):
        assert not trace.get_current_span().get_span_context().is_valid
    assert with_current([("x", b"1")]) == [("x", b"1")]
    with pytest.raises(ValueError, match="unknown process"):
        start_tracing("scheduler", said.append, on)


def test_a_record_carries_its_trace_in_w3c_headers() -> None:
    headers = [("lemongraph.forwarded-from", b"p1@2"), ("traceparent", PARENT.encode())]
    assert carried(headers) == [("traceparent", PARENT.encode())]
    assert carried([("tracestate", b"a=b")]) is None  # no traceparent: no trace
    assert carried([]) is None
    context = trace.get_current_span(context_of(headers)).get_span_context()
    assert f"{context.trace_id:032x}" == PARENT.split("-")[1]
    assert headers_of(context_of(headers)) == [("traceparent", PARENT.encode())]


def test_a_process_exports_under_its_own_name(monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = Receiver().start()
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    said: list[str] = []
    try:
        started = start_tracing(
            "mail-ingress", said.append, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        )
        assert started is not None
        assert said == [
            f"tracing: mail-ingress as lemongraph-mail-ingress to {receiver.url}/v1/traces"
        ]
        with span("mail-ingress", "outer") as outer:
            assert outer is not None
            ours = current_headers()
            assert ours is not None
            # A dead letter's headers keep the rest, with the current trace's.
            assert with_current([("traceparent", PARENT.encode()), ("x", b"1")]) == [
                ("x", b"1"),
                *ours,
            ]
        started.stop()  # exports what is left
        assert tracer("mail-ingress") is None
        [got] = receiver.wait_for(lambda spans: len(spans) == 1, timeout=10)
        assert (got.service, got.name) == ("lemongraph-mail-ingress", "outer")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "mail-eu")
        again = start_tracing("mail-ingress", said.append, {"OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
        assert again is not None
        assert again.service == "mail-eu"
        again.stop()
    finally:
        receiver.stop()


def _batch(n: int, headers: list[tuple[str, bytes]]) -> Batch:
    batch = Batch()
    for i in range(n):
        record = Record("p.inbox", 0, i, b"job-%d" % i, b"{}", 0, headers)
        outputs = [Output("p.tasks", record.key, b"{}", 0)]
        batch.decided("traced", "applied", record, True, outputs)
        batch.outputs.extend(outputs)
    return batch


def test_a_worker_that_does_not_trace_passes_the_context_on() -> None:
    assert tracer("worker") is None
    batch = _batch(2, [("traceparent", PARENT.encode())])
    trace_batch(batch, "p.tasks", time.monotonic())
    assert [o.headers for o in batch.outputs] == [[("traceparent", PARENT.encode())]] * 2
    untraced = _batch(2, [])
    assert untraced.traced == []  # never noted: nothing to do per record
