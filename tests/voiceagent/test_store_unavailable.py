"""Readers and probes during a store outage (issue 12): the session readers answer 503 ``{"detail"}``
with ``Retry-After`` (never a 500 with a traceback at ERROR), ``/ready`` and ``/readiness`` say the
cache is down while a private Redis is stopped, and everything answers again when it is back."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from asgiref.sync import sync_to_async
from private_redis import RestartableRedis

from agents_app import sessions
from voiceagent import components
from voiceagent.health import views
from voiceagent.health.checks import register_check, registered
from voiceagent.lifecycle import Lifecycle

pytestmark = pytest.mark.django_db(transaction=True)
TABLE = "agents_app_historyturn"


@pytest.fixture
def redis_server():
    with RestartableRedis() as server:
        yield server


@pytest.fixture
def private_cache(redis_server, settings):
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}
    settings.REDIS_URL = url
    return redis_server


@pytest.fixture
def started(monkeypatch):
    """A lifecycle whose startup is complete, behind the health views."""
    cycle = Lifecycle()
    monkeypatch.setattr(views, "lifecycle", cycle)
    return cycle


@pytest.fixture
def cache_check():
    saved = registered()
    register_check("cache", components._cache_roundtrip)
    yield
    from voiceagent.health import checks

    checks._checks.clear()
    checks._checks.update(saved)


def errors_logged(caplog) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]


def assert_unavailable(response, store: str) -> None:
    assert response.status_code == 503, response.content
    assert response.json() == {"detail": f"The {store} is unavailable; try again in a few seconds."}
    assert int(response["Retry-After"]) > 0


async def test_session_readers_answer_503_while_redis_is_down(private_cache, api_client, caplog):
    get = sync_to_async(api_client.get)
    post = sync_to_async(api_client.post)
    sid = f"reader-{uuid.uuid4().hex[:8]}"
    await sessions.db_call(sessions.create_session, sid, "banking", "concierge")
    assert (await get(f"/api/v1/sessions/{sid}")).status_code == 200

    private_cache.stop()
    caplog.clear()
    for path in (f"/api/v1/sessions/{sid}", f"/api/v1/agents?session_id={sid}"):
        assert_unavailable(await get(path), "session cache")
    assert_unavailable(await post(f"/api/v1/sessions/{sid}/reset"), "session cache")
    assert not errors_logged(caplog)  # one WARNING per request, no traceback at ERROR
    assert any("503" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)

    private_cache.start()
    await sessions.db_call(sessions.create_session, sid, "banking", "concierge")  # the cache came back empty
    assert (await get(f"/api/v1/sessions/{sid}")).status_code == 200


def _sql(statement: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement)


async def test_session_reader_answers_503_while_the_database_fails(api_client, caplog):
    sid = f"dbread-{uuid.uuid4().hex[:8]}"
    await sessions.db_call(sessions.create_session, sid, "banking", "concierge")
    await sessions.db_call(_sql, f"ALTER TABLE {TABLE} RENAME TO {TABLE}_away")
    try:
        caplog.clear()
        assert_unavailable(await sync_to_async(api_client.get)(f"/api/v1/sessions/{sid}"), "database")
    finally:
        await sessions.db_call(_sql, f"ALTER TABLE {TABLE}_away RENAME TO {TABLE}")
    assert not errors_logged(caplog)
    assert (await sync_to_async(api_client.get)(f"/api/v1/sessions/{sid}")).status_code == 200


async def test_ready_and_readiness_tell_the_cache_is_down_and_back(
    private_cache, api_client, started, cache_check, caplog
):
    get = sync_to_async(api_client.get)
    await started.startup()
    async with asyncio.timeout(10):
        while not started.deferred_startup_complete:
            await asyncio.sleep(0.01)
    ready = await get("/api/v1/ready")
    assert ready.status_code == 200 and ready.json()["details"]["cache"]["status"] == "healthy"

    private_cache.stop()
    caplog.clear()
    ready = await get("/api/v1/ready")
    assert ready.status_code == 503
    body = ready.json()
    assert body["ready"] is False and body["status"] == "unavailable"
    assert body["details"]["cache"]["status"] == "unhealthy" and "Redis" in body["details"]["cache"]["detail"]
    readiness = await get("/api/v1/readiness")
    assert readiness.status_code == 503
    cache = next(c for c in readiness.json()["checks"] if c["component"] == "cache")
    assert cache["status"] == "unhealthy"
    assert not errors_logged(caplog)

    private_cache.start()
    ready = await get("/api/v1/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert (await get("/api/v1/readiness")).status_code == 200
    await started.shutdown()
