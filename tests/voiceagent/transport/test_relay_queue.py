"""A socket's own client never waits for the dashboard relay (found by bench/bench_soak.py).

Every server message of a browser conversation or phone media stream is also published to the
channel layer for the dashboards: with Redis, two or three round trips per group, 12 ms on average
and up to half a second in a soak of 100 conversations on one worker. The sockets awaited each
publish before their next message, so the first audio of every answer waited behind the publishes
of the text before it. Now each socket queues its relay messages
(:class:`voiceagent.transport.relay.RelayQueue`) and a task of its own publishes them. Shown
without timing: the channel layer here is a Redis that accepts connections and never answers,
and the conversations go on.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from voiceagent.routing import websocket_urlpatterns
from voiceagent.transport.relay import RelayQueue

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
HANG_GUARD_S = 10.0  # only against a hang: the old code waited here for ever


async def until(comm, predicate) -> list[dict]:
    seen: list[dict] = []
    async with asyncio.timeout(HANG_GUARD_S):
        while True:
            output = await comm.receive_output(HANG_GUARD_S)
            assert output["type"] != "websocket.close", f"closed: {output}"
            seen.append(json.loads(output["text"]))
            if predicate(seen[-1]):
                return seen


def answered(m: dict) -> bool:
    return m["type"] == "response" and m["payload"]["final"] and m["payload"]["text"].startswith("Sure")


async def test_a_browser_conversation_is_answered_while_the_relay_hangs(hung_channel_layer, fake_runtime):
    comm = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    assert (await comm.connect())[0]
    await until(comm, lambda m: m["payload"].get("name") == "session_started")
    for text in ("hello", "i lost my card"):
        await comm.send_to(text_data=json.dumps({"type": "text", "payload": {"text": text}}))
        seen = await until(comm, answered)
        seen += await until(comm, lambda m: m["type"] == "event" and m["payload"].get("state") == "listening")
        assert any(m["type"] == "audio" for m in seen), seen  # the answer is heard too
    await comm.disconnect()  # what is still queued for the dashboards gets its grace, then goes


async def test_a_phone_stream_is_greeted_while_the_relay_hangs(hung_channel_layer, fake_runtime):
    comm = WebsocketCommunicator(APP, "/api/v1/media/stream?scenario=default&events=1")
    assert (await comm.connect())[0]
    await comm.send_to(
        text_data=json.dumps({"kind": "AudioMetadata", "audioMetadata": {"sampleRate": 16000}})
    )
    async with asyncio.timeout(HANG_GUARD_S):
        while True:
            message = json.loads((await comm.receive_output(HANG_GUARD_S))["text"])
            if message.get("kind") == "AudioData":
                break  # the greeting plays
    await comm.disconnect()


async def test_the_queue_is_bounded_and_publishes_in_order(monkeypatch):
    from voiceagent.transport import relay

    monkeypatch.setattr(relay.presence, "local", 1)  # a dashboard is there: levels are relayed
    published: list[int] = []
    release = asyncio.Event()

    class Layer:  # a channel layer that is slow until released
        async def group_send(self, group: str, event: dict) -> None:
            await release.wait()
            if group.startswith("session."):
                published.append(event["message"]["payload"]["n"])

    queue = RelayQueue(Layer(), max_messages=5)
    for n in range(8):
        queue.put({"type": "audio_levels", "payload": {"n": n}, "session_id": "s1"}, dashboards=False)
    release.set()
    await queue.close()
    assert queue.dropped == 3  # the oldest went: 0, 1, 2
    assert published == [3, 4, 5, 6, 7]
