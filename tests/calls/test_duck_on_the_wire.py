"""A backchannel over the agent reaches the wire as a duck, not a stop: the phone media stream sends
the agent's frames lowered by 20 dB while the caller's words are not known and at full level again
after, with no ``StopAudio`` and nothing of the answer sent twice; the browser is told ``duck``
(then ``duck`` 0) and its audio goes on. A real interruption still ends in ``StopAudio`` /
``barge_in``. Instant scripted providers (the recogniser answers hypotheses on demand, as
Whisper's streams do); the caller speaks in real time."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from acs_media_client import AcsMediaClient, over_communicator, silence, tone
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from voiceagent.conversation.testing import InstantTTS, ScriptedChat, ScriptedSTT
from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
ANSWER_WORDS = 150  # 3 s at 20 ms a word
LEVEL = 8000


def scripted(fake_runtime, caller_says: str) -> None:
    fake_runtime.stt = ScriptedSTT(
        ["i lost my card", caller_says] + ["i lost my card"] * 5, interim_after=10**9, on_demand=True
    )
    fake_runtime.tts = InstantTTS(sample_rate=24000, ms_per_word=20, chunk_ms=20, level=LEVEL)
    fake_runtime.chat = ScriptedChat(default=" ".join(["word"] * ANSWER_WORDS))


def frame_levels(pcm: bytes, rate: int = 16000) -> list[int]:
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], "<i2")
    size = rate // 50
    return [int(np.abs(samples[i : i + size]).max()) for i in range(0, len(samples) - size + 1, size)]


async def phone_call() -> tuple[WebsocketCommunicator, AcsMediaClient, int]:
    """A phone call whose agent is 0.3 s into its 3 s answer; returns where the answer's audio began."""
    comm = WebsocketCommunicator(APP, "/api/v1/media/stream?scenario=banking&events=1")
    connected, _ = await comm.connect()
    assert connected
    client = AcsMediaClient(over_communicator(comm))
    await client.metadata(16000)
    await client.event("agent_response", final=True)  # the greeting
    await client.collect(2.0)
    start = len(client.audio)
    await client.speak()
    await client.event("agent_response", final=True)
    async with asyncio.timeout(5):
        while len(client.audio) - start < 0.3 * 16000 * 2:
            await client.next_message()
    return comm, client, start


async def test_a_backchannel_ducks_the_phone_stream_and_the_answer_goes_on_whole(fake_runtime):
    scripted(fake_runtime, "uh-huh")
    comm, client, start = await phone_call()
    talking = asyncio.create_task(client.collect(4.0))  # the wire keeps being read meanwhile
    await client.audio_ms(tone(500, 16000), pace=0.02)  # "uh-huh", over the agent, in real time
    await client.audio_ms(silence(600, 16000), pace=0.02)
    await talking
    await comm.disconnect()
    assert not client.stops, "a backchannel must not stop the agent"
    levels = frame_levels(bytes(client.audio[start:]))
    ducked = [i for i, level in enumerate(levels) if 0 < level < LEVEL // 5]
    full = [i for i, level in enumerate(levels) if level > LEVEL * 0.8]
    assert ducked, "no frame went out ducked"
    assert all(0.05 * LEVEL < levels[i] < 0.15 * LEVEL for i in ducked)  # about -20 dB
    assert ducked == list(range(ducked[0], ducked[-1] + 1))  # one stretch
    assert full[0] < ducked[0] and full[-1] > ducked[-1]  # full level before and after it
    # the whole answer, once: nothing flushed, nothing said twice (within a frame's rounding)
    assert abs(len(levels) - ANSWER_WORDS) <= 2, len(levels)


async def test_a_real_interruption_still_stops_the_phone_stream(fake_runtime):
    scripted(fake_runtime, "wait stop I need something else")
    comm, client, start = await phone_call()
    talking = asyncio.create_task(client.collect(3.0))
    await client.audio_ms(tone(800, 16000), pace=0.02)
    await client.audio_ms(silence(600, 16000), pace=0.02)
    await talking
    await comm.disconnect()
    assert client.stops, "a real interruption must stop the agent"
    assert {"kind": "StopAudio", "audioData": None, "stopAudio": {}} in client.wire


async def test_a_backchannel_ducks_the_browser_and_its_audio_goes_on(fake_runtime):
    scripted(fake_runtime, "okay")
    comm = WebsocketCommunicator(APP, "/api/v1/browser/conversation")
    connected, _ = await comm.connect()
    assert connected
    seen: list[dict] = []

    async def read(seconds: float) -> None:
        with __import__("contextlib").suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    seen.append(json.loads(await comm.receive_from(5)))

    config = {"scenario": "banking", "sample_rate": 16000, "output_sample_rate": 16000}
    await comm.send_to(text_data=json.dumps({"type": "config", "payload": config}))
    await comm.send_to(text_data=json.dumps({"type": "control", "payload": {"action": "start"}}))
    await read(1.5)  # the greeting
    silent = bytes(640)
    loud = (np.sin(np.arange(320) * 2 * np.pi * 440 / 16000) * LEVEL).astype("<i2").tobytes()
    for _ in range(10):
        await comm.send_to(bytes_data=loud)
    for _ in range(40):
        await comm.send_to(bytes_data=silent)
    await read(0.6)  # the answer begins
    asked = len(seen)
    reader = asyncio.create_task(read(4.0))
    for frame in [loud] * 25 + [silent] * 30:  # "okay", over the agent, in real time
        await comm.send_to(bytes_data=frame)
        await asyncio.sleep(0.02)
    await reader
    await comm.disconnect()
    after = seen[asked:]
    events = [m["payload"] for m in after if m["type"] == "event"]
    ducks = [e["gain_db"] for e in events if e.get("name") == "duck"]
    assert ducks == [-20.0, 0.0], events
    assert not [e for e in events if e.get("name") == "barge_in"]
    answers = [m for m in after if m["type"] == "response" and m["payload"]["final"]]
    assert not answers  # "okay" took no turn: the same answer went on
