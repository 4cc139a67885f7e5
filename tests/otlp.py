"""A test's OTLP receiver: a real HTTP server that takes what the SDK's
OTLP/HTTP exporter posts to ``/v1/traces`` and decodes it with
opentelemetry-proto (the exporter's own dependency): each span with its
service, trace, parent and attributes (docs/operations.md, "Tracing")."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids as hex)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        self.receiver.take(ExportTraceServiceRequest.FromString(body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        return


class Receiver:
    """``/v1/traces`` on a free port of 127.0.0.1, in a thread; ``spans`` is
    what was received so far."""

    def __init__(self) -> None:
        handler = type("Handler", (_Handler,), {"receiver": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self, request: ExportTraceServiceRequest) -> None:
        got = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    got.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name", "")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self._lock:
            self.posts += 1
            self.spans.extend(got)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 60
    ) -> list[ReceivedSpan]:
        """The spans received, once ``found`` holds of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                spans = list(self.spans)
            if found(spans):
                return spans
            time.sleep(0.1)
        raise AssertionError(f"the spans never held; received: {self.spans}")
