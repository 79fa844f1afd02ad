"""The AudioHook monitor's consumer in process, on instant scripted speech: which channel is whose
(in any offered order), frames discarded while the client has paused, the media it refuses, the
last words at the close, and the protocol's errors (the real recogniser: test_monitor.py)."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest
from audiohook_client import ORG, STEREO, AudioHookClient, over_communicator
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from voiceagent.routing import websocket_urlpatterns
from voiceagent.speech.audio import ulaw_encode

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
PATH = "/api/v1/contactcenter/monitor"
SAMPLES = 1600  # 200 ms at 8 kHz
TONE = np.frombuffer(
    ulaw_encode((np.sin(np.arange(SAMPLES) * 2 * np.pi * 440 / 8000) * 8000).astype("<i2")), np.uint8
)
QUIET = np.full(SAMPLES, 0xFF, np.uint8)  # mu-law silence
REVERSED = {**STEREO, "channels": ["internal", "external"]}
INTERNAL = {**STEREO, "channels": ["internal"]}


async def connect() -> tuple[WebsocketCommunicator, AudioHookClient]:
    session_id = str(uuid.uuid4())
    headers = {
        "audiohook-organization-id": ORG,
        "audiohook-session-id": session_id,
        "audiohook-correlation-id": str(uuid.uuid4()),
    }
    comm = WebsocketCommunicator(APP, PATH, headers=[(k.encode(), v.encode()) for k, v in headers.items()])
    assert (await comm.connect())[0]
    return comm, AudioHookClient(over_communicator(comm), session_id=session_id)


def frame(channels: list[str], speaking: str | None) -> bytes:
    """200 ms interleaved in ``channels`` order, the tone on ``speaking`` (None: all quiet)."""
    parts = [TONE if name == speaking else QUIET for name in channels]
    return np.stack(parts, axis=1).reshape(-1).tobytes()


async def turn(client: AudioHookClient, channels: list[str], speaking: str) -> None:
    """Speech on one channel (0.8 s), then 3 s of silence: the turn ends."""
    for _ in range(4):
        await client.send_audio(frame(channels, speaking))
    for _ in range(15):
        await client.send_audio(frame(channels, None))
    await asyncio.sleep(0.05)


async def history(session_id: str, count: int) -> list[dict]:
    """The stored history once it holds ``count`` turns, read as the service reads it
    (``db_call``: on SQLite through the one thread the consumer writes on; from another thread the
    in-memory test database answered "database table is locked" when a read met a write, in CI)."""
    from agents_app import sessions

    for _ in range(100):
        turns = await sessions.db_call(sessions.history, session_id)
        if len(turns) >= count:
            return turns
        await asyncio.sleep(0.05)
    return turns


async def close(comm: WebsocketCommunicator, client: AudioHookClient) -> None:
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await client.wait_closed()
    await comm.wait()


def monitors_counted() -> float:
    from voiceagent.observability.metrics import CONVERSATIONS, ENABLED

    return CONVERSATIONS.labels("contactcenter", "monitor")._value.get() if ENABLED else 0.0


async def test_channels_are_whose_the_offer_says_whatever_their_order(fake_runtime):
    from voiceagent.observability.metrics import ENABLED

    counted = monitors_counted()
    fake_runtime.stt.texts.clear()
    fake_runtime.stt.texts.extend(["my card is gone", "i can block it"])
    comm, client = await connect()
    await client.open(media=[REVERSED])
    assert (await client.expect("opened"))["parameters"] == {"media": [REVERSED]}
    channels = REVERSED["channels"]
    await turn(client, channels, "external")
    assert len(await history(client.session_id, 1)) == 1
    await turn(client, channels, "internal")
    turns = await history(client.session_id, 2)
    await close(comm, client)
    assert [(t["role"], t["content"], t.get("speaker")) for t in turns] == [
        ("user", "my card is gone", None),
        ("assistant", "i can block it", "person"),
    ]
    assert client.audio == b""
    assert monitors_counted() == counted + (1 if ENABLED else 0)  # mode "monitor" in the metrics


async def test_frames_sent_while_paused_are_discarded(fake_runtime):
    fake_runtime.stt.texts.clear()
    fake_runtime.stt.texts.extend(["before the pause", "after the pause"])
    comm, client = await connect()
    await client.open(media=[STEREO])
    await client.expect("opened")
    for _ in range(4):  # still speaking when the client pauses: that turn ends there
        await client.send_audio(frame(STEREO["channels"], "external"))
    await asyncio.sleep(0.05)
    await client.send("paused")
    assert len(await history(client.session_id, 1)) == 1
    await turn(client, STEREO["channels"], "external")
    await asyncio.sleep(0.2)
    assert fake_runtime.stt.opened == 1, "audio sent while paused reached the recogniser"
    await client.send("resumed", {"start": "PT1S", "discarded": "PT3.8S"})
    await turn(client, STEREO["channels"], "external")
    turns = await history(client.session_id, 2)
    await close(comm, client)
    assert [t["content"] for t in turns] == ["before the pause", "after the pause"]
    assert client.types() == ["opened", "closed"]


async def test_a_mono_internal_offer_hears_the_person_and_the_last_words_survive_the_close(fake_runtime):
    fake_runtime.stt.texts.clear()
    fake_runtime.stt.texts.extend(["thanks for calling"])
    comm, client = await connect()
    await client.open(media=[INTERNAL])
    assert (await client.expect("opened"))["parameters"]["media"] == [INTERNAL]
    for _ in range(4):  # still speaking when the call closes
        await client.send_audio(TONE.tobytes())
    await asyncio.sleep(0.1)
    await close(comm, client)
    turns = await history(client.session_id, 1)
    assert [(t["role"], t["content"], t.get("speaker")) for t in turns] == [
        ("assistant", "thanks for calling", "person")
    ]


async def test_an_offer_without_pcmu_is_refused_and_a_protocol_error_ends_the_session(fake_runtime):
    comm, client = await connect()
    await client.open(media=[{**STEREO, "format": "L16"}])
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error"
    assert "PCMU" in disconnect["parameters"]["info"]
    await close(comm, client)
    comm, client = await connect()
    await client.open(media=[STEREO])
    await client.expect("opened")
    client.seq += 1  # a gap in the client's sequence
    await client.send("ping")
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error" and "seq" in disconnect["parameters"]["info"]
    await comm.disconnect()
