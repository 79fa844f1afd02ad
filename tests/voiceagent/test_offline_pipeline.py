"""The whole offline stack for real: espeak-ng speech in -> webrtcvad + pocketsphinx -> rules engine on
the banking agents from the database -> espeak-ng audio out, through the runtime transports use."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voiceagent.conversation.specs import VoiceSpec

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


async def speech_16k(text: str) -> bytes:
    from voiceagent.speech.audio import resample
    from voiceagent.speech.offline_tts import EspeakTTS

    tts = EspeakTTS(sample_rate=24000, pool_size=1)
    pcm = b"".join([chunk async for chunk in tts.synthesize(text, VoiceSpec(rate="-10%"))])
    await tts.close()
    return resample(np.frombuffer(pcm, "<i2"), 24000, 16000).astype("<i2").tobytes()


async def test_spoken_request_reaches_the_right_agent():
    from asgiref.sync import sync_to_async
    from django.core.cache import cache

    from agents_app import sessions
    from agents_app.catalog import catalog, sync_files
    from voiceagent.conversation.session import Turn
    from voiceagent.runtime import Runtime

    def prepare():
        cache.clear()
        sync_files()
        catalog.reload()
        sessions.create_session("e2e-1", "banking", "concierge", transport="browser")
        sessions.write_turn(
            "e2e-1", Turn(role="assistant", content="Hello, how can I help?", agent="concierge")
        )

    await sync_to_async(prepare)()
    runtime = Runtime()
    await runtime.start_speech()
    await runtime.start_chat()
    assert (runtime.stt.name, runtime.tts.name, runtime.chat.name) == (
        "offline-whisper",
        "offline-piper",
        "offline-rules",
    )
    results: dict = {}
    await runtime.warmup(results)
    assert results["stt_pool"] >= 1 and results["tts_pool"] >= 1

    audio = await speech_16k("i lost my card please help")
    conv = runtime.new_conversation("e2e-1", "banking", transport="browser")
    await conv.start()
    events: list = []

    async def read():
        async for event in conv.events():
            events.append(event)

    reader = asyncio.create_task(read())
    silence = bytes(640)
    for _ in range(10):
        conv.push_audio(silence, 16000)
    for i in range(0, len(audio), 640):  # in real time, as a microphone delivers it
        conv.push_audio(audio[i : i + 640].ljust(640, b"\0"), 16000)
        await asyncio.sleep(0.02)
    for _ in range(60):  # 1.2 s of silence ends the turn
        conv.push_audio(silence, 16000)
        await asyncio.sleep(0.002)
    # the auth agent's turn closes once its answer has been synthesised and played out: on a
    # loaded machine its final text comes well before the last of its audio
    async with asyncio.timeout(40):
        while not any(e.kind == "TurnMetrics" and e.agent == "auth_agent" for e in events):
            await asyncio.sleep(0.05)
    await conv.close()
    await reader
    await runtime.stop_stt()
    await runtime.stop_tts()

    finals = [e.text for e in events if e.kind == "Transcript" and e.final]
    assert finals and "lost" in finals[0] and "card" in finals[0]
    assert any(e.kind == "Transcript" and not e.final for e in events)  # interim hypotheses flowed
    calls = [e.name for e in events if e.kind == "ToolCall"]
    assert calls == ["handoff_auth_agent"]
    handoff = next(e for e in events if e.kind == "Handoff")
    assert (handoff.from_agent, handoff.to_agent, handoff.type) == ("concierge", "auth_agent", "announced")
    audio_out = [e for e in events if e.kind == "Audio"]
    assert audio_out and all(e.sample_rate == 24000 for e in audio_out)
    assert sum(e.duration_s for e in audio_out) > 1.0
    body = await sync_to_async(sessions.session_body)("e2e-1")
    assert body["active_agent"] == "auth_agent"
    assert [t["role"] for t in body["history"]][:3] == ["assistant", "user", "tool"]
