"""The registry of live sessions in the shared cache: one slot per process, expiry of a dead one."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.core.cache import cache

from voiceagent.transport.live import LiveRegistry


def started(session_id: str, transport: str = "browser") -> dict:
    payload = {"name": "session_started", "session_id": session_id, "transport": transport}
    return {"type": "event", "payload": payload, "session_id": session_id, "ts": time.time()}


def ended(session_id: str) -> dict:
    return {
        "type": "event",
        "payload": {"name": "session_ended"},
        "session_id": session_id,
        "ts": time.time(),
    }


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


async def observe(registry: LiveRegistry, message: dict) -> None:
    if registry.observe(message):
        await registry.flush()


async def test_each_process_sees_the_others_sessions_and_their_agent():
    worker_a, worker_b = LiveRegistry(), LiveRegistry()
    await observe(worker_a, started("a-1"))
    await observe(worker_b, started("b-1", "phone"))
    handoff = {"type": "event", "payload": {"name": "handoff", "from": "x", "to": "auth_agent"}}
    await observe(worker_b, {**handoff, "session_id": "b-1"})
    seen = {e["session_id"]: e for e in await LiveRegistry().live()}
    assert set(seen) == {"a-1", "b-1"}
    assert (seen["b-1"]["transport"], seen["b-1"]["agent"]) == ("phone", "auth_agent")
    assert [e["session_id"] for e in await worker_a.live("b-1")] == ["b-1"]

    await observe(worker_b, ended("b-1"))
    assert [e["session_id"] for e in await LiveRegistry().live()] == ["a-1"]
    await observe(worker_a, ended("a-1"))
    assert await LiveRegistry().live() == []


async def test_a_killed_workers_sessions_expire():
    dead = LiveRegistry(ttl_s=1, refresh_s=3600)
    await observe(dead, started("gone-1"))
    assert [e["session_id"] for e in await LiveRegistry().live()] == ["gone-1"]
    dead._task.cancel()  # the process dies: nothing refreshes its slot any more
    await asyncio.sleep(1.3)
    assert await LiveRegistry().live() == []


async def test_a_slot_lost_while_silent_is_not_overwritten():
    slow = LiveRegistry(ttl_s=1, refresh_s=3600)
    await observe(slow, started("slow-1"))
    await asyncio.sleep(1.3)  # its slot expired (say, a blocked loop) and another worker took it
    other = LiveRegistry()
    await observe(other, started("other-1"))
    await slow.flush()
    seen = {e["session_id"] for e in await LiveRegistry().live()}
    assert seen == {"slow-1", "other-1"}
    slow._task.cancel()


async def test_a_dashboard_opened_later_sees_who_has_a_call_and_which_session_is_a_monitor():
    from voiceagent.transport.live import snapshot_message

    worker = LiveRegistry()
    monitor = started("m-1", "contactcenter")
    monitor["payload"]["monitor"] = True
    await observe(worker, monitor)
    await observe(worker, started("c-1"))
    taken = {"type": "event", "payload": {"name": "takeover", "by": "alice"}, "session_id": "c-1"}
    assert worker.observe(taken) is True  # written at once: a dashboard opening next sees it
    await worker.flush()
    seen = {e["session_id"]: snapshot_message(e)["payload"] for e in await LiveRegistry().live()}
    assert seen["m-1"]["monitor"] is True and "taken_over_by" not in seen["m-1"]
    assert seen["c-1"]["taken_over_by"] == "alice" and "monitor" not in seen["c-1"]
    back = {"type": "event", "payload": {"name": "handback", "by": "alice"}, "session_id": "c-1"}
    await observe(worker, back)
    seen = {e["session_id"]: snapshot_message(e)["payload"] for e in await LiveRegistry().live()}
    assert "taken_over_by" not in seen["c-1"]
