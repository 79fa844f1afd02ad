"""Health endpoints: bodies and status codes of the spec and CONTRACTS.md."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from voiceagent.health import views
from voiceagent.health.checks import register_check, registered
from voiceagent.lifecycle import Lifecycle

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_cycle(monkeypatch):
    cycle = Lifecycle()
    monkeypatch.setattr(views, "lifecycle", cycle)
    return cycle


def test_health_body(api_client):
    response = api_client.get("/api/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"status", "timestamp", "message", "active_sessions", "session_metrics"}
    assert body["status"] == "healthy"
    assert isinstance(body["timestamp"], float)
    assert isinstance(body["message"], str)
    assert set(body["session_metrics"]) == {"connected", "disconnected", "active"}
    assert all(isinstance(v, int) for v in body["session_metrics"].values())


def test_health_counts_connections(api_client):
    from voiceagent.connections import tracker

    tracker.reset()
    tracker.opened("browser")
    tracker.opened("phone")
    tracker.closed("phone")
    tracker.opened("dashboard")
    body = api_client.get("/api/v1/health").json()
    assert body["active_sessions"] == 1
    # a dashboard is a viewer, not a session: in none of the session metrics (connected was 3)
    assert body["session_metrics"] == {"connected": 2, "disconnected": 1, "active": 1}
    tracker.reset()


async def test_ready_is_503_until_deferred_steps_complete(api_client, fresh_cycle):
    warm_gate = asyncio.Event()

    async def warmup():
        await warm_gate.wait()
        fresh_cycle.warmup_results.update(openai=True, tts_pool=4, stt_pool=2)

    fresh_cycle.register("warmup", "probe", start=warmup)
    await fresh_cycle.startup()
    response = await sync_to_async(api_client.get)("/api/v1/ready")
    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False and body["status"] == "starting"
    assert body["warmup_completed"] is False and body["mcp_ready"] is True
    assert body["deferred_startup_complete"] is False

    warm_gate.set()
    for _ in range(100):
        if fresh_cycle.deferred_startup_complete:
            break
        await asyncio.sleep(0.01)
    response = await sync_to_async(api_client.get)("/api/v1/ready")
    assert response.status_code == 200
    body = response.json()
    expected = {
        "ready",
        "timestamp",
        "deferred_startup_complete",
        "warmup_completed",
        "mcp_ready",
        "details",
        "status",
        "mcp",
        "pools",
    }
    assert expected <= set(body)
    assert body["ready"] is True and body["status"] == "ready"
    assert body["details"]["warmup_results"] == {"openai": True, "tts_pool": 4, "stt_pool": 2}
    assert body["details"]["mcp_servers"] == {}
    assert body["mcp"] == "none"
    assert set(body["pools"]) == {"tts", "stt"}
    await fresh_cycle.shutdown()


async def test_ready_reports_mcp_servers(api_client, fresh_cycle, monkeypatch):
    monkeypatch.setattr(
        views,
        "mcp_status_source",
        lambda: {
            "crm": {"status": "healthy", "tools_count": 3},
            "docs": {"status": "unhealthy", "tools_count": 0},
        },
    )
    await fresh_cycle.startup()
    await asyncio.sleep(0.01)
    body = (await sync_to_async(api_client.get)("/api/v1/ready")).json()
    assert body["details"]["mcp_servers"]["crm"] == {"status": "healthy", "tools_count": 3}
    assert body["mcp"] == "partial"
    await fresh_cycle.shutdown()


@pytest.fixture
def restore_checks():
    from voiceagent.health import checks

    saved = registered()
    yield
    checks._checks.clear()
    checks._checks.update(saved)


def test_readiness_body_and_components(api_client, restore_checks):
    from voiceagent import components

    register_check("cache", components._cache_roundtrip)
    register_check("auth_configuration", components._auth_check)
    response = api_client.get("/api/v1/readiness")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    names = [c["component"] for c in body["checks"]]
    assert names == ["cache", "llm", "speech", "telephony", "agents", "auth_configuration", "mcp"]
    for check in body["checks"]:
        assert set(check) == {"component", "status", "detail", "check_time_ms"}
        assert check["status"] in {"healthy", "unhealthy", "not_configured"}
    cache = next(c for c in body["checks"] if c["component"] == "cache")
    assert cache["status"] == "healthy" and "local memory" in cache["detail"]


def test_readiness_unhealthy_is_503_and_checks_run_concurrently_with_timeout(
    api_client, restore_checks, monkeypatch
):
    from voiceagent.health import checks

    async def hangs():
        await asyncio.sleep(30)
        return "healthy", "never"

    async def slow_ok():
        await asyncio.sleep(0.3)
        return "healthy", "slow but fine"

    def raises():
        raise ConnectionError("refused")

    monkeypatch.setattr(checks, "CHECK_TIMEOUT_S", 0.5)
    monkeypatch.setattr(checks.run_checks, "__defaults__", (0.5,))
    register_check("llm", hangs)
    register_check("speech", slow_ok)
    register_check("telephony", raises)
    register_check("agents", slow_ok)
    response = api_client.get("/api/v1/readiness")
    assert response.status_code == 503
    by_name = {c["component"]: c for c in response.json()["checks"]}
    assert by_name["llm"]["status"] == "unhealthy" and "timed out" in by_name["llm"]["detail"]
    assert by_name["telephony"] == {**by_name["telephony"], "status": "unhealthy"}
    assert "ConnectionError: refused" in by_name["telephony"]["detail"]
    assert by_name["speech"]["status"] == "healthy"
    # concurrency: two 0.3 s checks and a 0.5 s timeout finished together, not one after another
    assert by_name["llm"]["check_time_ms"] < 1000
    assert by_name["speech"]["check_time_ms"] < 1000


def test_register_check_rejects_unknown_component():
    with pytest.raises(ValueError):
        register_check("coffee", lambda: ("healthy", ""))


def test_pools_body(api_client):
    body = api_client.get("/api/v1/pools").json()
    assert set(body) == {"pools", "timestamp"}
    for name in ("tts", "stt"):
        # a Whisper recogniser (the runtime's when an earlier test of this worker started one)
        # adds its queue; no other key may come or go
        assert set(body["pools"][name]) - {"queue"} == {
            "size",
            "available",
            "in_use",
            "utilization",
            "waiters",
            "acquired_total",
            "wait_ms_p95",
            "provider",
            # added when pools became warm sets that grow on demand (issue 11)
            "max_size",
            "clients",
            "refused_total",
            "created_total",
            "trimmed_total",
            "peak_in_use",
        }


async def test_pools_reflect_a_live_pool(api_client):
    from voiceagent.speech.pools import POOLS, ClientPool

    pool = ClientPool("tts", factory=object, size=2, provider="test", acquire_timeout=0.05, max_size=2)
    await pool.warm()
    POOLS["tts"] = pool
    try:
        client = await pool.acquire()
        body = (await sync_to_async(api_client.get)("/api/v1/pools")).json()["pools"]["tts"]
        assert body["size"] == 2 and body["in_use"] == 1 and body["available"] == 1
        assert body["utilization"] == 0.5 and body["acquired_total"] == 1 and body["provider"] == "test"
        await pool.release(client)
    finally:
        POOLS.pop("tts")


def test_appconfig_environment_provider(api_client):
    body = api_client.get("/api/v1/appconfig").json()
    assert body["provider"] == "environment"
    assert set(body) >= {"provider", "enabled", "source", "keys", "last_refresh", "status"}
    assert "VAD_SILENCE_TIMEOUT" in body["keys"]
    refreshed = api_client.post("/api/v1/appconfig/refresh").json()
    assert refreshed["changed"] == [] and refreshed["last_refresh"] is not None


def test_appconfig_file_provider_refresh_reports_changes(api_client, tmp_path, settings):
    from voiceagent import appconfig as appconfig_module
    from voiceagent.appconfig import AppConfig
    from voiceagent.config import load_config

    path = tmp_path / "tunables.yaml"
    path.write_text("TTS_VOICE: en-US-JennyNeural\nVAD_SILENCE_TIMEOUT: 800\n")
    provider = AppConfig(load_config({"APPCONFIG_FILE": str(path), "CLOUD_SPEECH_KEY": "sekrit-key-123"}))
    appconfig_module.reset_for_tests(provider)
    assert appconfig_module.get("TTS_VOICE") == "en-US-JennyNeural"
    assert appconfig_module.get("VAD_SILENCE_TIMEOUT") == 800
    assert appconfig_module.get("TTS_STYLE") == "chat"  # not in the file: the environment value
    body = api_client.get("/api/v1/appconfig").json()
    assert body["provider"] == "file" and body["enabled"] is True
    assert sorted(body["keys"]) == ["TTS_VOICE", "VAD_SILENCE_TIMEOUT"]
    assert "en-US-JennyNeural" not in str(body) and "sekrit" not in str(body)

    path.write_text(
        "TTS_VOICE: en-US-JennyNeural\nVAD_SILENCE_TIMEOUT: 650\nTTS_RATE: '-5%'\nSECRET_KEY: nope\n"
    )
    body = api_client.post("/api/v1/appconfig/refresh").json()
    assert body["changed"] == ["TTS_RATE", "VAD_SILENCE_TIMEOUT"]
    assert body["ignored_keys"] == ["SECRET_KEY"]
    assert appconfig_module.get("VAD_SILENCE_TIMEOUT") == 650

    path.write_text("VAD_SILENCE_TIMEOUT: soon\n")
    body = api_client.post("/api/v1/appconfig/refresh").json()
    assert body["status"] == "error" and "VAD_SILENCE_TIMEOUT" in body["error"]
    assert body["changed"] == []
    assert appconfig_module.get("VAD_SILENCE_TIMEOUT") == 650  # last good value kept


async def test_appconfig_timer_rereads_the_file(tmp_path):
    from voiceagent.appconfig import AppConfig
    from voiceagent.config import load_config

    path = tmp_path / "tunables.json"
    path.write_text('{"TTS_STYLE": "friendly"}')
    provider = AppConfig(load_config({"APPCONFIG_FILE": str(path), "APPCONFIG_REFRESH_INTERVAL": "1"}))
    provider.interval = 0.05
    provider.start_timer()
    path.write_text('{"TTS_STYLE": "cheerful"}')
    for _ in range(100):
        if provider.get("TTS_STYLE") == "cheerful":
            break
        await asyncio.sleep(0.02)
    await provider.stop_timer()
    assert provider.get("TTS_STYLE") == "cheerful"


def test_schema_and_swagger(api_client):
    schema = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (
        "/api/v1/health",
        "/api/v1/ready",
        "/api/v1/readiness",
        "/api/v1/pools",
        "/api/v1/appconfig",
        "/api/v1/appconfig/refresh",
    ):
        assert path in paths
    docs = api_client.get("/api/v1/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


@pytest.fixture
def production_with_key(settings):
    from voiceagent.config import load_config

    settings.CONFIG = load_config(
        {
            "ENVIRONMENT": "production",
            "SECRET_KEY": "k" * 30 + "abcdefghijklmnopqrstuvwxyz0123",
            "ALLOWED_HOSTS": "testserver",
            "API_KEYS": "probe-key-123456",
            "CACHE_HOST": "redis.internal.example",
            "CACHE_PORT": "6390",
        }
    )
    settings.PRODUCTION = True


@pytest.mark.parametrize("path", ["/api/v1/ready", "/api/v1/readiness"])
def test_anonymous_probes_in_production_get_the_status_only(api_client, production_with_key, path):
    """Issue 31.6: anonymous /ready and /readiness named the Redis host and port, the model
    provider and counts. Anonymous: the status; with a key: everything, as before."""
    anonymous = api_client.get(path)
    assert set(anonymous.json()) <= {"ready", "status", "timestamp"}, anonymous.json()
    assert "redis.internal" not in anonymous.content.decode() and "6390" not in anonymous.content.decode()
    wrong_key = api_client.get(path, HTTP_AUTHORIZATION="Bearer not-the-key")
    assert wrong_key.status_code == anonymous.status_code and set(wrong_key.json()) == set(anonymous.json())
    keyed = api_client.get(path, HTTP_AUTHORIZATION="Bearer probe-key-123456")
    assert keyed.status_code == anonymous.status_code
    assert {"details", "checks"} & set(keyed.json()), keyed.json()
