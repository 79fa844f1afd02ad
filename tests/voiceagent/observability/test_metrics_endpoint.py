"""``GET /metrics``: protected like the API (401 without the key whenever keys exist, in development
too), anonymous with ``METRICS_PUBLIC``; the exposition format the scraper asks for."""

from __future__ import annotations

import pytest
from django.test import override_settings

from voiceagent.config import load_config

pytestmark = pytest.mark.django_db
STRONG = "s" * 30 + "abcdefghijklmnopqrstuvwxyz"
PROD = {"ENVIRONMENT": "production", "SECRET_KEY": STRONG, "ALLOWED_HOSTS": "testserver"}
KEY = "metrics-key-123456"


def test_metrics_need_the_api_key_when_keys_exist(api_client):
    for production, env in ((True, PROD), (False, {})):
        with override_settings(CONFIG=load_config({**env, "API_KEYS": KEY}), PRODUCTION=production):
            refused = api_client.get("/metrics", secure=True)
            assert refused.status_code == 401 and set(refused.json()) == {"detail"}
            wrong = api_client.get("/metrics", secure=True, HTTP_AUTHORIZATION="Bearer wrong")
            assert wrong.status_code == 401
            ok = api_client.get("/metrics", secure=True, HTTP_AUTHORIZATION=f"Bearer {KEY}")
            assert ok.status_code == 200 and b"# TYPE voiceagent_turns_total counter" in ok.content


def test_metrics_public_serves_without_a_key(api_client):
    public = load_config({**PROD, "API_KEYS": KEY, "METRICS_PUBLIC": "true"})
    with override_settings(CONFIG=public, PRODUCTION=True):
        assert api_client.get("/metrics", secure=True).status_code == 200
        assert api_client.get("/metrics", secure=True, HTTP_AUTHORIZATION="Bearer stale").status_code == 200
        assert api_client.get("/api/v1/pools", secure=True).status_code == 401  # the API stays closed


def test_metrics_open_in_development_without_keys(api_client):
    with override_settings(CONFIG=load_config({}), PRODUCTION=False):
        response = api_client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE voiceagent_turn_latency_seconds histogram" in response.content
    assert b"# TYPE voiceagent_conversations_total counter" in response.content


def test_metrics_speak_openmetrics_when_asked(api_client):
    with override_settings(CONFIG=load_config({}), PRODUCTION=False):
        response = api_client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


def test_metrics_off_count_nothing_and_say_so(api_client, monkeypatch):
    """METRICS_ENABLED=false (read when the module loads): no figure moves, /metrics is a 404."""
    from voiceagent.conversation.events import Error
    from voiceagent.observability import metrics

    monkeypatch.setattr(metrics, "ENABLED", False)
    before = metrics.ERRORS.labels("llm_error")._value.get()
    metrics.count_event(Error("s1", code="llm_error", message="x"), "browser")
    metrics.mcp_call("demo", "ok")
    assert metrics.ERRORS.labels("llm_error")._value.get() == before
    with override_settings(CONFIG=load_config({}), PRODUCTION=False):
        response = api_client.get("/metrics")
    assert response.status_code == 404
    assert "METRICS_ENABLED=false" in response.json()["detail"]
