"""Both sides of one conversation laid out in time, as the caller heard it: pure numpy.

Why a timeline and not two appended streams: the two sides arrive differently. The caller's audio
comes in real time (frames, sometimes with a gap: a pause of the microphone, lost frames), so it
is laid end to end and moved on to the wall clock only after a gap. The agent's audio comes
ahead of being heard (synthesis is faster than speech; the browser schedules what it gets), so a
line is laid from when it arrived or after the line before, whichever is later, and a barge-in's
``StopAudio`` cuts what had not been heard yet. What lies before the *frontier* (a little behind
now: nothing can still land there) is final and taken out, interleaved left = caller, right =
agent; the buffers hold only the seconds after it.
"""

from __future__ import annotations

import numpy as np

RESYNC_S = 0.5  # caller audio more than this behind the wall clock is moved up to it (a gap)


class StereoTimeline:
    """One recording's two channels at ``rate``, from ``t0`` (monotonic seconds) on."""

    def __init__(self, rate: int, t0: float):
        self.rate = rate
        self.t0 = t0
        self.base = 0  # sample index of the buffers' first sample (everything before was taken)
        self.caller_end = 0  # where the next caller sample goes
        self.agent_end = 0  # where the next agent sample may go at the earliest
        self.end = 0  # one past the last sample written on either side
        self._left = np.zeros(0, np.int16)
        self._right = np.zeros(0, np.int16)
        self._gains: list[tuple[int, float]] = []  # (sample index, linear gain) change points
        self._gain = 1.0  # the gain in force at ``base``

    def at(self, t: float) -> int:
        """The sample index of monotonic time ``t``."""
        return max(0, round((t - self.t0) * self.rate))

    # --- writing ----------------------------------------------------------------------------------
    def caller(self, samples: np.ndarray, t: float) -> None:
        """Caller audio whose last sample arrived at ``t``: after the caller audio before it,
        unless that is more than :data:`RESYNC_S` behind the clock."""
        start = self.at(t) - len(samples)
        if start - self.caller_end > RESYNC_S * self.rate:
            self.caller_end = start
        self.caller_end = self._put("_left", samples, max(self.caller_end, self.base))

    def agent(self, samples: np.ndarray, t: float) -> None:
        """Agent audio handed to the wire at ``t``: heard from then, or after the line before."""
        self.agent_end = self._put("_right", samples, max(self.agent_end, self.at(t), self.base))

    def cut(self, t: float) -> None:
        """A barge-in at ``t``: agent audio from then on was never heard; a duck ends with it."""
        pos = max(self.at(t), self.base)
        if self.agent_end > pos:
            self._right[pos - self.base : self.agent_end - self.base] = 0
            self.agent_end = pos
        self.gain(0.0, t)

    def gain(self, db: float, t: float) -> None:
        """The agent's audio from ``t`` on plays at ``db`` (a duck; 0 restores it)."""
        pos = max(self.at(t), self.base)
        self._gains = [g for g in self._gains if g[0] < pos]
        self._gains.append((pos, float(10 ** (db / 20))))

    def _put(self, side: str, samples: np.ndarray, start: int) -> int:
        stop = start + len(samples)
        self._reserve(stop)
        getattr(self, side)[start - self.base : stop - self.base] = samples
        self.end = max(self.end, stop)
        return stop

    def _reserve(self, stop: int) -> None:
        size = stop - self.base
        if size <= len(self._left):
            return
        capacity = max(size, 2 * len(self._left), self.rate)
        for name in ("_left", "_right"):
            grown = np.zeros(capacity, np.int16)
            old = getattr(self, name)
            grown[: len(old)] = old
            setattr(self, name, grown)

    # --- reading ----------------------------------------------------------------------------------
    def take(self, frontier: float | None = None) -> bytes:
        """Interleaved int16 (L caller, R agent) from the last take up to monotonic ``frontier``
        (None: everything written); those samples leave the buffers."""
        stop = max(self.caller_end, self.agent_end) if frontier is None else self.at(frontier)
        n = stop - self.base
        if n <= 0:
            return b""
        self._reserve(stop)
        left, right = self._left[:n], self._right[:n].astype(np.float32)
        self._apply_gains(right, stop)
        out = np.empty(2 * n, np.int16)
        out[0::2] = left
        out[1::2] = np.clip(right, -32768, 32767)
        for name in ("_left", "_right"):
            buf = getattr(self, name)
            kept = buf[n:].copy()
            buf[: len(kept)] = kept
            buf[len(kept) :] = 0
        self.base = stop
        self.end = max(self.end, stop)
        return out.tobytes()

    def _apply_gains(self, right: np.ndarray, stop: int) -> None:
        """Scale ``right`` (samples ``base``..``stop``) by the gain in force at each sample."""
        gain, pos = self._gain, self.base
        later: list[tuple[int, float]] = []
        for at, value in self._gains:
            if at >= stop:
                later.append((at, value))
                continue
            if gain != 1.0:
                right[pos - self.base : at - self.base] *= gain
            gain, pos = value, max(at, self.base)
        if gain != 1.0:
            right[pos - self.base :] *= gain
        self._gain, self._gains = gain, later
