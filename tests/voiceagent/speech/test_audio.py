"""Tests for voiceagent.speech.audio (run with -p no:django; no Django needed)."""

import math
import random

import numpy as np
import pytest

from voiceagent.speech import audio
from voiceagent.speech.audio import (
    FrameChunker,
    MulawStreamDecoder,
    MulawStreamEncoder,
    Pacer,
    StreamResampler,
    float32_to_int16,
    frame_bytes_for,
    generate_tone,
    int16_to_float32,
    mulaw,
    pcm16_from_bytes,
    pcm16_to_bytes,
    pcm16_to_ulaw8k,
    peak_level,
    resample,
    resampling,
    rms_dbfs,
    rms_level,
    silence,
    ulaw8k_to_pcm16,
    ulaw_decode,
    ulaw_encode,
)

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
ALL_CODES = np.arange(256, dtype=np.uint8)

# --------------------------------------------------------------------------------------------------
# Scalar reference G.711 mu-law (classic Sun / CCITT C code, transcribed literally)
# --------------------------------------------------------------------------------------------------

BIAS = 0x84
CLIP = 32635
# exp_lut[256] from the reference: floor(log2(i)) for i >= 1, 0 for i = 0.
EXP_LUT = [0, 0, 1, 1] + [2] * 4 + [3] * 8 + [4] * 16 + [5] * 32 + [6] * 64 + [7] * 128
SEG_END = [0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF, 0x3FFF, 0x7FFF]


def ref_linear2ulaw(sample: int) -> int:
    """linear2ulaw() with BIAS 0x84 and CLIP 32635 (no ZEROTRAP)."""
    sign = (sample >> 8) & 0x80
    if sign:
        sample = -sample
    if sample > CLIP:
        sample = CLIP
    sample += BIAS
    exponent = EXP_LUT[(sample >> 7) & 0xFF]
    mantissa = (sample >> (exponent + 3)) & 0x0F
    return ~(sign | (exponent << 4) | mantissa) & 0xFF


def sun_linear2ulaw(pcm_val: int) -> int:
    """Sun g711.c linear2ulaw() with the seg_end search (second, independent reference)."""
    if pcm_val < 0:
        pcm_val = BIAS - pcm_val
        mask = 0x7F
    else:
        pcm_val += BIAS
        mask = 0xFF
    seg = 8
    for i, end in enumerate(SEG_END):
        if pcm_val <= end:
            seg = i
            break
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm_val >> (seg + 3)) & 0xF)) ^ mask


def ref_ulaw2linear(u_val: int) -> int:
    """Sun g711.c ulaw2linear()."""
    u_val = ~u_val & 0xFF
    t = ((u_val & 0x0F) << 3) + BIAS
    t <<= (u_val & 0x70) >> 4
    return (BIAS - t) if (u_val & 0x80) else (t - BIAS)


def dominant_freq(x: np.ndarray, rate: int) -> float:
    x = x.astype(np.float64)
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1.0 / rate)[np.argmax(spec)])


# --------------------------------------------------------------------------------------------------
# PCM16 helpers
# --------------------------------------------------------------------------------------------------


def test_pcm16_bytes_little_endian_round_trip():
    assert pcm16_from_bytes(b"\x01\x00\xff\x7f\x00\x80").tolist() == [1, 32767, -32768]
    assert pcm16_to_bytes(np.array([1, 32767, -32768], dtype=np.int16)) == b"\x01\x00\xff\x7f\x00\x80"
    assert np.array_equal(pcm16_from_bytes(pcm16_to_bytes(ALL_INT16)), ALL_INT16)
    with pytest.raises(ValueError, match="even"):
        pcm16_from_bytes(b"\x00\x01\x02")


def test_int16_float32_round_trip_and_saturation():
    f = int16_to_float32(ALL_INT16)
    assert f.dtype == np.float32
    assert f.min() == -1.0 and f.max() < 1.0
    assert np.array_equal(float32_to_int16(f), ALL_INT16)
    assert float32_to_int16(np.array([1.5, -2.0, 0.5 / 32768], dtype=np.float32)).tolist() == [
        32767,
        -32768,
        0,
    ]
    with pytest.raises(TypeError):
        int16_to_float32(np.zeros(4, dtype=np.float32))


