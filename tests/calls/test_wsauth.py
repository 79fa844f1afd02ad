"""Sockets let in by a staff session cookie check the Origin (issue 31, point 3): a page on another
origin (a sibling subdomain, ``Origin: null``) cannot ride the operator's cookie to read every
live transcript; a client with an API key is let in by its key, whatever its origin."""

from __future__ import annotations

import json
import logging

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore

from calls.wsauth import FOREIGN_ORIGIN
from voiceagent.config import load_config
from voiceagent.routing import websocket_urlpatterns
from voiceagent.ws_auth import WebSocketAuthStack

pytestmark = pytest.mark.django_db(transaction=True)
STRONG = "s" * 30 + "abcdefghijklmnopqrstuvwxyz"
KEY = "ws-key-123456"
APP = WebSocketAuthStack(URLRouter(websocket_urlpatterns))
CONVERSATION = "/api/v1/browser/conversation"
RELAY = "/api/v1/browser/dashboard/relay"


@pytest.fixture
def production(settings):
    settings.CONFIG = load_config(
        {
            "ENVIRONMENT": "production",
            "SECRET_KEY": STRONG,
            "ALLOWED_HOSTS": "voice.example.com",
            "API_KEYS": KEY,
        }
    )
    settings.PRODUCTION = True
    settings.ALLOWED_HOSTS = ["voice.example.com", ".ops.example.net"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.org", "https://*.trusted.example.org"]


def staff_cookie() -> bytes:
    user = get_user_model().objects.create_user("ops", "ops@example.com", "pw-123456-xyz", is_staff=True)
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return f"{django_settings.SESSION_COOKIE_NAME}={session.session_key}".encode()


async def first_output(path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    comm = WebsocketCommunicator(APP, path, headers=[(b"host", b"voice.example.com"), *headers])
    connected, _ = await comm.connect()
    assert connected
    output = await comm.receive_output(3)
    await comm.disconnect()
    return output


def opened(output: dict) -> bool:
    return output["type"] == "websocket.send" and json.loads(output["text"])["type"] == "event"


@pytest.mark.parametrize(
    "origin",
    [
        "https://voice.example.com",  # the service's own page
        "http://voice.example.com",
        "https://console.example.org",  # CSRF_TRUSTED_ORIGINS
        "https://a.trusted.example.org",  # CSRF_TRUSTED_ORIGINS wildcard
        "https://dash.ops.example.net",  # an ALLOWED_HOSTS domain pattern
    ],
)
@pytest.mark.parametrize("path", [CONVERSATION, RELAY])
async def test_a_staff_cookie_from_an_allowed_origin_opens(fake_runtime, production, path, origin):
    cookie = await sync_to_async(staff_cookie)()
    assert opened(await first_output(path, [(b"cookie", cookie), (b"origin", origin.encode())]))


@pytest.mark.parametrize(
    "origin",
    [
        b"https://evil.example",
        b"https://evil.example.com",  # a sibling subdomain
        b"null",  # a sandboxed frame, a file: page
        b"https://voice.example.com.evil.example",
        b"https://console.example.org.evil.example",
        b"javascript://voice.example.com",
        None,
    ],
)
@pytest.mark.parametrize("path", [CONVERSATION, RELAY])
async def test_a_staff_cookie_from_another_origin_is_refused_1008(
    fake_runtime, production, path, origin, caplog
):
    cookie = await sync_to_async(staff_cookie)()
    headers = [(b"cookie", cookie)] + ([(b"origin", origin)] if origin is not None else [])
    with caplog.at_level(logging.INFO):
        output = await first_output(path, headers)
    assert output["type"] == "websocket.close" and output["code"] == 1008, output
    assert output["reason"] == FOREIGN_ORIGIN
    lines = [r for r in caplog.records if r.name == "calls.wsauth"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and not lines[0].exc_info
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("path", [CONVERSATION, RELAY])
async def test_an_api_key_client_is_unaffected_by_its_origin(fake_runtime, production, path):
    for headers in ([(b"origin", b"https://evil.example")], [(b"origin", b"null")], []):
        assert opened(await first_output(f"{path}?api_key={KEY}", headers))
        assert opened(await first_output(path, [(b"x-api-key", KEY.encode()), *headers]))
