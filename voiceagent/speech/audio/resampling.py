"""Streaming and one-shot resampling with soxr, between the :data:`SUPPORTED_RATES`.

One :class:`StreamResampler` per stream and direction keeps the filter state across 20 ms frames;
:func:`resample` is for whole signals (files, prompts, tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import soxr

from .pcm import PcmLike, as_int16, validate_rate

QUALITIES: Final = ("QQ", "LQ", "MQ", "HQ", "VHQ")
# "MQ" = soxr 16-bit-precision filter: the precision of PCM16 itself (HQ's 20 bits buys nothing for
# int16/G.711), flat passband to ~3.6 kHz at 8 kHz (covers the whole 300-3400 Hz telephone band),
# >110 dB alias rejection, and half HQ's buffering latency at 48 kHz. "LQ" roughly halves latency
# again (~22 ms vs ~43 ms per 8k<->24k stage) but is -8 dB at 3.4 kHz. "QQ" (cubic) has no
# anti-alias filter at all: never use it for downsampling.
DEFAULT_QUALITY: Final = "MQ"


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
        x = as_int16(pcm)
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
    x = as_int16(samples)
    in_rate = validate_rate(in_rate, name="input sample rate")
    out_rate = validate_rate(out_rate, name="output sample rate")
    quality = _validate_quality(quality)
    if in_rate == out_rate:
        return x.copy()
    return soxr.resample(np.ascontiguousarray(x), in_rate, out_rate, quality=quality)


FILE_RATES: Final = (4000, 192000)  # what a recording on disk may be at (11.025, 22.05, 44.1 kHz ...)


def resample_file(
    samples: PcmLike, in_rate: int, out_rate: int, quality: str = DEFAULT_QUALITY
) -> np.ndarray:
    """:func:`resample` for a recording from disk, which may be at any rate within
    :data:`FILE_RATES` (espeak-ng writes 22.05 kHz, a phone 44.1 kHz); ``out_rate`` is still one
    of the :data:`SUPPORTED_RATES`, the rates the engine and transports run at."""
    if isinstance(in_rate, bool) or not isinstance(in_rate, int | np.integer):
        raise ValueError(f"unsupported input sample rate {in_rate!r}")
    if not FILE_RATES[0] <= int(in_rate) <= FILE_RATES[1]:
        raise ValueError(
            f"unsupported input sample rate {in_rate} Hz: from {FILE_RATES[0]} to {FILE_RATES[1]} Hz"
        )
    x = as_int16(samples)
    out_rate = validate_rate(out_rate, name="output sample rate")
    quality = _validate_quality(quality)
    if int(in_rate) == out_rate:
        return x.copy()
    return soxr.resample(np.ascontiguousarray(x), int(in_rate), out_rate, quality=quality)
