"""Tracing is off unless an OTLP endpoint is configured: no provider, no exporter, no middleware."""

from __future__ import annotations

import pytest
from django.core.exceptions import MiddlewareNotUsed

from voiceagent.observability import tracing


@pytest.fixture
def no_endpoint(monkeypatch):
    for name in tracing.ENDPOINT_VARS:
        monkeypatch.delenv(name, raising=False)


async def test_no_endpoint_no_exporter(no_endpoint, monkeypatch):
    import opentelemetry.exporter.otlp.proto.http.trace_exporter as otlp

    made = []
    monkeypatch.setattr(otlp.OTLPSpanExporter, "__init__", lambda self, *a, **k: made.append(self))
    assert await tracing.start() == "off (no OTEL_EXPORTER_OTLP_ENDPOINT)"
    assert not tracing.enabled() and made == []
    await tracing.stop()


def test_no_endpoint_no_middleware(no_endpoint):
    with pytest.raises(MiddlewareNotUsed):
        tracing.TracingMiddleware(lambda request: None)


def test_service_name_from_the_standard_variables(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "va-east")
    try:
        assert tracing.setup().endswith("as va-east")
        attributes = tracing._tracing.provider.resource.attributes
        assert attributes["deployment.environment"] == "test"
    finally:
        tracing.shutdown()
