"""API keys: open development mode, required production mode, hashed storage, anonymous endpoints."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import override_settings

from voiceagent.config import load_config
from voiceagent.models import ApiKey, hash_key

pytestmark = pytest.mark.django_db
STRONG = "s" * 30 + "abcdefghijklmnopqrstuvwxyz"


def production(**env):
    cfg = load_config(
        {"ENVIRONMENT": "production", "SECRET_KEY": STRONG, "ALLOWED_HOSTS": "testserver", **env}
    )
    return override_settings(CONFIG=cfg, PRODUCTION=True)


def development(**env):
    return override_settings(CONFIG=load_config(env), PRODUCTION=False)


def test_development_without_keys_is_open(api_client):
    with development():
        assert api_client.get("/api/v1/pools").status_code == 200


def test_development_with_keys_requires_them(api_client):
    with development(API_KEYS="dev-key-123456"):
        assert api_client.get("/api/v1/pools").status_code == 401
        ok = api_client.get("/api/v1/pools", HTTP_AUTHORIZATION="Bearer dev-key-123456")
        assert ok.status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_AUTHORIZATION": "Bearer wrong-key-000"},
        {"HTTP_AUTHORIZATION": "Basic abc"},
        {"HTTP_X_API_KEY": "nope-nope"},
        {"HTTP_AUTHORIZATION": "Bearer " + "x" * 5000},
    ],
)
def test_production_rejects_missing_or_wrong_key(api_client, headers):
    with production(API_KEYS="prod-key-abcdef,second-key-zzz"):
        response = api_client.get("/api/v1/pools", **headers)
    assert response.status_code == 401
    assert set(response.json()) == {"detail"}
    assert "prod-key" not in response.content.decode()


def test_production_accepts_env_keys_both_headers(api_client):
    with production(API_KEYS="prod-key-abcdef,second-key-zzz"):
        assert api_client.get("/api/v1/pools", HTTP_AUTHORIZATION="Bearer second-key-zzz").status_code == 200
        assert api_client.get("/api/v1/appconfig", HTTP_X_API_KEY="prod-key-abcdef").status_code == 200
        assert (
            api_client.post("/api/v1/appconfig/refresh", HTTP_X_API_KEY="prod-key-abcdef").status_code == 200
        )


def test_production_without_any_key_refuses_everything(api_client):
    with production():
        assert api_client.get("/api/v1/pools").status_code == 401


def test_anonymous_endpoints_stay_open_in_production(api_client):
    with production(API_KEYS="prod-key-abcdef"):
        assert api_client.get("/api/v1/health", secure=True).status_code == 200
        assert api_client.get("/api/v1/readiness", secure=True).status_code in (200, 503)
        assert api_client.get("/api/v1/ready", secure=True).status_code in (200, 503)
        # even a wrong key does not break the anonymous endpoints
        assert (
            api_client.get("/api/v1/health", HTTP_AUTHORIZATION="Bearer bad", secure=True).status_code == 200
        )


def test_create_api_key_command_stores_only_a_hash(api_client):
    out = io.StringIO()
    call_command("create_api_key", "dashboard", stdout=out, stderr=io.StringIO())
    raw = out.getvalue().strip()
    assert raw.startswith("va_") and len(raw) > 40
    stored = ApiKey.objects.get(name="dashboard")
    assert stored.key_hash == hash_key(raw) and raw not in (stored.key_hash, stored.prefix)
    with production():
        assert api_client.get("/api/v1/pools", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
        stored.refresh_from_db()
        assert stored.last_used_at is not None
        stored.revoked = True
        stored.save()
        assert api_client.get("/api/v1/pools", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_auth_configuration_check_reports_mode():
    from voiceagent.components import _auth_check

    with development():
        assert _auth_check()[0] == "healthy" and "open" in _auth_check()[1]
    with production():
        assert _auth_check()[0] == "unhealthy"
    with production(API_KEYS="prod-key-abcdef"):
        status, detail = _auth_check()
        assert status == "healthy" and "required" in detail and "prod-key" not in detail


def test_admin_requires_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
