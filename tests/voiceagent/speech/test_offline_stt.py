"""PocketsphinxSTT: pooled decoders, worker-thread decoding, interims, and real recognition."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from voiceagent.conversation.providers import ProviderError, STTStream
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.speech.audio import StreamResampler, pcm16_to_bytes, silence
from voiceagent.speech.offline_stt import PocketsphinxSTT

SENTENCE = "two three four five six seven"  # pocketsphinx gets 5/6 of espeak's rendering, every time


async def _espeak_16k(text: str) -> bytes:
    """``text`` spoken by espeak-ng through EspeakTTS (24 kHz), resampled to 16 kHz like a transport."""
    from voiceagent.speech.offline_tts import EspeakTTS

    tts = EspeakTTS()
    resampler = StreamResampler(24000, 16000)
    out = bytearray(pcm16_to_bytes(silence(16000, 300)))
    async for chunk in tts.synthesize(text, VoiceSpec("en-US-AvaMultilingualNeural", None, "+0%")):
        out += pcm16_to_bytes(resampler.process(chunk))
    out += pcm16_to_bytes(resampler.flush())
    out += pcm16_to_bytes(silence(16000, 500))
    await tts.close()
    return bytes(out)


def _score(text: str) -> int:
    return sum(word in text.split() for word in SENTENCE.split())


# --- provider mechanics ------------------------------------------------------------------------------
async def test_unsupported_language_is_a_clear_error():
    stt = PocketsphinxSTT(pool_size=1)
    with pytest.raises(ProviderError, match="only has the en-US model"):
        await stt.open("de-DE", lambda t: None)
    assert stt.pool.metrics()["in_use"] == 0  # rejected before leasing (no decoder started)
    await stt.close()


@pytest.mark.slow
async def test_pool_at_its_maximum_raises_within_the_timeout_and_recovers():
    stt = PocketsphinxSTT(pool_size=2, acquire_timeout=0.3, max_size=2)
    assert stt.name == "offline-pocketsphinx" and stt.sample_rate == 16000
    assert await stt.warm() == 2
    a = await stt.open("en-US", lambda t: None)
    b = await stt.open("en-us", lambda t: None)  # case-insensitive
    assert isinstance(a, STTStream)
    assert stt.pool.metrics()["in_use"] == 2
    began = time.monotonic()
    with pytest.raises(ProviderError, match="speech recognition busy"):
        await stt.open("en-US", lambda t: None)
    assert 0.25 < time.monotonic() - began < 3.0
    await a.cancel()
    c = await stt.open("en-US", lambda t: None)
    assert await b.finish() == ""  # no audio, no text
    await c.cancel()
    assert stt.pool.metrics()["in_use"] == 0
    await stt.close()


@pytest.mark.slow
async def test_interims_on_the_loop_thread_throttled_and_cancel_discards_late_results():
    audio = await _espeak_16k(SENTENCE)
    stt = PocketsphinxSTT(pool_size=1, interim_interval=0.1)
    await stt.warm()
    interims: list[tuple[str, int]] = []
    stream = await stt.open("en-US", lambda text: interims.append((text, threading.get_ident())))
    began = time.monotonic()
    for i in range(0, len(audio), 1600):  # 50 ms pushes at ~2.5x real time
        await stream.push(audio[i : i + 1600])
        await asyncio.sleep(0.02)
    elapsed = time.monotonic() - began
    await asyncio.sleep(0.2)
    assert interims, "no interim hypotheses"
    assert all(tid == threading.get_ident() for _, tid in interims)  # delivered on the loop thread
    assert len(interims) <= elapsed / 0.1 + 2
    seen = len(interims)
    await stream.cancel()  # the decoder goes back at once; its late output must not leak
    with pytest.raises(ProviderError, match="already finished or cancelled"):
        await stream.finish()
    await asyncio.sleep(0.2)
    assert len(interims) == seen
    again = await stt.open("en-US", lambda t: None)  # same decoder process, clean utterance
    assert await again.finish() == ""
    odd = await stt.open("en-US", lambda t: None)
    with pytest.raises(ValueError, match="even"):
        await odd.push(b"\0\0\0")
    worker = odd._worker
    await stt.close()  # also stops the decoder of a stream nobody finished
    assert worker.proc.returncode is not None
    with pytest.raises(ProviderError, match="exited"):
        await odd.finish()


@pytest.mark.slow
async def test_a_dying_decoder_is_a_provider_error_and_gets_replaced():
    stt = PocketsphinxSTT(pool_size=1)
    await stt.warm()
    stream = await stt.open("en-US", lambda t: None)
    await stream.push(b"\0" * 640)
    stream._worker.proc.kill()
    with pytest.raises(ProviderError, match="decoder process exited"):
        await stream.finish()
    metrics = stt.pool.metrics()
    assert metrics["in_use"] == 0 and metrics["warm"] == 0  # discarded, not reused
    fresh = await stt.open("en-US", lambda t: None)  # a new process is started lazily
    assert await fresh.finish() == ""
    await stt.close()


# --- the real thing ---------------------------------------------------------------------------------
@pytest.mark.slow
async def test_espeak_sentence_is_recognised_through_the_stream_interface():
    audio = await _espeak_16k(SENTENCE)
    stt = PocketsphinxSTT(pool_size=1)
    assert await stt.warm() == 1
    interims: list[str] = []
    stream = await stt.open("en-US", interims.append)
    for i in range(0, len(audio), 640):  # 20 ms frames, as a transport delivers them
        await stream.push(audio[i : i + 640])
    text = await stream.finish()
    assert text == text.lower()
    assert _score(text) >= 4, text
    rtf = stream.decode_cpu_seconds / stream.decoded_seconds
    print(f"pocketsphinx: {text!r}, real-time factor {rtf:.3f}")
    assert stt.pool.metrics()["in_use"] == 0
    await stt.close()


@pytest.mark.slow
async def test_eight_concurrent_streams_do_not_block_the_event_loop():
    audio = await _espeak_16k(SENTENCE)
    stt = PocketsphinxSTT(pool_size=8)
    assert await stt.warm() == 8
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker():
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = loop.time()
            gaps.append(now - last)
            last = now

    interims: list[str] = []

    async def caller(n: int) -> str:
        stream = await stt.open("en-US", interims.append)
        for i in range(0, len(audio), 3200):  # 100 ms per push, ~2x real time
            await stream.push(audio[i : i + 3200])
            await asyncio.sleep(0.05)
        return await stream.finish()

    tick = asyncio.create_task(ticker())
    began = time.monotonic()
    texts = await asyncio.gather(*(caller(n) for n in range(8)))
    elapsed = time.monotonic() - began
    stop.set()
    await tick
    gap_ms = max(gaps) * 1000
    print(f"8 streams of {len(audio) / 32000:.1f} s in {elapsed:.2f} s; max loop gap {gap_ms:.0f} ms")
    assert all(_score(t) >= 4 for t in texts), texts
    # No check on interims here: eight decoders at twice real time on two cores fall behind their
    # audio on a slow machine, and a decoder behind has no hypothesis before the stream finishes
    # (CI once: none). Interims are the single-stream tests' subject (throttled, on the loop thread).
    assert gap_ms < 250, f"event loop stalled for {gap_ms:.0f} ms"
    assert stt.pool.metrics()["in_use"] == 0
    await stt.close()