# --------------------------------------------------------------------------------------------------
# G.711 mu-law
# --------------------------------------------------------------------------------------------------


def test_references_agree():
    # Two transcriptions of the reference must agree before we trust either.
    assert all(ref_linear2ulaw(v) == sun_linear2ulaw(v) for v in range(-32768, 32768))


def test_ulaw_encode_bit_exact_all_int16():
    expected = bytes(ref_linear2ulaw(v) for v in range(-32768, 32768))
    got = ulaw_encode(ALL_INT16)
    assert len(got) == 65536
    if got != expected:
        bad = [v for v, g, e in zip(range(-32768, 32768), got, expected) if g != e]
        pytest.fail(f"{len(bad)} mismatches, first inputs {bad[:5]}")


def test_ulaw_decode_bit_exact_all_codes():
    expected = [ref_ulaw2linear(c) for c in range(256)]
    got = ulaw_decode(bytes(range(256)))
    assert got.dtype == np.int16
    assert got.tolist() == expected
    assert ulaw_decode(ALL_CODES).tolist() == expected


def test_ulaw_known_values():
    assert ulaw_encode(np.array([0, 32767, -32768, -1], dtype=np.int16)) == b"\xff\x80\x00\x7f"
    assert ulaw_decode(b"\xff\x7f\x80\x00").tolist() == [0, 0, 32124, -32124]
    assert ulaw_encode(np.zeros(1, dtype=np.int16))[0] == audio.ULAW_SILENCE_BYTE
    assert ulaw_encode(pcm16_to_bytes(np.array([0, 32767], dtype=np.int16))) == b"\xff\x80"


def test_ulaw_round_trip_error_bounds():
    x = ALL_INT16.astype(np.int32)
    y = ulaw_decode(ulaw_encode(ALL_INT16)).astype(np.int32)
    err = np.abs(y - x)
    mag = np.abs(x)
    # Half a quantisation step: step = 2**(seg+3) and mag + BIAS >= 2**(seg+7), so err <= (mag+BIAS)/32.
    inside = mag <= CLIP
    assert np.all(err[inside] <= (mag[inside] + BIAS) / 32)
    # Beyond CLIP the code saturates at +-32124.
    assert np.all(np.abs(y[~inside]) == 32124)
    assert err.max() <= 32768 - 32124
    # Small signals stay small (no sign flips, silence stays silence).
    assert np.all(np.sign(y[mag > 8]) == np.sign(x[mag > 8]))
    # Codes are a fixed point of decode->encode, except negative zero (0x7F) which becomes 0xFF.
    back = np.frombuffer(ulaw_encode(ulaw_decode(ALL_CODES)), dtype=np.uint8)
    expected = ALL_CODES.copy()
    expected[0x7F] = 0xFF
    assert np.array_equal(back, expected)
    # SNR of a speech-level tone is the expected ~38 dB of 8-bit log PCM.
    tone = generate_tone(8000, 1000, 440, 0.3)
    noise = ulaw_decode(ulaw_encode(tone)).astype(np.float64) - tone
    snr = 10 * np.log10(np.sum(tone.astype(np.float64) ** 2) / np.sum(noise**2))
    assert 35 < snr < 42


def test_ulaw_tables_are_read_only():
    with pytest.raises(ValueError):
        mulaw._ULAW_ENCODE[0] = 1
    with pytest.raises(ValueError):
        mulaw._ULAW_DECODE[0] = 1


# --------------------------------------------------------------------------------------------------
# Resampling
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: StreamResampler(44100, 8000),
        lambda: StreamResampler(8000, 11025),
        lambda: StreamResampler(0, 8000),
        lambda: StreamResampler("8000", 16000),
        lambda: StreamResampler(True, 16000),
        lambda: resample(np.zeros(10, np.int16), 22050, 8000),
        lambda: MulawStreamDecoder(32000),
        lambda: MulawStreamEncoder(44100),
    ],
)
def test_invalid_rate_raises(make):
    with pytest.raises(ValueError, match="supported rates are 8000, 16000, 24000, 48000 Hz"):
        make()


