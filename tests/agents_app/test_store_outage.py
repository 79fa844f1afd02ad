"""The engine's Django store rides out outages (issue 12, "degrade, never drop"): session state
through a private Redis that the test stops and starts again, history through a database table
that goes missing for a while. Nothing raises into the engine; nothing accepted is lost."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from private_redis import RestartableRedis

from agents_app import sessions
from agents_app.history_writer import HistoryWriter
from agents_app.sessions import DjangoSessionStore, db_call
from voiceagent.conversation.session import HandoffEvent, SessionState, Turn

pytestmark = pytest.mark.django_db(transaction=True)
TABLE = "agents_app_historyturn"


@pytest.fixture
def redis_server():
    with RestartableRedis() as server:
        yield server


@pytest.fixture
def private_cache(redis_server, settings):
    """Django's cache on the private Redis, as ``CACHE_HOST`` configures it."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "voiceagent",
        }
    }
    settings.REDIS_URL = url
    return redis_server


async def eventually(check, timeout: float = 20.0, every: float = 0.1):
    """``await check()`` until it returns something truthy (a generous limit, not a measurement)."""
    async with asyncio.timeout(timeout):
        while not (result := await check()):
            await asyncio.sleep(every)
    return result


def _sql(statement: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement)


async def history_table_gone() -> None:
    await db_call(_sql, f"ALTER TABLE {TABLE} RENAME TO {TABLE}_away")


async def history_table_back() -> None:
    await db_call(_sql, f"ALTER TABLE {TABLE}_away RENAME TO {TABLE}")


def messages(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def test_state_saved_during_a_redis_outage_is_written_when_redis_is_back(private_cache, caplog):
    caplog.set_level(logging.INFO, "agents_app.sessions")
    store = DjangoSessionStore()
    sid = f"outage-{uuid.uuid4().hex[:8]}"
    state = SessionState(session_id=sid, scenario="banking", active_agent="concierge", transport="browser")
    await store.save(state)
    assert (await db_call(sessions.load_state, sid)).active_agent == "concierge"

    private_cache.stop()
    for step in range(5):  # several saves during the outage: none raises, the newest wins
        state.memory["step"] = step
        await store.save(state)
    state.active_agent = "auth_agent"
    await store.record_handoff(state, HandoffEvent("concierge", "auth_agent", "announced"))
    kept = await store.load(sid)  # this process reads its own newest state meanwhile
    assert kept.memory["step"] == 4 and kept.active_agent == "auth_agent"
    with pytest.raises(Exception, match="(?i)connect"):  # readers still see the outage (-> 503)
        await db_call(sessions.load_state, sid)
    warnings = [m for m in messages(caplog, logging.WARNING) if sid in m]
    assert len(warnings) == 1 and "kept in memory" in warnings[0], warnings  # once per outage

    private_cache.start()  # empty: a cache that lost its memory
    written = await eventually(lambda: db_call(sessions.load_state, sid))
    assert written.memory["step"] == 4 and written.active_agent == "auth_agent"
    assert written.handoffs == [
        {"from": "concierge", "to": "auth_agent", "type": "announced", "at": written.handoffs[0]["at"]}
    ]
    assert any(sid in m and "state written" in m for m in messages(caplog, logging.INFO))
    assert not sessions.state_writer().pending
    await store.flush()
    assert [h["to"] for h in (await db_call(sessions.session_body, sid))["handoffs"]] == ["auth_agent"]


async def test_saves_after_the_outage_write_at_once_and_in_order(private_cache):
    store = DjangoSessionStore()
    sid = f"order-{uuid.uuid4().hex[:8]}"
    state = SessionState(session_id=sid, scenario="banking", active_agent="concierge")
    private_cache.stop()
    state.memory["n"] = 1
    await store.save(state)
    private_cache.start()
    await eventually(lambda: db_call(sessions.load_state, sid))
    state.memory["n"] = 2
    await store.save(state)  # written directly again, not behind an older pending state
    assert (await db_call(sessions.load_state, sid)).memory["n"] == 2


async def test_history_write_is_retried_until_the_database_answers(caplog):
    caplog.set_level(logging.INFO, "agents_app.sessions")
    store = DjangoSessionStore()
    sid = f"dbretry-{uuid.uuid4().hex[:8]}"
    state = SessionState(session_id=sid, scenario="banking", active_agent="concierge")
    await history_table_gone()
    try:
        await store.append_turn(state, Turn(role="user", content="my card is gone", agent="concierge"))
        await store.append_turn(state, Turn(role="assistant", content="Let me help.", agent="concierge"))

        async def failed_once():
            return any("history write failed" in m and sid in m for m in messages(caplog, logging.WARNING))

        await eventually(failed_once)
    finally:
        await history_table_back()
    await sessions.history_writer().flush()
    rows = await db_call(sessions.history, sid)
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", "my card is gone"),
        ("assistant", "Let me help."),
    ]
    assert not messages(caplog, logging.ERROR)


async def test_history_that_cannot_be_written_is_logged_with_session_and_role(caplog):
    caplog.set_level(logging.INFO, "agents_app.sessions")
    writer = HistoryWriter(sessions._write_batch_off_loop, retry_for_s=0.5, first_delay=0.05)
    sid = f"dblost-{uuid.uuid4().hex[:8]}"
    await history_table_gone()
    try:
        turn = Turn(role="user", content="my secret words", agent="a")
        await writer.put(("turn", sid, turn, "banking", None))
        await writer.put(("handoff", sid, HandoffEvent("a", "b", "announced")))
        await writer.flush()
    finally:
        await history_table_back()
    errors = messages(caplog, logging.ERROR)
    assert len(errors) == 1, errors  # the handoff row has its own table: only the turn is lost
    assert sid in errors[0] and "user" in errors[0] and "my secret words" not in errors[0]
    assert writer.lost_total == 1
    assert [h["to"] for h in (await db_call(sessions.session_body, sid))["handoffs"]] == ["b"]
