"""New phone and contact-center connections while the session store is down (issue 12, point 1):
a clear refusal the client can act on (try again later), one WARNING line, no traceback.

Before, the media stream's call-map lookup (or a simulator's new session) raised the cache's
``ConnectionError`` out of ``connect`` (close 1011 and an ERROR traceback), and an AudioHook
``open`` failed the same way instead of a ``disconnect`` with its reason.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from acs_media_client import over_communicator
from audiohook_client import ORG, AudioHookClient
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from private_redis import RestartableRedis

from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))


@pytest.fixture
def redis_down(settings):
    """The cache on a private Redis that is stopped: every cache call fails to connect."""
    with RestartableRedis() as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        settings.CACHES = {
            "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
        }
        server.stop()
        yield server


def problems(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    "path, headers",
    [
        ("/api/v1/media/stream", [(b"x-ms-call-connection-id", b"call-during-outage")]),
        ("/api/v1/media/stream?scenario=default", []),  # a simulator creates its session
    ],
    ids=["placed-call", "simulator"],
)
async def test_a_media_stream_opened_during_an_outage_is_refused_with_1013(redis_down, caplog, path, headers):
    comm = WebsocketCommunicator(APP, path, headers=headers)
    connected, _ = await comm.connect()
    assert connected
    closed = await comm.receive_output(10)
    while closed["type"] != "websocket.close":
        closed = await comm.receive_output(10)
    assert closed["code"] == 1013, closed
    assert "session cache is unavailable; try again later" in closed["reason"]
    assert not problems(caplog)
    assert any("media stream refused (1013)" in r.getMessage() for r in caplog.records)


async def test_an_audiohook_open_during_an_outage_is_disconnected_with_its_reason(redis_down, caplog):
    session_id = str(uuid.uuid4())
    headers = {
        "audiohook-organization-id": ORG,
        "audiohook-session-id": session_id,
        "audiohook-correlation-id": str(uuid.uuid4()),
    }
    comm = WebsocketCommunicator(
        APP,
        "/api/v1/contactcenter/stream",
        headers=[(k.encode(), v.encode()) for k, v in headers.items()],
        subprotocols=["audiohook-v2"],
    )
    assert (await comm.connect())[0]
    client = AudioHookClient(over_communicator(comm), session_id=session_id)
    await client.open()
    message = await client.expect("disconnect")
    assert message["parameters"]["reason"] == "error"
    assert "session cache is unavailable; try again later" in message["parameters"]["info"]
    assert not problems(caplog)
