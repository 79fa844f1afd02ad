"""VoiceActivityDetector: frame validation, the energy gate, and real espeak-ng speech."""

from __future__ import annotations

import math

import numpy as np
import pytest

from voiceagent.conversation.specs import VoiceSpec
from voiceagent.speech.audio import generate_tone, pcm16_to_bytes, rms_dbfs, silence
from voiceagent.speech.vad import VoiceActivityDetector


def _noise(n: int, dbfs: float, seed: int = 1) -> bytes:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * (32768.0 * 10 ** (dbfs / 20))
    return pcm16_to_bytes(np.clip(np.rint(x), -32768, 32767).astype(np.int16))


def test_frame_bytes_and_validation():
    assert VoiceActivityDetector().frame_bytes == 640
    assert VoiceActivityDetector(sample_rate=8000, frame_ms=10).frame_bytes == 160
    assert VoiceActivityDetector(sample_rate=48000, frame_ms=30).frame_bytes == 2880
    with pytest.raises(ValueError, match="sample rate"):
        VoiceActivityDetector(sample_rate=24000)
    with pytest.raises(ValueError, match="10, 20 or 30"):
        VoiceActivityDetector(frame_ms=25)
    with pytest.raises(ValueError, match="aggressiveness"):
        VoiceActivityDetector(aggressiveness=4)
    with pytest.raises(ValueError, match="dBFS"):
        VoiceActivityDetector(min_rms=3)
    vad = VoiceActivityDetector()
    for bad in (b"", b"\0" * 639, b"\0" * 641, b"\0" * 1280):
        with pytest.raises(ValueError, match="640 bytes"):
            vad.is_speech(bad)


def test_silence_and_low_noise_are_not_speech():
    for aggressiveness in (0, 1, 2, 3):
        vad = VoiceActivityDetector(aggressiveness=aggressiveness)
        assert not vad.is_speech(pcm16_to_bytes(silence(16000, 20)))
        noise = _noise(320 * 200, -55.0)
        frames = [noise[i : i + 640] for i in range(0, len(noise), 640)]
        assert not any(vad.is_speech(f) for f in frames)


def test_energy_gate_overrules_webrtcvad():
    """A quiet speech-band tone: webrtcvad alone may call it speech; the gate never does."""
    quiet = pcm16_to_bytes(generate_tone(16000, 20, 440, amplitude=10 ** (-50 / 20)))
    assert rms_dbfs(quiet) < -45
    assert VoiceActivityDetector(aggressiveness=0, min_rms=-math.inf).is_speech(quiet)  # webrtcvad alone
    assert not VoiceActivityDetector(aggressiveness=0).is_speech(quiet)
    # the threshold is configurable: raising it silences louder audio too
    loud_noise = _noise(320, -30.0)
    assert not VoiceActivityDetector(min_rms=-20.0).is_speech(loud_noise)


@pytest.mark.slow
async def test_espeak_speech_frames_are_speech():
    from voiceagent.speech.offline_tts import EspeakTTS

    tts = EspeakTTS(sample_rate=16000)
    audio = bytearray()
    async for chunk in tts.synthesize("Hello, I would like to check the balance of my account.", VoiceSpec()):
        audio += chunk
    await tts.close()
    vad = VoiceActivityDetector()
    frames = [bytes(audio[i : i + 640]) for i in range(0, len(audio) - 639, 640)]
    loud = [f for f in frames if rms_dbfs(f) > -35]
    speech = [vad.is_speech(f) for f in loud]
    assert len(loud) > 50
    assert sum(speech) / len(speech) > 0.7
