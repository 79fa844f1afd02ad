"""Which line the caller is on, heard from their speech (voiceagent.conversation.line_band): a full
band (browser, VoIP) or a telephone band delivered at 16 kHz (ACS PSTN calls)."""

from __future__ import annotations

import numpy as np
import soxr

from voiceagent.conversation.line_band import FRAMES_TO_DECIDE, LineBand

FRAME = 320  # 20 ms at 16 kHz


def _voice(seconds: float, seed: int = 3) -> np.ndarray:
    """A voice-like full-band signal: a 140 Hz buzz with harmonics, plus a fricative-like hiss
    20 dB below it (what puts a real voice's power above 4 kHz)."""
    t = np.arange(int(seconds * 16000)) / 16000
    buzz = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 20))
    hiss = np.random.default_rng(seed).standard_normal(len(t))
    x = buzz / np.abs(buzz).max() + 0.1 * hiss
    return (x / np.abs(x).max() * 8000).astype(np.int16)


def _through_a_phone_line(pcm: np.ndarray) -> np.ndarray:
    """What PSTN does to it before ACS hands it over at 16 kHz: 8 kHz, then back up."""
    return soxr.resample(soxr.resample(pcm, 16000, 8000), 8000, 16000).astype(np.int16)


def _hear(band: LineBand, pcm: np.ndarray) -> None:
    for i in range(0, len(pcm) - FRAME + 1, FRAME):
        band.observe(pcm[i : i + FRAME].astype("<i2").tobytes())


def test_a_full_band_voice_is_a_full_band_line():
    band = LineBand()
    _hear(band, _voice(1.0))
    assert band.wideband is True


def test_the_same_voice_through_a_telephone_band_is_not():
    band = LineBand()
    _hear(band, _through_a_phone_line(_voice(1.0)))
    assert band.wideband is False


def test_undecided_until_half_a_second_of_speech_then_no_more_work():
    band = LineBand()
    _hear(band, _voice((FRAMES_TO_DECIDE - 1) * FRAME / 16000))
    assert band.wideband is None
    _hear(band, _voice(FRAME / 16000, seed=4))
    assert band.wideband is True
    _hear(band, _through_a_phone_line(_voice(2.0)))  # decided once per conversation
    assert band.wideband is True and band._frames == FRAMES_TO_DECIDE


def test_listening_at_8_khz_is_a_telephone_band_from_the_start():
    band = LineBand(8000)
    assert band.wideband is False
    _hear(band, _voice(1.0)[::2])
    assert band.wideband is False and band._frames == 0
