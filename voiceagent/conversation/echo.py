"""The agent's own voice coming back: a level-based echo gate for caller audio.

On a phone line the agent's audio returns to us through the hybrid and the caller's handset,
delayed (tens to hundreds of ms) and weaker (the echo return loss, typically 10-30 dB). The VAD
hears that as speech, and speech over the agent is a barge-in: without a gate the agent interrupts
itself. A full echo canceller is the carrier's job; what the engine needs is the decision an
echo canceller's double-talk detector makes (the Geigel rule): near-end audio counts as the
caller only when it is no more than ``gate_db`` below the loudest far-end (agent) audio of the
last ``window_s``. Echo is weaker than that; a caller talking over the agent is not.

:class:`EchoReference` keeps the level of every 20 ms of agent audio on the playback clock
(loop time at which it plays), computed once per chunk (one C call per 20 ms), and answers "how loud was the
agent around now" by scanning the few frames in the window.
"""

from __future__ import annotations

import math
from collections import deque

from voiceagent.speech.audio.levels import frame_dbfs

__all__ = ["EchoReference"]

_FRAME_S = 0.02
_FLOOR_DB = -100.0


class EchoReference:
    """Levels (dBFS per 20 ms) of the agent audio on the playback clock."""

    __slots__ = ("_frames", "window_s")

    def __init__(self, window_s: float = 1.0):
        self.window_s = window_s
        self._frames: deque[tuple[float, float]] = deque()  # (play time, level dBFS), in time order

    def add(self, pcm: bytes, sample_rate: int, start: float) -> None:
        """Agent audio (PCM16 mono at ``sample_rate``) that plays from ``start`` (loop time)."""
        step = max(1, int(sample_rate * _FRAME_S)) * 2  # bytes per 20 ms
        view = memoryview(pcm)
        append = self._frames.append
        for index in range(len(pcm) // step):  # one C call per 20 ms (audioop.rms)
            level = frame_dbfs(view[index * step : (index + 1) * step])
            append((start + index * _FRAME_S, level if level > _FLOOR_DB else _FLOOR_DB))

    def cut(self, now: float) -> None:
        """The agent stopped at ``now`` (barge-in): what it had queued after that never plays."""
        frames = self._frames
        while frames and frames[-1][0] > now:
            frames.pop()

    def level(self, now: float) -> float:
        """The loudest agent frame that played in ``[now - window_s, now]``; -100 when none did.
        Frames older than the window are forgotten."""
        frames = self._frames
        oldest = now - self.window_s
        while frames and frames[0][0] < oldest - _FRAME_S:
            frames.popleft()
        loudest = _FLOOR_DB
        for at, level in frames:
            if at > now:
                break
            if level > loudest:
                loudest = level
        return loudest

    def is_echo(self, frame_level: float, now: float, gate_db: float) -> bool:
        """Is a caller frame of ``frame_level`` dBFS heard at ``now`` only the agent's echo?"""
        if gate_db <= 0.0 or not self._frames:
            return False
        agent = self.level(now)
        return agent > _FLOOR_DB and frame_level < agent - gate_db and not math.isnan(frame_level)
