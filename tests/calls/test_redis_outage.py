"""A Redis outage seen from the calls app (issue 12, point 1): a private redis-server, stopped and
started again by the test, behind Django's cache and the channels-redis layer.

* the relay's audio flag keeps its last value and the dashboard relay skips (each logged once per
  outage, not per frame), and both work again when Redis is back;
* a browser conversation mid-call: the socket stays open, the turns typed during the outage are
  answered, and afterwards the session's state is back in the cache and every turn in the history.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from private_redis import RestartableRedis

from agents_app import sessions
from voiceagent.routing import websocket_urlpatterns
from voiceagent.transport import relay
from voiceagent.transport.channel_layer import RedisChannelLayer
from voiceagent.transport.relay import AudioRelayFlag, mark_audio_wanted, publish

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))


@pytest.fixture
def redis_server():
    with RestartableRedis() as server:
        yield server


@pytest.fixture
def private_redis(redis_server, settings):
    """The cache and the channel layer on the private Redis, as ``CACHE_HOST`` configures them."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "voiceagent.transport.channel_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [url]},
        }
    }
    settings.REDIS_URL = url
    relay.flag_outage.ok()
    relay.relay_outage.ok()
    return redis_server


def warnings_about(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


async def eventually(check, timeout: float = 20.0):
    async with asyncio.timeout(timeout):
        while not (result := await check()):
            await asyncio.sleep(0.1)
    return result


async def test_audio_flag_keeps_its_value_and_logs_once_per_outage(private_redis, caplog):
    caplog.set_level(logging.INFO, "voiceagent.transport.relay")
    sid = f"flag-{uuid.uuid4().hex[:8]}"
    flag = AudioRelayFlag(sid)
    await mark_audio_wanted(sid)
    assert await flag.wanted() is True

    private_redis.stop()
    for _ in range(3):  # a check each second: every one fails
        await asyncio.sleep(1.05)
        for _ in range(50):  # frames in between use the value in hand
            assert await flag.wanted() is True
    await mark_audio_wanted(sid)  # a dashboard's refresh during the outage does not raise either
    assert len(warnings_about(caplog, "audio flags")) == 1

    private_redis.start()  # empty: nobody follows the session's audio any more

    async def reads_false():
        flag._checked = 0.0  # the next call reads the cache (instead of waiting a second)
        return await flag.wanted() is False

    await eventually(reads_false)
    assert any("is back" in r.getMessage() for r in caplog.records if r.name == "voiceagent.transport.relay")


async def test_dashboard_relay_skips_during_an_outage_and_delivers_after(private_redis, caplog):
    caplog.set_level(logging.INFO, "voiceagent.transport.relay")
    url = f"redis://127.0.0.1:{private_redis.port}/0"
    layer = RedisChannelLayer(hosts=[url])
    sid = f"relay-{uuid.uuid4().hex[:8]}"
    channel = await layer.new_channel()
    await layer.group_add(relay.session_group(sid), channel)

    def message(n: int) -> dict:
        return {"type": "audio_levels", "payload": {"n": n}, "session_id": sid, "ts": 0.0}

    private_redis.stop()
    for n in range(100):
        await publish(layer, message(n), dashboards=False)  # never raises
    assert len(warnings_about(caplog, "dashboard relay")) == 1

    private_redis.start()
    await layer.group_add(relay.session_group(sid), channel)  # the groups went with Redis's memory
    await publish(layer, message(100), dashboards=False)
    received = await asyncio.wait_for(layer.receive(channel), 10)
    assert received["message"]["payload"] == {"n": 100}
    assert any("is back" in r.getMessage() for r in caplog.records if r.name == "voiceagent.transport.relay")
    await layer.flush()


async def receive_json(comm, timeout: float = 10.0) -> dict:
    return json.loads(await comm.receive_from(timeout))


async def until(comm, predicate, timeout: float = 20.0) -> list[dict]:
    seen: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            output = await comm.receive_output(timeout)
            assert output["type"] != "websocket.close", f"the socket closed: {output}; after {seen[-5:]}"
            message = json.loads(output["text"])
            seen.append(message)
            if predicate(message):
                return seen


def answered(m: dict) -> bool:
    return m["type"] == "response" and m["payload"]["final"] and m["payload"]["text"].startswith("Sure")


def listening(m: dict) -> bool:
    return m["type"] == "event" and m["payload"].get("state") == "listening"


async def said_so_far(sid: str) -> list[tuple[str, str]]:
    """The session's user turns and the agents' answers in the database (the greeting, cut by the
    first typed turn before any of it played, is left out)."""
    await sessions.history_writer().flush()
    rows = await sessions.db_call(sessions.history, sid)
    return [(r["role"], r["content"]) for r in rows if r["role"] == "user" or r["content"].startswith("Sure")]


async def type_turn(comm, sid: str, text: str, expected: list[tuple[str, str]]) -> None:
    """Type ``text``; the answer comes with audio, and once it has played it is in the history
    (the next turn would cut it otherwise, as a caller talking over the agent does)."""
    await comm.send_to(text_data=json.dumps({"type": "text", "payload": {"text": text}}))
    seen = await until(comm, answered)
    assert any(m["type"] == "transcript" and m["payload"]["text"] == text for m in seen)
    seen += await until(comm, listening)
    assert any(m["type"] == "audio" for m in seen)  # audio went out: the relay flag was read
    expected += [("user", text), ("assistant", "Sure, I can help with that.")]

    async def written():
        return await said_so_far(sid) == expected

    await eventually(written)


async def test_browser_conversation_goes_on_through_a_redis_outage(private_redis, fake_runtime):
    comm = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    assert (await comm.connect())[0]
    sid = (await receive_json(comm))["session_id"]
    await comm.send_to(text_data=json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
    expected: list[tuple[str, str]] = []
    await type_turn(comm, sid, "before the outage", expected)

    private_redis.stop()
    await asyncio.sleep(1.1)  # the relay flag's next read falls in the outage
    await type_turn(comm, sid, "during the outage", expected)
    await type_turn(comm, sid, "still down", expected)

    private_redis.start()
    state = await eventually(lambda: sessions.db_call(sessions.load_state, sid))  # written from memory
    assert state.scenario == "banking"
    await type_turn(comm, sid, "after the outage", expected)
    assert await said_so_far(sid) == expected
    await comm.disconnect()


def is_error(code: str):
    return lambda m: m["type"] == "error" and m["payload"]["code"] == code


async def test_messages_that_need_the_store_get_an_error_and_the_socket_stays(private_redis, fake_runtime):
    live = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    assert (await live.connect())[0]
    await receive_json(live)
    await live.send_to(text_data=json.dumps({"type": "text", "payload": {"text": "hello"}}))
    await until(live, answered)

    private_redis.stop()
    # a live conversation asked to save overrides: that fails, the conversation does not
    overrides = {"type": "config", "payload": {"overrides": {"temperature": 0.5}}}
    await live.send_to(text_data=json.dumps(overrides))
    error = (await until(live, is_error("store_unavailable")))[-1]
    assert "unavailable" in error["payload"]["message"]
    await live.send_to(text_data=json.dumps({"type": "text", "payload": {"text": "still talking"}}))
    await until(live, answered)
    # a new caller cannot start while the shared state is out of reach: told so, not cut off
    new = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    assert (await new.connect())[0]
    await receive_json(new)
    await new.send_to(text_data=json.dumps({"type": "text", "payload": {"text": "anyone there"}}))
    await until(new, is_error("store_unavailable"))

    private_redis.start()
    await new.send_to(text_data=json.dumps({"type": "text", "payload": {"text": "anyone there"}}))
    await until(new, answered)
    await new.disconnect()
    await live.disconnect()
