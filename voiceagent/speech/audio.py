"""Vectorised audio utilities shared by every transport.

Everything here works on whole buffers with numpy (no per-sample Python loops) because a single
process serves many concurrent calls and each one moves 50 frames per second in each direction.

Conventions:
- PCM is signed 16-bit little-endian ("PCM16"), interleaved when multi-channel. In memory it is an
  ``np.int16`` array.
- G.711 mu-law is one ``uint8`` per sample at 8 kHz (telephony).
- Supported sample rates are :data:`SUPPORTED_RATES` (8, 16, 24 and 48 kHz), which covers telephony,
  speech recognisers, TTS engines and browsers.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Awaitable, Callable
from typing import Final

import numpy as np
import soxr

__all__ = [
    "DEFAULT_QUALITY",
    "SUPPORTED_RATES",
    "FrameChunker",
    "MulawStreamDecoder",
    "MulawStreamEncoder",
    "Pacer",
    "StreamResampler",
    "float32_to_int16",
    "frame_bytes_for",
    "generate_tone",
    "int16_to_float32",
    "pcm16_from_bytes",
    "pcm16_to_bytes",
    "pcm16_to_ulaw8k",
    "peak_level",
    "resample",
    "rms_dbfs",
    "rms_level",
    "silence",
    "ulaw8k_to_pcm16",
    "ulaw_decode",
    "ulaw_encode",
    "validate_rate",
]

SUPPORTED_RATES: Final = (8000, 16000, 24000, 48000)
QUALITIES: Final = ("QQ", "LQ", "MQ", "HQ", "VHQ")
# "MQ" = soxr 16-bit-precision filter: the precision of PCM16 itself (HQ's 20 bits buys nothing for
# int16/G.711), flat passband to ~3.6 kHz at 8 kHz (covers the whole 300-3400 Hz telephone band),
# >110 dB alias rejection, and half HQ's buffering latency at 48 kHz. "LQ" roughly halves latency
# again (~22 ms vs ~43 ms per 8k<->24k stage) but is -8 dB at 3.4 kHz. "QQ" (cubic) has no
# anti-alias filter at all: never use it for downsampling.
DEFAULT_QUALITY: Final = "MQ"

_I16_SCALE: Final = 32768.0
_INT16: Final = np.dtype(np.int16)
_LITTLE_ENDIAN: Final = sys.byteorder == "little"

PcmLike = bytes | bytearray | memoryview | np.ndarray


# --------------------------------------------------------------------------------------------------
# PCM16 helpers
# --------------------------------------------------------------------------------------------------


def pcm16_from_bytes(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode little-endian PCM16 bytes to ``np.int16`` without copying (on little-endian hosts).

    The result is a read-only view of ``data`` when ``data`` is immutable: copy it before mutating.
    """
    if len(data) % 2:
        raise ValueError(f"PCM16 payload must have an even number of bytes, got {len(data)}")
    arr = np.frombuffer(data, dtype="<i2")
    return arr if _LITTLE_ENDIAN else arr.astype(np.int16)


def pcm16_to_bytes(samples: np.ndarray) -> bytes:
    """Encode samples as little-endian PCM16 bytes (what every wire format here expects)."""
    return np.asarray(samples).astype("<i2", copy=False).tobytes()


def _as_int16(pcm: PcmLike) -> np.ndarray:
    """Accept PCM16 bytes or an int16 array; anything else is a caller bug worth failing on."""
    if isinstance(pcm, np.ndarray):
        if pcm.dtype is not _INT16 and pcm.dtype != _INT16:  # identity check first: per-frame path
            raise TypeError(f"expected an int16 array, got {pcm.dtype}; use float32_to_int16() first")
        return pcm
    return pcm16_from_bytes(pcm)


def int16_to_float32(samples: PcmLike) -> np.ndarray:
    """Scale int16 to float32 in [-1, 1) (what ML models and WebAudio expect)."""
    return np.multiply(_as_int16(samples), np.float32(1.0 / _I16_SCALE), dtype=np.float32)


