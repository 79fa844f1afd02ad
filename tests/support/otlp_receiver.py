"""A local OTLP/HTTP trace receiver: ``POST /v1/traces`` with an ``ExportTraceServiceRequest``
(protobuf, optionally gzip), decoded with ``opentelemetry-proto`` as a collector would.

Tests point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at :attr:`OtlpReceiver.url` and read the spans that
arrived as plain :class:`ReceivedSpan` records (ids in hex, attributes as Python values).
"""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from threaded_server import ThreadedAsgiServer


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(items) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpReceiver(ThreadedAsgiServer):
    label = "otlp-receiver"

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_id=span.parent_span_id.hex(),
                                start_ns=span.start_time_unix_nano,
                                end_ns=span.end_time_unix_nano,
                                kind=span.kind,
                                attributes=_attributes(span.attributes),
                                resource=resource,
                            )
                        )

    def wait_for(self, predicate, timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans received, once ``predicate(spans)`` holds (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the spans received never matched: {[s.name for s in spans]}")
            time.sleep(0.05)

    def _app(self):
        async def app(scope, receive, send):
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            headers = dict(scope["headers"])
            if scope["method"] != "POST" or scope["path"] != "/v1/traces":
                status, payload = 404, b""
            else:
                if headers.get(b"content-encoding") == b"gzip":
                    body = gzip.decompress(body)
                self._take(body)
                status, payload = 200, ExportTraceServiceResponse().SerializeToString()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/x-protobuf")],
                }
            )
            await send({"type": "http.response.body", "body": payload})

        return app


@contextlib.contextmanager
def tracing_into(monkeypatch) -> Iterator[OtlpReceiver]:
    """A receiver, and the service's tracing on and exporting to it (flushed and off afterwards)."""
    from voiceagent.observability import tracing

    with OtlpReceiver() as peer:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", peer.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        assert tracing.setup().startswith(f"OTLP/HTTP to {peer.url}/v1/traces")
        try:
            yield peer
        finally:
            tracing.shutdown()