def test_invalid_quality_and_channels():
    with pytest.raises(ValueError, match="quality"):
        StreamResampler(8000, 16000, quality="best")
    with pytest.raises(ValueError, match="channels"):
        StreamResampler(8000, 16000, channels=0)
    assert StreamResampler(8000, 16000, quality="hq").quality == "HQ"


def test_one_shot_8k_24k_8k_preserves_tone():
    x = generate_tone(8000, 1000, 440, 0.5)
    up = resample(x, 8000, 24000)
    assert up.dtype == np.int16
    assert abs(len(up) - 24000) <= 3
    assert abs(dominant_freq(up, 24000) - 440) <= 2
    down = resample(up, 24000, 8000)
    assert abs(len(down) - 8000) <= 3
    assert abs(dominant_freq(down, 8000) - 440) <= 2
    # Away from the edges the round trip is essentially transparent for an in-band tone.
    n = min(len(down), len(x))
    assert np.abs(down[200 : n - 200].astype(np.int32) - x[200 : n - 200]).max() <= 16


@pytest.mark.parametrize(
    ("in_rate", "out_rate"), [(8000, 24000), (24000, 8000), (8000, 16000), (48000, 8000)]
)
def test_streaming_20ms_matches_one_shot(in_rate, out_rate):
    x = generate_tone(in_rate, 1000, 440, 0.5)
    one = resample(x, in_rate, out_rate)
    r = StreamResampler(in_rate, out_rate)
    step = in_rate // 50
    parts = [r.process(x[i : i + step]) for i in range(0, len(x), step)]
    parts.append(r.flush())
    s = np.concatenate(parts)
    assert s.dtype == np.int16
    assert abs(len(s) - len(one)) <= 2
    assert abs(len(s) - len(x) * out_rate // in_rate) <= 3
    n = min(len(s), len(one))
    # Same filter, same state carried across chunks: only dither-level differences, no clicks at
    # the 20 ms boundaries (a discontinuity would show up as a large local difference).
    assert np.abs(s[:n].astype(np.int32) - one[:n]).max() <= 4
    assert abs(dominant_freq(s, out_rate) - 440) <= 2


def test_streaming_accepts_bytes_and_odd_chunks():
    x = generate_tone(8000, 500, 440, 0.5)
    data = pcm16_to_bytes(x)
    r = StreamResampler(8000, 24000)
    sizes = [2, 30, 318, 4, 1000, 642]
    out, pos, k = [], 0, 0
    while pos < len(data):
        size = sizes[k % len(sizes)]
        out.append(r.process(data[pos : pos + size]))
        pos += size
        k += 1
    out.append(r.flush())
    s = np.concatenate(out)
    one = resample(x, 8000, 24000)
    assert len(s) == len(one)
    assert np.abs(s.astype(np.int32) - one).max() <= 4


def test_process_last_resets_for_reuse_and_reset_drops_tail():
    x = generate_tone(8000, 200, 440, 0.5)
    r = StreamResampler(8000, 16000)
    first = np.concatenate([r.process(x[:800]), r.process(x[800:], last=True)])
    second = np.concatenate([r.process(x), r.flush()])
    assert len(first) == len(second) == 3200
    assert np.abs(first.astype(np.int32) - second).max() <= 4
    # reset() (barge-in): buffered audio is dropped, the next signal starts clean.
    r.process(generate_tone(8000, 100, 1000, 0.9))
    r.reset()
    third = np.concatenate([r.process(x), r.flush()])
    assert len(third) == 3200
    assert np.abs(third.astype(np.int32) - second).max() <= 4


def test_identity_fast_path():
    r = StreamResampler(16000, 16000)
    assert r.is_identity
    x = generate_tone(16000, 20, 440)
    assert r.process(x) is x
    assert np.array_equal(r.process(pcm16_to_bytes(x)), x)
    assert r.flush().size == 0
    assert np.array_equal(resample(x, 16000, 16000), x)


def test_soxr_fast_path_active_and_equivalent_to_public_api(monkeypatch):
    # soxr==1.1.0 (pinned): the per-frame path calls ResampleStream._process directly. If a soxr
    # upgrade breaks the probe, audio still works through resample_chunk but the benchmark drops.
    assert resampling._SOXR_FAST_PATH, "soxr internals changed: StreamResampler fell back to resample_chunk"
    x = generate_tone(8000, 300, 440, 0.5)
    fast = StreamResampler(8000, 24000)
    monkeypatch.setattr(resampling, "_SOXR_FAST_PATH", False)
    slow = StreamResampler(8000, 24000)
    assert slow._chunk == slow._stream.resample_chunk
    outs = []
    for r in (fast, slow):
        parts = [r.process(x[i : i + 160]) for i in range(0, len(x), 160)]
        parts.append(r.process(x[::-1][:100], last=True))  # strided input, last chunk
        outs.append(np.concatenate(parts))
    assert len(outs[0]) == len(outs[1])
    assert np.abs(outs[0].astype(np.int32) - outs[1]).max() <= 2  # dither seeds differ per instance


def test_silence_stays_near_silent():
    r = StreamResampler(8000, 24000)
    s = np.concatenate([r.process(silence(8000, 1000)), r.flush()])
    assert len(s) == 24000
    assert peak_level(s) <= 2 / 32768  # soxr's TPDF dither at most
    assert rms_level(s) == 0.0


def test_stereo_interleaved():
    left = generate_tone(48000, 500, 440, 0.5)
    right = generate_tone(48000, 500, 1000, 0.5)
    inter = np.stack([left, right], axis=1).reshape(-1)
    r = StreamResampler(48000, 24000, channels=2)
    step = 960 * 2
    out = np.concatenate([r.process(inter[i : i + step]) for i in range(0, len(inter), step)] + [r.flush()])
    assert len(out) == 2 * 12000
    assert abs(dominant_freq(out[0::2], 24000) - 440) <= 3
    assert abs(dominant_freq(out[1::2], 24000) - 1000) <= 3
    with pytest.raises(ValueError, match="whole number"):
        r.process(np.zeros(3, dtype=np.int16))


# --------------------------------------------------------------------------------------------------
# Codec chains
# --------------------------------------------------------------------------------------------------


def test_mulaw_chains_round_trip_in_20ms_frames():
    tone8k = generate_tone(8000, 1000, 440, 0.5)
    ulaw = ulaw_encode(tone8k)
    dec = MulawStreamDecoder(24000)
    pcm24 = np.concatenate([dec.decode(ulaw[i : i + 160]) for i in range(0, len(ulaw), 160)] + [dec.flush()])
    assert len(pcm24) == 24000
    assert abs(dominant_freq(pcm24, 24000) - 440) <= 2

    enc = MulawStreamEncoder(24000)
    out = b"".join([enc.encode(pcm24[i : i + 480]) for i in range(0, len(pcm24), 480)] + [enc.flush()])
    assert isinstance(out, bytes)
    assert len(out) == 8000
    back = ulaw_decode(out)
    assert abs(dominant_freq(back, 8000) - 440) <= 2
    # Two mu-law quantisations plus two resamplings: still well above 30 dB SNR.
    noise = back[100:-100].astype(np.float64) - tone8k[100:-100]
    snr = 10 * np.log10(np.sum(tone8k[100:-100].astype(np.float64) ** 2) / np.sum(noise**2))
    assert snr > 30


def test_chain_functions_validate_resampler():
    assert ulaw8k_to_pcm16(b"\xff" * 160, StreamResampler(8000, 8000)).tolist() == [0] * 160
    assert pcm16_to_ulaw8k(np.zeros(160, np.int16), StreamResampler(8000, 8000)) == b"\xff" * 160
    with pytest.raises(ValueError, match="in_rate=8000"):
        ulaw8k_to_pcm16(b"\xff" * 160, StreamResampler(16000, 24000))
    with pytest.raises(ValueError, match="out_rate=8000"):
        pcm16_to_ulaw8k(np.zeros(160, np.int16), StreamResampler(24000, 16000))


# --------------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------------


def test_frame_bytes_for():
    assert frame_bytes_for(8000, 20, sample_width=1) == 160
    assert frame_bytes_for(8000, 20) == 320
    assert frame_bytes_for(24000, 20) == 960
    assert frame_bytes_for(16000, 10) == 320
    assert frame_bytes_for(48000, 20, channels=2) == 3840
    with pytest.raises(ValueError):
        frame_bytes_for(8000, 0.01)
    with pytest.raises(ValueError):
        frame_bytes_for(8000, 0)


def test_frame_chunker_odd_chunk_sizes():
    rng = random.Random(1234)
    data = bytes(rng.randrange(256) for _ in range(10_000))
    ch = FrameChunker(160)
    frames, pos = [], 0
    for size in [0, 1, 7, 159, 1, 160, 161, 333, 2, 1000] + [rng.randrange(0, 500) for _ in range(60)]:
        chunk = data[pos : pos + size]
        pos += len(chunk)
        frames += ch.push(chunk)
        assert ch.pending == pos % 160
        if pos >= len(data):
            break
    assert all(len(f) == 160 and isinstance(f, bytes) for f in frames)
    assert b"".join(frames) == data[: len(frames) * 160]
    assert len(frames) == pos // 160
    rest = ch.flush(pad_byte=None)
    assert rest == data[len(frames) * 160 : pos]
    assert ch.pending == 0 and ch.flush() == b""


def test_frame_chunker_pad_arrays_and_clear():
    ch = FrameChunker(4)
    assert ch.push(np.array([1, 2, 3], dtype=np.int16)) == [b"\x01\x00\x02\x00"]
    assert ch.flush(pad_byte=0xFF) == b"\x03\x00\xff\xff"
    ch.push(b"abc")
    ch.clear()
    assert ch.pending == 0
    assert ch.push(bytearray(b"abcdefgh")) == [b"abcd", b"efgh"]
    with pytest.raises(ValueError):
        FrameChunker(0)


# --------------------------------------------------------------------------------------------------
# Pacing (fake clock: no real sleeping, no timing assertions)
# --------------------------------------------------------------------------------------------------


class FakeClock:
    """Clock whose sleep() advances time by the request plus a random overshoot (like a real loop)."""

    def __init__(self, start: float = 1000.0, overshoot: float = 0.004, seed: int = 7):
        self.now = start
        self.overshoot = overshoot
        self.rng = random.Random(seed)
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay + self.rng.uniform(0, self.overshoot)


async def test_pacer_deadlines_do_not_drift():
    clock = FakeClock()
    pacer = Pacer(20, clock=clock, sleep=clock.sleep)
    assert pacer.deadline(0) is None
    releases = []
    for _ in range(3000):  # one minute of 20 ms frames
        await pacer.wait()
        releases.append(clock.now)
        clock.now += 0.0015  # time spent encoding/sending the frame
    start = releases[0]
    assert start == 1000.0 and clock.sleeps[0] > 0  # first frame immediately, second waits
    for n, t in enumerate(releases):
        due = start + n * 0.020
        assert pacer.deadline(n) == pytest.approx(due, abs=1e-9)
        # Never early, and late by at most one overshoot: errors do not accumulate.
        assert due - 1e-9 <= t <= due + 0.004 + 0.0015 + 1e-9
    # A naive sleep(0.020) per frame would have drifted by ~3000 * (2 ms + 1.5 ms) ~ 10 s.
    assert releases[-1] - (start + 2999 * 0.020) < 0.006


async def test_pacer_reset_and_stall_rebase():
    clock = FakeClock(overshoot=0.0)
    pacer = Pacer(20, clock=clock, sleep=clock.sleep, max_lag_ms=100)
    for _ in range(5):
        await pacer.wait()
    assert pacer.frames_sent == 5 and clock.now == pytest.approx(1000.08)
    # Barge-in: new schedule starts now, first frame goes out without waiting.
    clock.now += 0.5
    pacer.reset()
    n_sleeps = len(clock.sleeps)
    await pacer.wait()
    assert len(clock.sleeps) == n_sleeps and pacer.deadline(0) == clock.now
    # Small lag (60 ms < max_lag): catch up by sending without sleeping, keep the schedule.
    t0 = clock.now
    clock.now += 0.060
    await pacer.wait()
    assert pacer.deadline(1) == pytest.approx(t0 + 0.020)
    # Event-loop stall of 1 s: re-base instead of bursting 50 frames.
    clock.now += 1.0
    await pacer.wait()
    stalled_at = clock.now
    n_sleeps = len(clock.sleeps)
    await pacer.wait()
    assert len(clock.sleeps) == n_sleeps + 1
    assert clock.now == pytest.approx(stalled_at + 0.020)


async def test_pacer_lead_frames_and_real_loop_clock():
    clock = FakeClock(overshoot=0.0)
    pacer = Pacer(20, lead_frames=3, clock=clock, sleep=clock.sleep)
    for _ in range(4):
        await pacer.wait()
    assert clock.sleeps == []  # the first 1 + 3 lead frames go out at once
    await pacer.wait()
    assert clock.sleeps == [pytest.approx(0.020)]
    # Default clock is the running loop's; frame_ms tiny so this test doesn't really wait.
    real = Pacer(0.01)
    for _ in range(3):
        await real.wait()
    assert real.frames_sent == 3
    with pytest.raises(ValueError):
        Pacer(0)


async def test_pacer_lead_is_kept_when_a_frame_is_longer_than_the_lag_bound():
    """250 ms frames (AudioHook) with one frame of lead: the lead frame is not "lag" to re-base on."""
    clock = FakeClock(overshoot=0.0)
    pacer = Pacer(250, lead_frames=1, clock=clock, sleep=clock.sleep)  # max_lag 200 ms < 250 ms
    released = []
    for _ in range(4):
        await pacer.wait()
        released.append(round(clock.now - 1000.0, 3))
    assert released == [0.0, 0.0, 0.25, 0.5]


# --------------------------------------------------------------------------------------------------
# Levels and test signals
# --------------------------------------------------------------------------------------------------


def test_levels_silence_and_full_scale():
    assert rms_level(silence(16000, 20)) == 0.0
    assert peak_level(silence(16000, 20)) == 0.0
    assert rms_dbfs(silence(16000, 20)) == -math.inf
    assert rms_level(np.empty(0, np.int16)) == 0.0 and peak_level(np.empty(0, np.int16)) == 0.0

    square = np.tile(np.array([-32768, 32767], dtype=np.int16), 160)
    assert rms_level(square) == pytest.approx(1.0, abs=1e-4)
    assert peak_level(square) == 1.0

    sine = generate_tone(16000, 1000, 1000, 1.0)
    assert rms_dbfs(sine) == pytest.approx(-3.01, abs=0.02)
    assert rms_level(sine) == pytest.approx(1 - 3.01 / 60, abs=1e-3)
    assert peak_level(sine) == pytest.approx(1.0, abs=1e-4)

    quiet = generate_tone(16000, 1000, 1000, 0.1)  # -23 dBFS RMS
    assert rms_level(quiet) == pytest.approx((60 - 23.01) / 60, abs=1e-3)
    assert peak_level(quiet) == pytest.approx(0.1, abs=1e-3)
    assert rms_level(pcm16_to_bytes(quiet)) == rms_level(quiet)
    assert rms_level(generate_tone(16000, 100, 1000, 0.0005)) == 0.0  # below -60 dBFS


def test_generate_tone_and_silence():
    t = generate_tone(24000, 20, 440, 0.5)
    assert t.dtype == np.int16 and len(t) == 480
    assert abs(int(np.abs(t).max()) - 16384) < 200
    assert len(silence(8000, 20)) == 160 and not silence(8000, 20).any()
    with pytest.raises(ValueError):
        generate_tone(8000, 20, 440, 1.5)