def float32_to_int16(samples: np.ndarray) -> np.ndarray:
    """Scale float [-1, 1] to int16 with rounding and saturation (clipping, never wrap-around)."""
    y = np.multiply(samples, np.float32(_I16_SCALE), dtype=np.float32)
    np.rint(y, out=y)
    np.clip(y, -32768.0, 32767.0, out=y)
    return y.astype(np.int16)


# --------------------------------------------------------------------------------------------------
# G.711 mu-law (bit-exact with the classic Sun/CCITT reference: BIAS 0x84, CLIP 32635)
# --------------------------------------------------------------------------------------------------

_ULAW_BIAS: Final = 0x84
_ULAW_CLIP: Final = 32635


def _build_ulaw_encode_table() -> np.ndarray:
    """65536-entry table indexed by the int16 sample viewed as uint16.

    That layout also makes ``table.take(int16_samples)`` correct without a view: negative indices
    count from the end, so -k lands on 65536 - k, the uint16 view of -k.
    """
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), _ULAW_CLIP) + _ULAW_BIAS  # 132..32767
    # Segment (exponent) = bit length of (mag >> 7) minus one, 0 for the first segment; frexp is exact.
    _, bit_len = np.frexp((mag >> 7).astype(np.float64))
    exponent = np.maximum(bit_len - 1, 0)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


def _build_ulaw_decode_table() -> np.ndarray:
    """256-entry table: mu-law byte -> int16 sample."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


_ULAW_ENCODE: Final = _build_ulaw_encode_table()
_ULAW_DECODE: Final = _build_ulaw_decode_table()
_ULAW_ENCODE.flags.writeable = False
_ULAW_DECODE.flags.writeable = False
ULAW_SILENCE_BYTE: Final = 0xFF  # encode(0); pad mu-law frames with this, not 0x00 (= -32124)


def ulaw_decode(payload: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Decode G.711 mu-law bytes (or a uint8 array) to int16 with one table lookup."""
    codes = payload if isinstance(payload, np.ndarray) else np.frombuffer(payload, dtype=np.uint8)
    if codes.dtype != np.uint8:
        raise TypeError(f"expected uint8 mu-law codes, got {codes.dtype}")
    return _ULAW_DECODE.take(codes)


def ulaw_encode(samples: PcmLike) -> bytes:
    """Encode int16 samples (or PCM16 bytes) to G.711 mu-law bytes with one table lookup."""
    return _ULAW_ENCODE.take(_as_int16(samples)).tobytes()


# --------------------------------------------------------------------------------------------------
# Resampling
# --------------------------------------------------------------------------------------------------


