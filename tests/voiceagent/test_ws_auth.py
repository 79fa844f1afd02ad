"""The WebSocket auth stack of the served application: a staff user's admin session opens the
browser socket when an API key is required (and an anonymous caller is refused), and the socket's
outbound messages reach the server through its own ``send``, not a per-message session wrapper."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore

from voiceagent.config import load_config
from voiceagent.routing import websocket_urlpatterns
from voiceagent.ws_auth import WebSocketAuthStack

pytestmark = pytest.mark.django_db(transaction=True)
STRONG = "s" * 30 + "abcdefghijklmnopqrstuvwxyz"
APP = WebSocketAuthStack(URLRouter(websocket_urlpatterns))  # as voiceagent/asgi.py serves sockets


@pytest.fixture
def production(settings):
    settings.CONFIG = load_config(
        {"ENVIRONMENT": "production", "SECRET_KEY": STRONG, "ALLOWED_HOSTS": "x", "API_KEYS": "ws-key-123456"}
    )
    settings.PRODUCTION = True


def staff_session() -> str:
    user = get_user_model().objects.create_user("ops", "ops@example.com", "pw-123456-xyz", is_staff=True)
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return session.session_key


async def opened(headers=None) -> tuple[WebsocketCommunicator, dict]:
    comm = WebsocketCommunicator(APP, "/api/v1/browser/conversation", headers=headers or [])
    connected, _ = await comm.connect()
    assert connected
    output = await comm.receive_output(3)
    return comm, output


async def test_a_staff_session_opens_the_browser_socket_and_no_session_is_refused(fake_runtime, production):
    key = await sync_to_async(staff_session)()
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={key}".encode()
    page = [(b"host", b"testserver"), (b"origin", b"http://testserver")]  # the service's own page
    comm, first = await opened([(b"cookie", cookie), *page])
    assert first["type"] == "websocket.send", first
    assert json.loads(first["text"])["payload"]["name"] == "session_started"
    await comm.disconnect()
    comm, first = await opened()
    assert first["type"] == "websocket.close" and first["code"] == 1008, first


async def test_the_socket_sends_through_the_servers_own_send():
    seen = {}

    async def inner(scope, receive, send):
        seen["send"], seen["session"] = send, scope["session"]

    async def server_send(message):
        return None

    scope = {"type": "websocket", "path": "/", "headers": [], "query_string": b""}
    await WebSocketAuthStack(inner)(scope, None, server_send)
    assert seen["send"] is server_send  # channels' AuthMiddlewareStack wraps every send
    assert seen["session"].session_key is None
