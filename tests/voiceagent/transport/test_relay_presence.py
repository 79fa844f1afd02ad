"""With no dashboard connected anywhere, sockets relay only session events: transcripts, response
deltas and levels are thousands of channel-layer publishes a second at hundreds of conversations,
read by nobody (the capacity benchmark's loop time). A dashboard that opens gets the live-session
snapshot, and from then on everything."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.auth import AuthMiddlewareStack
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from voiceagent.routing import websocket_urlpatterns
from voiceagent.transport import relay

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))


async def drain(layer, channel: str) -> list[dict]:
    out = []
    while True:
        try:
            out.append(await asyncio.wait_for(layer.receive(channel), 0.3))
        except TimeoutError:
            return out


async def converse(text: str) -> None:
    comm = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps({"type": "text", "payload": {"text": text}}))
    async with asyncio.timeout(10):
        while True:
            m = json.loads(await comm.receive_from(10))
            if m["type"] == "response" and m["payload"]["final"]:
                break
    await comm.disconnect()


@pytest.fixture
def no_dashboard_anywhere(monkeypatch):
    """What the presence read from the shared cache says when no worker has a dashboard."""
    monkeypatch.setattr(relay.presence, "local", 0)  # dashboards of earlier tests that never closed
    monkeypatch.setattr(relay.presence, "_remote", False)
    monkeypatch.setattr(relay.presence, "_checked", float("inf"))  # no re-read during the test


async def test_without_dashboards_only_session_events_are_relayed(fake_runtime, no_dashboard_anywhere):
    layer = get_channel_layer()
    spy = await layer.new_channel()
    await layer.group_add(relay.ALL_GROUP, spy)
    await converse("hello")
    kinds = {m["message"]["type"] for m in await drain(layer, spy)}
    assert kinds == {"event"}, kinds

    dashboard = WebsocketCommunicator(APP, "/api/v1/browser/dashboard/relay")
    assert (await dashboard.connect())[0]
    await converse("hello again")
    kinds = {m["message"]["type"] for m in await drain(layer, spy)}
    assert {"event", "transcript", "response"} <= kinds, kinds
    await dashboard.disconnect()
    assert relay.presence.local == 0
