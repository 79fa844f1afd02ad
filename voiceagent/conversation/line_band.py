"""Is the caller on a full-band line (a browser, a VoIP app) or a telephone band (PSTN, 8 kHz)?

Why the end of turn asks: Whisper is less sure of its words on a telephone band, and there its
confident-sounding mishearings of a fragment ("the number is ..." -> "No, I mean.") are what its
doubt catches; on a full band its doubt is mostly about a synthetic or unusual voice saying a
complete sentence ("hello there" at -1.04), and the turn model, which was trained on 16 kHz
speech, hears the end better than the doubt does (:mod:`voiceagent.conversation.end_of_turn`).

The wire's sample rate does not say it: ACS hands over PSTN calls as 16 kHz PCM whose content
stops at ~3.4 kHz. So the line is heard: the share of the caller's speech power above 4 kHz over
their first half second of speech (Hann-windowed 20 ms frames; fricatives put a full-band voice's
power up there, a telephone band resampled to 16 kHz leaves ~nothing). Measured on the bench
voices: espeak-ng 0.09-0.18 %, flite slt/rms 0.04-0.08 %, flite awb (a dark voice) 0.003 %; the
same through the bench's phone line (300-3400 Hz, 8 kHz mu-law) 0.000001-0.000003 %.
Decided once per conversation (a line does not change its band mid-call), then no more work:
25 small FFTs per call, on frames the VAD calls the caller's speech (the agent's echo in them, if
any, came back over the same line and through the same band).
"""

from __future__ import annotations

from typing import Final

import numpy as np

__all__ = ["FRAMES_TO_DECIDE", "HIGH_BAND_SHARE", "LineBand"]

FRAMES_TO_DECIDE: Final = 25  # 0.5 s of the caller's speech in 20 ms frames: a first "hello there"
HIGH_BAND_SHARE: Final = 1e-5  # above this share of power over 4 kHz (-50 dB): a full-band line
_CUTOFF_HZ: Final = 4000.0


class LineBand:
    """Accumulates the caller's speech frames (PCM16 at ``rate``, the rate the conversation listens
    at) until it can say which line it is. At 8 kHz or less there is no band above 4 kHz to hear:
    a telephone band from the start."""

    __slots__ = ("_frames", "_high", "_rate", "_total", "wideband")

    def __init__(self, rate: int = 16000) -> None:
        self._rate = rate
        # None until FRAMES_TO_DECIDE frames were heard
        self.wideband: bool | None = None if rate > 2 * _CUTOFF_HZ else False
        self._frames = 0
        self._high = 0.0
        self._total = 0.0

    def observe(self, frame: bytes) -> None:
        """One frame the VAD called the caller's speech; free once decided."""
        if self.wideband is not None or len(frame) < 64:
            return
        x = np.frombuffer(frame, "<i2").astype(np.float32)
        power = np.abs(np.fft.rfft(x * _window(len(x)))) ** 2
        split = int(_CUTOFF_HZ * len(x) / self._rate) + 1
        self._high += float(power[split:].sum())
        self._total += float(power.sum())
        self._frames += 1
        if self._frames >= FRAMES_TO_DECIDE and self._total > 0.0:
            self.wideband = self._high / self._total > HIGH_BAND_SHARE


_WINDOWS: dict[int, np.ndarray] = {}


def _window(n: int) -> np.ndarray:
    window = _WINDOWS.get(n)
    if window is None:
        window = _WINDOWS[n] = np.hanning(n).astype(np.float32)
    return window
