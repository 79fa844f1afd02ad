"""Doubling the sample rate of a live stream without holding it back: 8 kHz phone audio -> 16 kHz.

soxr's streaming resampler, at every quality that filters, hands small chunks out in blocks: fed 8
kHz in 20 ms frames it returns nothing for five frames, then 100 ms at once
(:class:`~.resampling.StreamResampler`). Behind a phone line that carries 8 kHz (Twilio Media
Streams, AudioHook) that is up to 100 ms added to every end of turn the recogniser's VAD decides.
Here every frame comes back at once, twice as long: a windowed-sinc half-band FIR in its two
polyphase branches (a half-band filter: one branch is a convolution, the other a copy of the input;
the last inputs kept between frames), delayed by
half its length (47 samples at 16 kHz, 3 ms). Its images of a telephone band (<= 3.4 kHz) land at >=
4.6 kHz, in the stopband (a 3.4 kHz tone keeps 1e-9 of its power above 4 kHz): the line still sounds
like the telephone band it is (:mod:`voiceagent.conversation.line_band` decides by the power above 4
kHz).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .pcm import PcmLike, as_int16

__all__ = ["HalfbandUpsampler", "stream_resampler"]

TAPS: Final = 95  # odd: a whole-sample delay (47 output samples), one branch keeps the input samples
KAISER_BETA: Final = 9.0


def _phases(taps: int) -> tuple[np.ndarray, int, float]:
    """The interpolation filter (cutoff at the input's Nyquist, gain 2) split into its two branches:
    the even one, a FIR; the odd one, a half-band filter's, only its centre tap (a delayed copy of
    the input): (even taps, that delay, that tap)."""
    n = np.arange(taps) - (taps - 1) // 2
    h = np.sinc(n / 2) * np.kaiser(taps, KAISER_BETA)
    h = np.append(h * (2.0 / h.sum()), 0.0)  # an even length: two branches of equal length
    odd = h[1::2]
    (centre,) = np.flatnonzero(np.abs(odd) > 1e-9)
    return h[0::2].copy(), int(centre), float(odd[centre])


_EVEN, _DELAY, _CENTRE = _phases(TAPS)
_KEEP = len(_EVEN) - 1  # inputs kept between chunks


class HalfbandUpsampler:
    """PCM16 at ``in_rate`` -> ``2 * in_rate``, streaming: each chunk returns exactly twice its
    samples (int16), the same interface as :class:`~.resampling.StreamResampler`. One
    ``np.convolve`` a chunk (the other branch is a copy), into buffers reused while chunks keep their
    size: ~10 us for a 20 ms frame."""

    __slots__ = ("_buf", "_out", "in_rate", "out_rate")

    def __init__(self, in_rate: int) -> None:
        self.in_rate, self.out_rate = in_rate, 2 * in_rate
        self._buf = np.zeros(_KEEP, dtype=np.float64)  # the kept inputs, then the chunk
        self._out = np.empty(0, dtype=np.float64)

    def process(self, pcm: PcmLike) -> np.ndarray:
        x = as_int16(pcm)
        n = x.size
        if not n:
            return np.zeros(0, dtype=np.int16)
        buf = self._buf
        if buf.size != _KEEP + n:  # a chunk of another size: new buffers, the kept inputs carried
            kept = buf[:_KEEP].copy()
            buf = self._buf = np.empty(_KEEP + n, dtype=np.float64)
            buf[:_KEEP] = kept
            self._out = np.empty(2 * n, dtype=np.float64)
        out = self._out
        buf[_KEEP:] = x
        out[0::2] = np.convolve(buf, _EVEN, "valid")
        start = _KEEP - _DELAY
        np.multiply(buf[start : start + n], _CENTRE, out=out[1::2])
        buf[:_KEEP] = buf[n:]
        np.rint(out, out=out)
        np.clip(out, -32768, 32767, out=out)
        return out.astype(np.int16)

    def flush(self) -> np.ndarray:
        """Nothing is held back beyond the filter's delay: no tail to hand out."""
        return np.zeros(0, dtype=np.int16)

    def reset(self) -> None:
        self._buf[:] = 0.0


def stream_resampler(in_rate: int, out_rate: int):
    """The streaming resampler of a live input: :class:`HalfbandUpsampler` for doubling (no block
    buffering), else soxr's :class:`~.resampling.StreamResampler`."""
    if out_rate == 2 * in_rate:
        return HalfbandUpsampler(in_rate)
    from .resampling import StreamResampler

    return StreamResampler(in_rate, out_rate)