def validate_rate(rate: int, *, name: str = "sample rate") -> int:
    """Reject rates the transports/codecs here were not designed for (fail at setup, not mid-call)."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or int(rate) not in SUPPORTED_RATES:
        supported = ", ".join(str(r) for r in SUPPORTED_RATES)
        raise ValueError(f"unsupported {name} {rate!r}: supported rates are {supported} Hz")
    return int(rate)


def _validate_quality(quality: str) -> str:
    q = str(quality).upper()
    if q not in QUALITIES:
        raise ValueError(f"unsupported resampler quality {quality!r}: use one of {', '.join(QUALITIES)}")
    return q


def _soxr_fast_path_ok() -> bool:
    """Check once that soxr's internal 2-D chunk method behaves exactly like the public one.

    ``ResampleStream.resample_chunk`` is a thin Python wrapper (type check, add/squeeze an axis)
    around the C method ``_process``; per 20 ms frame the wrapper costs about as much as the
    mu-law codec itself. We call ``_process`` directly when this probe confirms it is there and gives
    identical results, and fall back to the public method otherwise (e.g. a future soxr release).
    """
    try:
        # float32 for the comparison: int16 output is dithered with a per-instance random seed.
        x = np.sin(np.arange(64, dtype=np.float32)).reshape(-1, 1)
        fast = soxr.ResampleStream(8000, 16000, 1, dtype="float32", quality="LQ")._process(x, True)
        ref = soxr.ResampleStream(8000, 16000, 1, dtype="float32", quality="LQ").resample_chunk(x, last=True)
        ok = (
            isinstance(fast, np.ndarray) and fast.shape == ref.shape == (128, 1) and np.array_equal(fast, ref)
        )
        # ...and that the int16 method accepts/returns (frames, channels) int16 arrays.
        y = soxr.ResampleStream(8000, 16000, 1, dtype="int16", quality="LQ")._process(
            np.zeros((64, 1), np.int16), True
        )
    except Exception:
        return False
    return bool(ok) and isinstance(y, np.ndarray) and y.dtype == np.int16 and y.shape == (128, 1)


_SOXR_FAST_PATH: Final = _soxr_fast_path_ok()


class StreamResampler:
    """Stateful streaming resampler for one audio stream (wraps ``soxr.ResampleStream``).

    Keeps the filter state across chunks so 20 ms frames resample without clicks at frame
    boundaries. Use one instance per stream and direction. soxr buffers internally, so a call may
    return fewer (even zero) or more samples than ``len(chunk) * out_rate / in_rate``; the totals
    match. Feed the output through a :class:`FrameChunker` when fixed-size frames are needed.

    Samples are processed as int16 inside soxr (C-side conversion and saturation, no numpy copies).
    soxr applies its default TPDF dither to int16 output: +-1 LSB of noise (even on digital
    silence) whose seed is per instance, so output is not bit-reproducible from run to run.
    Exact float32 processing would cost ~40% more per frame for no audible difference.
    Channels are interleaved in and out.
    """

    __slots__ = ("_chunk", "_stream", "channels", "in_rate", "out_rate", "quality")

    def __init__(self, in_rate: int, out_rate: int, channels: int = 1, quality: str = DEFAULT_QUALITY):
        self.in_rate = validate_rate(in_rate, name="input sample rate")
        self.out_rate = validate_rate(out_rate, name="output sample rate")
        if not isinstance(channels, int) or not 1 <= channels <= 8:
            raise ValueError(f"channels must be an int in 1..8, got {channels!r}")
        self.channels = channels
        self.quality = _validate_quality(quality)
        self._stream: soxr.ResampleStream | None = None
        # (frames, channels) int16 array, last -> (frames, channels) int16 array; None = identity.
        self._chunk: Callable[[np.ndarray, bool], np.ndarray] | None = None
        if self.in_rate != self.out_rate:
            self._stream = soxr.ResampleStream(
                self.in_rate, self.out_rate, channels, dtype="int16", quality=self.quality
            )
            self._chunk = self._stream._process if _SOXR_FAST_PATH else self._stream.resample_chunk

    @property
    def is_identity(self) -> bool:
        """True when rates are equal: samples pass through untouched (no filter, no delay)."""
        return self._stream is None

    def process(self, pcm: PcmLike, last: bool = False) -> np.ndarray:
        """Resample one chunk (PCM16 bytes or int16 array) and return int16 at ``out_rate``.

        ``last=True`` also drains the filter tail and resets the stream for a new signal.
        In identity mode the input is returned as is (possibly a read-only view of ``pcm``).
        """
        x = _as_int16(pcm)
        if self._chunk is None:
            return x
        if x.size % self.channels:
            raise ValueError(f"chunk of {x.size} samples is not a whole number of {self.channels}-ch frames")
        y = self._chunk(x.reshape(-1, self.channels), last)
        if last:
            self._stream.clear()
        return y.reshape(-1)

    def flush(self) -> np.ndarray:
        """Return the samples still inside the filter (end of utterance/response) and reset."""
        if self._stream is None:
            return np.empty(0, dtype=np.int16)
        return self.process(np.empty(0, dtype=np.int16), last=True)

    def reset(self) -> None:
        """Drop buffered audio without emitting it (barge-in: the old tail must not be played)."""
        if self._stream is not None:
            self._stream.clear()

    def __repr__(self) -> str:
        return (
            f"StreamResampler(in_rate={self.in_rate}, out_rate={self.out_rate}, "
            f"channels={self.channels}, quality={self.quality!r})"
        )


def resample(samples: PcmLike, in_rate: int, out_rate: int, quality: str = DEFAULT_QUALITY) -> np.ndarray:
    """One-shot resample of a complete mono int16 signal (files, prompts, tests)."""
    x = _as_int16(samples)
    in_rate = validate_rate(in_rate, name="input sample rate")
    out_rate = validate_rate(out_rate, name="output sample rate")
    quality = _validate_quality(quality)
    if in_rate == out_rate:
        return x.copy()
    return soxr.resample(np.ascontiguousarray(x), in_rate, out_rate, quality=quality)


# --------------------------------------------------------------------------------------------------
# Codec chains used by telephony transports (G.711 mu-law at 8 kHz <-> PCM16 at the engine rate)
# --------------------------------------------------------------------------------------------------


def ulaw8k_to_pcm16(payload: bytes | bytearray | memoryview, resampler: StreamResampler) -> np.ndarray:
    """Decode an 8 kHz mu-law payload and resample it to ``resampler.out_rate`` (int16)."""
    if resampler.in_rate != 8000 or resampler.channels != 1:
        raise ValueError(f"mu-law input needs a mono resampler with in_rate=8000, got {resampler!r}")
    return resampler.process(_ULAW_DECODE.take(np.frombuffer(payload, dtype=np.uint8)))


def pcm16_to_ulaw8k(samples: PcmLike, resampler: StreamResampler) -> bytes:
    """Resample int16 audio to 8 kHz and encode it as mu-law bytes (length varies per call)."""
    if resampler.out_rate != 8000 or resampler.channels != 1:
        raise ValueError(f"mu-law output needs a mono resampler with out_rate=8000, got {resampler!r}")
    return _ULAW_ENCODE.take(resampler.process(samples)).tobytes()


class MulawStreamDecoder:
    """Per-call inbound chain: 8 kHz mu-law payloads -> int16 PCM at ``out_rate``."""

    __slots__ = ("_chunk", "resampler")

    def __init__(self, out_rate: int, quality: str = DEFAULT_QUALITY):
        self.resampler = StreamResampler(8000, out_rate, quality=quality)
        self._chunk = self.resampler._chunk

    def decode(self, payload: bytes | bytearray | memoryview) -> np.ndarray:
        """Decode and resample one payload (any size)."""
        # Same result as ulaw8k_to_pcm16() with fewer numpy/Python steps: runs 50 times/s per call.
        codes = np.frombuffer(payload, dtype=np.uint8)
        if self._chunk is None:
            return _ULAW_DECODE.take(codes)
        return self._chunk(_ULAW_DECODE.take(codes.reshape(-1, 1)), False).reshape(-1)

    def flush(self) -> np.ndarray:
        """Return the resampler tail (end of stream)."""
        return self.resampler.flush()

    def reset(self) -> None:
        """Forget buffered audio (e.g. stream restarted)."""
        self.resampler.reset()


class MulawStreamEncoder:
    """Per-call outbound chain: int16 PCM at ``in_rate`` -> 8 kHz mu-law bytes."""

    __slots__ = ("_chunk", "resampler")

    def __init__(self, in_rate: int, quality: str = DEFAULT_QUALITY):
        self.resampler = StreamResampler(in_rate, 8000, quality=quality)
        self._chunk = self.resampler._chunk

    def encode(self, samples: PcmLike) -> bytes:
        """Resample and encode one chunk; output size varies, frame it with FrameChunker(160)."""
        x = _as_int16(samples)
        if self._chunk is not None:
            x = self._chunk(x.reshape(-1, 1), False)  # (n, 1) from soxr; take/tobytes don't care
        return _ULAW_ENCODE.take(x).tobytes()

    def flush(self) -> bytes:
        """Encode the resampler tail (end of a TTS response)."""
        return ulaw_encode(self.resampler.flush())

    def reset(self) -> None:
        """Drop buffered audio (barge-in: the interrupted response's tail must not leak out)."""
        self.resampler.reset()


# --------------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------------


def frame_bytes_for(rate: int, ms: float, sample_width: int = 2, channels: int = 1) -> int:
    """Bytes in one frame of ``ms`` milliseconds (e.g. 8 kHz mu-law 20 ms -> 160 with width 1)."""
    samples = rate * ms / 1000
    if samples <= 0 or samples != int(samples):
        raise ValueError(f"{ms} ms at {rate} Hz is not a whole, positive number of samples")
    return int(samples) * sample_width * channels


class FrameChunker:
    """Re-cut arbitrary-size byte chunks into exact ``frame_bytes`` frames, keeping the remainder.

    Transports receive/produce audio in whatever sizes the network or TTS engine uses, but wire
    formats and VADs want fixed frames (20 ms is typical).
    """

    __slots__ = ("_buf", "frame_bytes")

    def __init__(self, frame_bytes: int):
        if not isinstance(frame_bytes, int) or frame_bytes <= 0:
            raise ValueError(f"frame_bytes must be a positive int, got {frame_bytes!r}")
        self.frame_bytes = frame_bytes
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet make a full frame."""
        return len(self._buf)

    def push(self, data: bytes | bytearray | memoryview | np.ndarray) -> list[bytes]:
        """Add a chunk (bytes, or an array taken as its raw bytes) and return every complete frame."""
        if isinstance(data, np.ndarray):
            # memoryview, not the array: ``bytearray += ndarray`` would dispatch to numpy's add.
            data = memoryview(np.ascontiguousarray(data)).cast("B")
        self._buf += data
        fb = self.frame_bytes
        n = len(self._buf) // fb
        if not n:
            return []
        with memoryview(self._buf) as mv:
            frames = [mv[i : i + fb].tobytes() for i in range(0, n * fb, fb)]
        del self._buf[: n * fb]
        return frames

    def flush(self, pad_byte: int | None = 0) -> bytes:
        """Return the remainder padded to a full frame with ``pad_byte`` (``None``: unpadded).

        Pad PCM16 with 0 and mu-law with ``ULAW_SILENCE_BYTE`` (0xFF). Returns b"" when empty.
        """
        rest = bytes(self._buf)
        self._buf.clear()
        if rest and pad_byte is not None:
            rest += bytes([pad_byte]) * (self.frame_bytes - len(rest))
        return rest

    def clear(self) -> None:
        """Drop the remainder (barge-in)."""
        self._buf.clear()


# --------------------------------------------------------------------------------------------------
# Pacing
# --------------------------------------------------------------------------------------------------


class Pacer:
    """Release one frame every ``frame_ms`` in real time, without drift.

    Deadlines are ``start + n * frame`` on the event-loop clock, so sleep overshoot on one frame is
    absorbed by the next instead of accumulating (as ``sleep(0.02)`` per frame would). The first
    :meth:`wait` after construction/:meth:`reset` returns at once and sets the start.

    ``lead_frames`` lets the sender run that many frames ahead of real time (fills the far end's
    jitter buffer quickly). If the sender falls more than ``max_lag_ms`` behind (event-loop stall),
    the schedule is re-based on now instead of bursting all the missed frames at once.
    ``clock``/``sleep`` are injectable for tests; by default the running loop's ``time()`` and
    ``asyncio.sleep``.
    """

    __slots__ = ("_clock", "_n", "_sleep", "_start", "frame_s", "lead_frames", "max_lag_s")

    def __init__(
        self,
        frame_ms: float,
        *,
        lead_frames: int = 0,
        max_lag_ms: float | None = 200.0,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
    ):
        if frame_ms <= 0:
            raise ValueError(f"frame_ms must be > 0, got {frame_ms!r}")
        if lead_frames < 0:
            raise ValueError(f"lead_frames must be >= 0, got {lead_frames!r}")
        self.frame_s = frame_ms / 1000.0
        self.lead_frames = lead_frames
        self.max_lag_s = None if max_lag_ms is None else max_lag_ms / 1000.0
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._start: float | None = None
        self._n = 0

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    @property
    def frames_sent(self) -> int:
        """Frames released since the last reset."""
        return self._n

    def deadline(self, n: int) -> float | None:
        """Clock time at which frame ``n`` (0-based) is due; None before the first wait()."""
        if self._start is None:
            return None
        return self._start + (n - self.lead_frames) * self.frame_s

    def lateness(self) -> float | None:
        """How late (s) the next frame already is, counted from its deadline or, for lead frames
        (due before the start on purpose), from the start; None before the first wait()."""
        if self._start is None:
            return None
        due = self._start + (self._n - self.lead_frames) * self.frame_s
        return self._now() - max(due, self._start)

    def reset(self) -> None:
        """Start a new schedule (barge-in, new response, or resuming after silence)."""
        self._start = None
        self._n = 0

    async def wait(self) -> None:
        """Sleep until the next frame is due, then count it as sent."""
        now = self._now()
        if self._start is None:
            self._start = now
        due = self._start + (self._n - self.lead_frames) * self.frame_s
        delay = due - now
        if delay > 0:
            await self._sleep(delay)
        elif self.max_lag_s is not None and now - max(due, self._start) > self.max_lag_s:
            # Too far behind: make this frame due now and carry on from here. (Lead frames are due
            # before the schedule's start on purpose; only lateness past the start counts.)
            self._start = now - (self._n - self.lead_frames) * self.frame_s
        self._n += 1


# --------------------------------------------------------------------------------------------------
# Levels
# --------------------------------------------------------------------------------------------------

LEVEL_FLOOR_DB: Final = -60.0


def rms_dbfs(samples: PcmLike) -> float:
    """RMS in dBFS (0 dBFS = full-scale square wave; full-scale sine = -3.01); -inf for silence."""
    x = _as_int16(samples)
    if not x.size:
        return -math.inf
    xf = x.astype(np.float64).reshape(-1)
    ms = float(np.dot(xf, xf)) / xf.size
    return 10.0 * math.log10(ms / (_I16_SCALE * _I16_SCALE)) if ms > 0 else -math.inf


def rms_level(samples: PcmLike, floor_db: float = LEVEL_FLOOR_DB) -> float:
    """Loudness in 0..1 for meters/UI and energy gates: dBFS mapped linearly from ``floor_db`` to 0.

    A dB scale matches perceived loudness (linear RMS would make speech at -30 dBFS look like 3%),
    and -60 dBFS is about the noise floor of a phone line, so silence/line noise reads 0.
    """
    db = rms_dbfs(samples)
    if db <= floor_db:
        return 0.0
    return min(1.0, (db - floor_db) / -floor_db)


def peak_level(samples: PcmLike) -> float:
    """Linear absolute peak in 0..1 (1.0 = full scale), for clipping detection."""
    x = _as_int16(samples)
    if not x.size:
        return 0.0
    peak = max(-int(x.min()), int(x.max()))
    return min(1.0, peak / _I16_SCALE)


# --------------------------------------------------------------------------------------------------
# Test signals
# --------------------------------------------------------------------------------------------------


def _n_samples(rate: int, ms: float) -> int:
    if rate <= 0 or ms < 0:
        raise ValueError(f"need rate > 0 and ms >= 0, got rate={rate!r}, ms={ms!r}")
    return round(rate * ms / 1000)


def generate_tone(rate: int, ms: float, freq: float, amplitude: float = 0.5) -> np.ndarray:
    """Sine tone as int16; ``amplitude`` is the fraction of full scale (0..1)."""
    if not 0.0 <= amplitude <= 1.0:
        raise ValueError(f"amplitude must be in 0..1, got {amplitude!r}")
    t = np.arange(_n_samples(rate, ms), dtype=np.float64) * (2.0 * math.pi * freq / rate)
    return np.rint(np.sin(t) * (amplitude * 32767.0)).astype(np.int16)


def silence(rate: int, ms: float) -> np.ndarray:
    """Digital silence as int16."""
    return np.zeros(_n_samples(rate, ms), dtype=np.int16)
