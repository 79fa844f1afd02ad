"""Dashboard relay: one session or all sessions, end-conversation close, read-only socket."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))


def msg(type_, **payload) -> str:
    return json.dumps({"type": type_, "payload": payload})


async def open_ws(path):
    comm = WebsocketCommunicator(APP, path)
    assert (await comm.connect())[0]
    return comm


async def collect(comm, predicate, timeout=5.0):
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            m = json.loads(await comm.receive_from(timeout))
            seen.append(m)
            if predicate(m):
                return seen


async def test_dashboard_follows_one_session_and_all(fake_runtime):
    everything = await open_ws("/api/v1/browser/dashboard/relay")
    only_a = await open_ws("/api/v1/browser/dashboard/relay?session_id=sess-a")
    for comm in (everything, only_a):
        assert json.loads(await comm.receive_from())["payload"]["name"] == "relay_connected"
    browser_a = await open_ws("/api/v1/browser/conversation?session_id=sess-a")
    browser_b = await open_ws("/api/v1/browser/conversation?session_id=sess-b")
    await browser_a.send_to(text_data=msg("text", text="hello from a"))
    await browser_b.send_to(text_data=msg("text", text="hello from b"))
    seen_a = await collect(only_a, lambda m: m["type"] == "transcript")
    assert seen_a[-1]["payload"]["text"] == "hello from a" and seen_a[-1]["session_id"] == "sess-a"
    assert seen_a[0]["payload"]["name"] == "session_started"
    texts = set()
    await collect(
        everything,
        lambda m: m["type"] == "transcript" and texts.add(m["payload"]["text"]) is None and len(texts) == 2,
    )
    assert texts == {"hello from a", "hello from b"}
    await asyncio.sleep(0.2)
    assert not any(json.loads(f)["session_id"] == "sess-b" for f in await drain(only_a))
    await everything.send_to(text_data="anything")
    reply = json.loads(await everything.receive_from())
    while reply["type"] != "error":
        reply = json.loads(await everything.receive_from())
    assert reply["payload"]["code"] == "read_only"
    for comm in (browser_a, browser_b, everything, only_a):
        await comm.disconnect()


async def drain(comm):
    frames = []
    while not await comm.receive_nothing(0.05):
        frames.append(await comm.receive_from())
    return frames


async def test_dashboard_bad_session_id(fake_runtime):
    comm = await open_ws("/api/v1/browser/dashboard/relay?session_id=no%20spaces")
    out = await comm.receive_output(2)
    assert out["type"] == "websocket.close" and out["code"] == 1008


async def test_dashboard_opened_mid_conversation_is_sent_the_live_sessions(fake_runtime):
    from voiceagent.transport.live import live_sessions

    live_sessions.reset()  # sessions an earlier test left open are not this test's
    browser = await open_ws("/api/v1/browser/conversation?session_id=live-1")
    await browser.send_to(text_data=msg("text", text="hello"))
    await collect(browser, lambda m: m["type"] == "response" and m["payload"]["final"])

    everything = await open_ws("/api/v1/browser/dashboard/relay")
    connected = json.loads(await everything.receive_from())
    assert connected["payload"]["name"] == "relay_connected" and connected["payload"]["live_sessions"] == 1
    snapshot = json.loads(await everything.receive_from())
    assert set(snapshot) == {"type", "payload", "session_id", "ts"}
    assert snapshot["type"] == "event" and snapshot["session_id"] == "live-1"
    payload = snapshot["payload"]
    assert payload["name"] == "session_started" and payload["snapshot"] is True
    assert (payload["session_id"], payload["transport"]) == ("live-1", "browser")
    assert payload["agent"] and isinstance(payload["started_ts"], float)

    only_other = await open_ws("/api/v1/browser/dashboard/relay?session_id=someone-else")
    assert json.loads(await only_other.receive_from())["payload"]["live_sessions"] == 0
    assert await only_other.receive_nothing(0.2)

    await browser.disconnect()  # the tab closes: dashboards are told, the session is no longer live
    ended = await collect(everything, lambda m: m["payload"].get("name") == "session_ended")
    assert ended[-1]["session_id"] == "live-1"
    later = await open_ws("/api/v1/browser/dashboard/relay")
    assert json.loads(await later.receive_from())["payload"]["live_sessions"] == 0
    assert await later.receive_nothing(0.2)
    for comm in (everything, only_other, later):
        await comm.disconnect()


def limits(settings, **values: str) -> None:
    from voiceagent.config import load_config

    settings.CONFIG = load_config(values)


async def past_the_snapshot(comm) -> None:
    """Read ``relay_connected`` and the snapshot events it announces (sessions another test in this
    process left live), so that the next message read is the answer to what the test sends."""
    connected = json.loads(await comm.receive_from())["payload"]
    assert connected["name"] == "relay_connected"
    for _ in range(connected["live_sessions"]):
        await comm.receive_from()


async def closed_with(comm, timeout: float = 3.0) -> tuple[int, str]:
    async with asyncio.timeout(timeout):
        while True:
            out = await comm.receive_output(timeout)
            if out["type"] == "websocket.close":
                return out["code"], out.get("reason", "")


async def test_dashboards_over_the_connection_limit_are_refused_1013(fake_runtime, settings):
    from voiceagent.connections import tracker

    limits(settings, DASHBOARD_MAX_CONNECTIONS="2")
    first = await open_ws("/api/v1/browser/dashboard/relay")
    second = await open_ws("/api/v1/browser/dashboard/relay?session_id=sess-a")
    third = await open_ws("/api/v1/browser/dashboard/relay")
    assert await closed_with(third) == (1013, "server busy: too many dashboards, try again later")
    assert tracker.active_count("dashboard") == 2
    await first.disconnect()
    again = await open_ws("/api/v1/browser/dashboard/relay")  # a place came free
    assert json.loads(await again.receive_from())["payload"]["name"] == "relay_connected"
    for comm in (second, again):
        await comm.disconnect()
    assert tracker.active_count("dashboard") == 0


async def test_a_dashboard_message_over_the_size_limit_closes_1009(fake_runtime, settings):
    limits(settings, DASHBOARD_MAX_MESSAGE_BYTES="1024")
    comm = await open_ws("/api/v1/browser/dashboard/relay")
    await past_the_snapshot(comm)
    await comm.send_to(text_data="x" * 100)
    assert json.loads(await comm.receive_from())["payload"]["code"] == "read_only"
    await comm.send_to(bytes_data=bytes(2000))
    assert await closed_with(comm) == (1009, "message too big: 2000 bytes, the limit is 1024")


async def test_a_dashboard_flooding_the_relay_is_closed_1008(fake_runtime, settings):
    limits(settings, DASHBOARD_MAX_MESSAGES_PER_SECOND="5", WEBSOCKET_RATE_BURST_S="1")
    comm = await open_ws("/api/v1/browser/dashboard/relay")
    await past_the_snapshot(comm)
    for _ in range(50):
        await comm.send_to(text_data="{}")
    code_reason = None
    async with asyncio.timeout(5):
        while code_reason is None:
            out = await comm.receive_output(5)
            if out["type"] == "websocket.close":
                code_reason = out["code"], out.get("reason", "")
            else:  # the read_only errors of the messages within the rate
                assert json.loads(out["text"])["payload"]["code"] == "read_only"
    assert code_reason == (1008, "too many messages: the limit is 5 per second")
