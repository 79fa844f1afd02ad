"""The browser transport in live mode (`config.mode = "live"`): the same wire messages, driven by the
realtime voice API (the local peer through the real openai client)."""

from __future__ import annotations

import json

import pytest
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from realtime_peer import RealtimePeer, Say

from voiceagent.llm.realtime import OpenAIRealtimeClient
from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))


async def until(comm, predicate, timeout=8.0):
    import asyncio

    seen = []
    async with asyncio.timeout(timeout):
        while True:
            m = json.loads(await comm.receive_from(timeout))
            seen.append(m)
            if predicate(m):
                return seen


async def start_live() -> WebsocketCommunicator:
    """A browser socket that asked for a live conversation of the banking scenario."""
    comm = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    assert (await comm.connect())[0]
    await comm.receive_from()
    await comm.send_to(
        text_data=json.dumps({"type": "config", "payload": {"scenario": "banking", "mode": "live"}})
    )
    await comm.send_to(text_data=json.dumps({"type": "control", "payload": {"action": "start"}}))
    return comm


async def test_live_mode_over_the_browser_socket(fake_runtime):
    with RealtimePeer(api_key="rt-key") as peer:
        fake_runtime.__dict__["_realtime_client"] = OpenAIRealtimeClient(
            "gpt-realtime", api_key="rt-key", base_url=f"{peer.url}/v1", connect_timeout=3
        )
        peer.push(Say("Your card is blocked."))
        comm = await start_live()
        greeting = await until(comm, lambda m: m["type"] == "response" and m["payload"]["final"])
        assert greeting[-1]["payload"]["agent"] == "concierge"
        await comm.send_to(text_data=json.dumps({"type": "text", "payload": {"text": "block my card"}}))
        seen = await until(
            comm,
            lambda m: m["type"] == "response" and m["payload"]["final"] and "blocked" in m["payload"]["text"],
        )
        assert any(m["type"] == "audio" for m in seen + greeting)
        sessions = [c for c in peer.connections]
        assert sessions and sessions[0].path.endswith("/realtime")
        await comm.disconnect()
    await fake_runtime.stop_realtime()


async def test_live_mode_without_a_realtime_api_is_a_clear_error(fake_runtime, settings):
    """No realtime API configured (no offline one exists): the start fails with a reason, the socket
    stays open and the cascade still works on it."""
    from voiceagent.config import load_config

    fake_runtime.__dict__.pop("_realtime_client", None)
    settings.CONFIG = load_config({})  # nothing realtime configured
    comm = await start_live()
    error = (await until(comm, lambda m: m["type"] == "error"))[-1]["payload"]
    assert error["code"] == "start_failed" and "realtime voice API" in error["message"]
    await comm.send_to(text_data=json.dumps({"type": "config", "payload": {"mode": "cascade"}}))
    await comm.send_to(text_data=json.dumps({"type": "control", "payload": {"action": "start"}}))
    greeting = await until(comm, lambda m: m["type"] == "response" and m["payload"]["final"])
    assert greeting[-1]["payload"]["agent"] == "concierge"
    await comm.disconnect()


async def test_a_live_start_that_failed_is_not_retried_by_every_audio_frame(fake_runtime, settings, caplog):
    """The page's microphone goes on sending 50 frames a second after the start failed: one WARNING
    and one error for the failure, not one per frame; the client's next explicit start retries."""
    import asyncio

    from voiceagent.config import load_config

    fake_runtime.__dict__.pop("_realtime_client", None)
    settings.CONFIG = load_config({})  # nothing realtime configured
    comm = await start_live()
    await until(comm, lambda m: m["type"] == "error")
    frame = bytes(640)  # 20 ms of 16 kHz PCM16
    for _ in range(100):
        await comm.send_to(bytes_data=frame)
    await comm.send_to(text_data=json.dumps({"type": "control", "payload": {"action": "start"}}))
    retried = await until(comm, lambda m: m["type"] == "error")
    await asyncio.sleep(0.1)
    assert await comm.receive_nothing(0.2)
    assert [m["payload"]["code"] for m in retried if m["type"] == "error"] == ["start_failed"]
    failures = [r for r in caplog.records if "could not start conversation" in r.getMessage()]
    assert len(failures) == 2, [r.getMessage() for r in failures]  # the first start and the retry
    await comm.disconnect()
