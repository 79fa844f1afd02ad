"""More callers than the speech pools hold, on the REAL offline providers (pocketsphinx + espeak-ng).

Issue 11, finding 2: with ``STT_POOL_SIZE``/``TTS_POOL_SIZE`` of 4, twelve callers speaking at once
got eight ``stt_error`` "speech recognition busy" and their words were never transcribed; under
load TTS the same ("no espeak-ng slot free within 2 s"). A pool is a set of warm clients, not a
ceiling on callers: every caller here must be served, with no refusal.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voiceagent.conversation.specs import VoiceSpec

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
CALLERS = 12
FRAME = 640  # 20 ms of 16 kHz PCM16


async def speech_16k(text: str) -> bytes:
    from voiceagent.speech.audio import resample
    from voiceagent.speech.offline_tts import EspeakTTS

    tts = EspeakTTS(sample_rate=24000, pool_size=1)
    pcm = b"".join([chunk async for chunk in tts.synthesize(text, VoiceSpec(rate="-10%"))])
    await tts.close()
    return resample(np.frombuffer(pcm, "<i2"), 24000, 16000).astype("<i2").tobytes()


async def test_twelve_callers_speaking_at_once_are_all_transcribed_and_answered():
    from asgiref.sync import sync_to_async
    from django.core.cache import cache

    from agents_app import sessions
    from agents_app.catalog import catalog, sync_files
    from voiceagent.conversation.session import Turn
    from voiceagent.runtime import Runtime

    ids = [f"crowd-{n}" for n in range(CALLERS)]

    def prepare():
        cache.clear()
        sync_files()
        catalog.reload()
        for sid in ids:
            sessions.create_session(sid, "banking", "concierge", transport="browser")
            sessions.write_turn(
                sid, Turn(role="assistant", content="Hello, how can I help?", agent="concierge")
            )

    await sync_to_async(prepare)()
    runtime = Runtime()
    await runtime.start_speech()
    await runtime.start_chat()
    assert (runtime.stt.name, runtime.tts.name) == ("offline-whisper", "offline-piper")
    stt_pool, tts_pool = runtime.stt.pool, runtime.tts.pool
    assert stt_pool.size == tts_pool.size == 4  # the defaults: a third of the callers
    await runtime.warmup({})

    audio = await speech_16k("i lost my card please help")
    convs = [runtime.new_conversation(sid, "banking", transport="browser") for sid in ids]
    events: dict[str, list] = {sid: [] for sid in ids}

    async def read(conv) -> None:
        async for event in conv.events():
            events[conv.session_id].append(event)

    for conv in convs:
        await conv.start()
    readers = [asyncio.create_task(read(conv)) for conv in convs]
    silence = bytes(FRAME)
    try:
        for _ in range(10):
            for conv in convs:
                conv.push_audio(silence, 16000)
        for i in range(0, len(audio), FRAME):  # all twelve speak at once, in real time
            frame = audio[i : i + FRAME].ljust(FRAME, b"\0")
            for conv in convs:
                conv.push_audio(frame, 16000)
            await asyncio.sleep(0.02)
        for _ in range(60):  # 1.2 s of silence ends every turn
            for conv in convs:
                conv.push_audio(silence, 16000)
            await asyncio.sleep(0.002)

        def answered(sid: str) -> bool:
            seen = events[sid]
            return any(e.kind == "Error" for e in seen) or (
                any(e.kind == "Audio" and e.response_id for e in seen)
                and any(e.kind == "AgentResponse" and e.final for e in seen)
            )

        async with asyncio.timeout(120):  # hang guard on a shared 2-core machine
            while not all(answered(sid) for sid in ids):
                await asyncio.sleep(0.05)
        stt_metrics, tts_metrics = stt_pool.metrics(), tts_pool.metrics()
    finally:
        for conv in convs:
            await conv.close()
        await asyncio.gather(*readers, return_exceptions=True)
        await runtime.stop_stt()
        await runtime.stop_tts()

    errors = {sid: [e.message for e in seen if e.kind == "Error"] for sid, seen in events.items()}
    assert not any(errors.values()), errors  # no "speech recognition busy", no tts_error
    for sid in ids:
        finals = [e.text for e in events[sid] if e.kind == "Transcript" and e.final]
        assert finals and "card" in finals[0], (sid, finals)
        assert sum(e.duration_s for e in events[sid] if e.kind == "Audio" and e.response_id) > 0.5
    assert stt_metrics["refused_total"] == 0 and tts_metrics["refused_total"] == 0
    assert stt_metrics["peak_in_use"] > stt_pool.size  # the recognisers grew past the warm set
    assert stt_metrics["acquired_total"] == CALLERS


async def test_twelve_syntheses_held_open_at_once_all_complete():
    """Twelve callers each hearing an answer (a paced transport reads a synthesis for as long as it
    plays): all twelve espeak-ng processes run at once on a pool of 4, then trim back."""
    from voiceagent.speech.offline_tts import EspeakTTS

    tts = EspeakTTS(sample_rate=24000, pool_size=4)
    tts.pool.idle_timeout = 0.2  # extra slots are dropped soon after the crowd is served
    assert await tts.warm() == 4
    started = asyncio.Event()
    first_chunks = 0

    async def listen(n: int) -> int:
        nonlocal first_chunks
        total = 0
        async for chunk in tts.synthesize(f"caller {n}, your card is blocked", VoiceSpec()):
            if not total:
                first_chunks += 1
                if first_chunks == CALLERS:
                    started.set()
                await started.wait()  # hold the synthesis open until every caller is being answered
            total += len(chunk)
        return total

    try:
        async with asyncio.timeout(60), asyncio.TaskGroup() as group:  # a failure cancels the others
            tasks = [group.create_task(listen(n)) for n in range(CALLERS)]
        produced = [task.result() for task in tasks]
        assert all(size > 24000 for size in produced), produced  # > 0.5 s of audio each
        metrics = tts.pool.metrics()
        assert (metrics["refused_total"], metrics["peak_in_use"], metrics["in_use"]) == (0, CALLERS, 0)
        async with asyncio.timeout(10):  # hang guard
            while tts.pool.metrics()["clients"] > 4:
                await asyncio.sleep(0.05)
        assert tts.pool.metrics()["trimmed_total"] == CALLERS - 4  # back to the warm set, no lower
    finally:
        await tts.close()


async def test_a_refusal_at_the_maximum_reaches_the_browser_and_is_counted(fake_runtime, api_client):
    """Only at the hard maximum (here 1) is a caller refused: told as an ``error`` message on the
    browser socket, and counted in ``GET /api/v1/pools``."""
    import json

    from asgiref.sync import sync_to_async
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from voiceagent.routing import websocket_urlpatterns
    from voiceagent.speech.offline_stt import PocketsphinxSTT
    from voiceagent.speech.pools import POOLS

    stt = PocketsphinxSTT(pool_size=0, max_size=1, acquire_timeout=0.2)
    saved_stt, saved_pool = fake_runtime.stt, POOLS.get("stt")
    fake_runtime.stt, POOLS["stt"] = stt, stt.pool
    held = await stt.pool.acquire()  # the only recogniser this process may have is busy
    comm = WebsocketCommunicator(
        AuthMiddlewareStack(URLRouter(websocket_urlpatterns)), "/api/v1/browser/conversation"
    )
    try:
        assert (await comm.connect())[0]
        await comm.receive_from(5)  # session_started
        await comm.send_to(text_data=json.dumps({"type": "control", "payload": {"action": "start"}}))
        tone = (np.sin(np.arange(320) * 2 * np.pi * 440 / 16000) * 8000).astype("<i2").tobytes()
        for _ in range(20):
            await comm.send_to(bytes_data=tone)
        for _ in range(60):
            await comm.send_to(bytes_data=bytes(640))
        async with asyncio.timeout(10):
            while True:
                message = json.loads(await comm.receive_from(10))
                if message["type"] == "error":
                    break
        assert message["payload"]["code"] == "stt_error"
        assert (
            "busy" in message["payload"]["message"] and "all 1 stt clients" in message["payload"]["message"]
        )
        body = (await sync_to_async(api_client.get)("/api/v1/pools")).json()["pools"]["stt"]
        assert (body["refused_total"], body["max_size"], body["in_use"], body["utilization"]) == (
            1,
            1,
            1,
            1.0,
        )
    finally:
        await comm.disconnect()
        await stt.pool.release(held)
        await stt.close()
        fake_runtime.stt = saved_stt
        if saved_pool is None:
            POOLS.pop("stt", None)
        else:
            POOLS["stt"] = saved_pool
