"""Recording on the AudioHook bridge (in process, the live engine against the realtime peer): the
customer's mu-law frames, decoded, on the left; the agent's audio as played, on the right."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import numpy as np
import pytest
from audiohook_client import ORG, AudioHookClient, over_communicator
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from realtime_peer import RealtimePeer

from voiceagent.config import Config
from voiceagent.llm.realtime import OpenAIRealtimeClient
from voiceagent.recording import store
from voiceagent.routing import websocket_urlpatterns
from voiceagent.speech.audio import ulaw_encode

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
KEY = "rt-key-0123456789"
RATE = 8000
CALLER_HZ = 1000.0
FRAME = 1600  # 200 ms of mono mu-law


@pytest.fixture(scope="module")
def peer():
    with RealtimePeer(api_key=KEY) as server:
        yield server


@pytest.fixture
def bridge(fake_runtime, peer, settings, tmp_path):
    settings.CONFIG = Config(
        {
            **settings.CONFIG,
            "RECORDING_ENABLED": True,
            "RECORDING_SAMPLE_RATE": RATE,
            "RECORDING_WRITER": "thread",
        },
        {},
    )
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "rec", "allow_overwrite": True},
        },
    }
    peer.reset()
    fake_runtime.__dict__["_realtime_client"] = OpenAIRealtimeClient(
        "gpt-realtime", api_key=KEY, base_url=f"{peer.url}/v1", connect_timeout=3
    )
    yield tmp_path / "rec"
    fake_runtime.__dict__.pop("_realtime_client", None)
    peer.reset()


def caller_frame(index: int) -> bytes:
    t = (np.arange(FRAME) + index * FRAME) / RATE
    return ulaw_encode((np.sin(2 * np.pi * CALLER_HZ * t) * 8000).astype("<i2"))


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(float) ** 2))) if len(x) else 0.0


async def test_an_audiohook_session_is_recorded_customer_left_agent_right(bridge):
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
    await client.expect("opened")
    await client.send("ping", {"rtt": "PT0.01S"})
    await client.expect("pong")
    await client.collect_audio(0.8)  # the peer's greeting: 300 ms of a quiet 220 Hz tone, paced
    greeting_s = len(client.audio) / RATE
    assert greeting_s > 0.2
    for index in range(4):  # 0.8 s of the customer, in real time
        await client.send_audio(caller_frame(index))
        await asyncio.sleep(0.2)
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await comm.disconnect()

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        manifests = list(bridge.glob(f"{session_id}/*/manifest.json"))
        if manifests and json.loads(manifests[0].read_text()).get("ended_at"):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the recording was not closed")
    assert json.loads(manifests[0].read_text())["transport"] == "contactcenter"
    wav = await asyncio.to_thread(store.layout, session_id)
    both = np.frombuffer(await asyncio.to_thread(wav.read, 44, wav.size), np.int16).reshape(-1, 2)
    left, right = both[:, 0], both[:, 1]
    greeting = right[: int(greeting_s * RATE)]
    assert rms(greeting) > 150 and rms(left[: int(greeting_s * RATE)]) < 30  # the peer's quiet tone
    assert abs(np.argmax(np.abs(np.fft.rfft(greeting))) * RATE / len(greeting) - 220) < 10
    spoken = np.flatnonzero(np.abs(left) > 2000)
    assert len(spoken) > 0.5 * RATE and spoken[0] >= int(greeting_s * RATE) - RATE // 10
    window = left[spoken[0] : spoken[0] + RATE // 2].astype(float)
    assert abs(np.argmax(np.abs(np.fft.rfft(window))) * RATE / len(window) - CALLER_HZ) < 20
