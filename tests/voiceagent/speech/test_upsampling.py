"""The live-stream doubler (8 -> 16 kHz): no block buffering, a flat telephone band, no images that
would make a phone line sound full-band."""

from __future__ import annotations

import numpy as np
import pytest

from voiceagent.speech.audio import HalfbandUpsampler, StreamResampler, stream_resampler
from voiceagent.speech.audio.resampling import resample


def tone(freq: float, seconds: float = 1.0, rate: int = 8000) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * 10000).astype(np.int16)


def framed(up, x: np.ndarray, size: int = 160) -> list[np.ndarray]:
    return [up.process(x[i : i + size]) for i in range(0, len(x), size)]


def test_every_frame_comes_back_at_once_where_soxr_holds_it():
    up, soxr = HalfbandUpsampler(8000), StreamResampler(8000, 16000)
    frames = np.zeros(160 * 5, dtype=np.int16)
    assert [len(y) for y in framed(up, frames)] == [320] * 5
    assert [len(y) for y in framed(soxr, frames)] == [0] * 5  # soxr's block: why this exists
    assert len(up.process(b"\x00\x00" * 160)) == 320  # PCM16 bytes too


@pytest.mark.parametrize("freq", [300, 1000, 2500, 3400])
def test_the_telephone_band_passes_and_its_images_stay_out(freq):
    x = tone(freq)
    y = np.concatenate(framed(HalfbandUpsampler(8000), x)).astype(float)[400:]
    assert np.sqrt(np.mean(y**2)) == pytest.approx(np.sqrt(np.mean(x.astype(float) ** 2)), rel=0.01)
    power = np.abs(np.fft.rfft(y * np.hanning(len(y)))) ** 2
    high = power[np.fft.rfftfreq(len(y), 1 / 16000) > 4000].sum() / power.sum()
    assert high < 1e-7  # line_band.HIGH_BAND_SHARE is 1e-5: still a telephone band


def test_it_matches_a_one_shot_resample_but_for_a_short_delay():
    x = tone(700, 0.5)
    ours = np.concatenate(framed(HalfbandUpsampler(8000), x)).astype(float)
    ref = resample(x, 8000, 16000, quality="VHQ").astype(float)
    delay = 47  # (taps - 1) / 2 output samples
    a, b = ours[delay + 200 : 7000], ref[200 : 7000 - delay]
    assert np.max(np.abs(a - b)) < 0.005 * 10000


def test_reset_forgets_and_the_factory_picks_it_for_doubling_only():
    up = HalfbandUpsampler(8000)
    up.process(tone(500, 0.02))
    up.reset()
    assert not up.process(np.zeros(160, dtype=np.int16)).any()
    assert isinstance(stream_resampler(8000, 16000), HalfbandUpsampler)
    assert isinstance(stream_resampler(24000, 16000), StreamResampler)


def test_chunks_of_any_size_give_the_same_stream():
    x = tone(900, 0.5)
    whole = np.concatenate(framed(HalfbandUpsampler(8000), x))
    sizes, parts, up, i = [160, 80, 240, 1, 159, 160, 3000], [], HalfbandUpsampler(8000), 0
    while i < len(x):
        size = sizes[len(parts) % len(sizes)]
        parts.append(up.process(x[i : i + size]))
        i += size
    assert np.array_equal(np.concatenate(parts), whole)
