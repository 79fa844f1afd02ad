"""The agent's own voice coming back: a level-based echo gate for caller audio.

On a phone line the agent's audio returns to us through the hybrid and the caller's handset,
delayed (tens to hundreds of ms) and weaker (the echo return loss, typically 10-30 dB). The VAD
hears that as speech, and speech over the agent is a barge-in: without a gate the agent interrupts
itself. A full echo canceller is the carrier's job; what the engine needs is the decision an
echo canceller's double-talk detector makes (the Geigel rule): near-end audio counts as the
caller only when it is no more than ``gate_db`` below the loudest far-end (agent) audio of the
last ``window_s``. Echo is weaker than that; a caller talking over the agent is not.

A fixed ``gate_db`` assumes the worst line. On a clean one (a browser with echo cancellation, a
headset, a carrier's canceller) there is no echo at all, and a caller speaking at a normal level
(-25 dBFS) is often more than 10 dB below the agent's loudest syllable: the gate would hide most of
their words and an interruption would wait for the transcript. So the reference also learns the
line's *echo return loss*: how far the loudest microphone frame of the last ``window_s`` stays
below the loudest agent frame while the agent plays and the caller is not in a turn (window maxima,
so that the agent's quiet syllables and the echo's delay do not count; the median over the last
ten seconds of such frames, robust to the few the caller speaks in). The gate is then
``max(gate_db, return loss - RETURN_MARGIN_DB)``: never weaker than configured, wider only when
the line has shown it carries little echo.

:class:`EchoReference` keeps the level of every 20 ms of agent audio on the playback clock
(loop time at which it plays), computed once per chunk (one C call per 20 ms), and answers "how
loud was the agent around now" from a monotonic queue of the window's maxima (O(1) a frame).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

from voiceagent.conversation.echo_path import EchoPath
from voiceagent.speech.audio.levels import frame_dbfs

__all__ = ["EchoReference"]

_FRAME_S = 0.02
_FLOOR_DB = -100.0
# below the agent's loudest frame, what the microphone's level is taken for while nobody talks:
# digital silence or a canceller's residue reads as this far down, whatever the agent's level
RETURN_LOSS_CAP_DB: Final = 60.0
RETURN_MARGIN_DB: Final = 10.0  # the learned gate sits this far above the echo's typical level
_RETURNS_KEPT: Final = 500  # 10 s of frames heard over the agent
_RETURNS_MIN: Final = 50  # 1 s of them before the learned loss is used
_RETURNS_EVERY: Final = 25  # the median is recomputed every 0.5 s of such frames
_AUDIBLE_DB: Final = -50.0  # an agent quieter than this says nothing about the line


class EchoReference:
    """Levels (dBFS per 20 ms) of the agent audio on the playback clock. Queried with a time that
    never goes back (the loop clock): frames move from ``_queued`` to ``_played`` as their time
    comes, and ``_played`` keeps only the frames that can still be the window's loudest (a
    monotonic queue), so a query costs O(1) however long the agent talks."""

    __slots__ = (
        "_gain_db",
        "_heard",
        "_played",
        "_queued",
        "_returns",
        "_since",
        "path",
        "return_loss_db",
        "window_s",
    )

    def __init__(self, window_s: float = 1.0):
        self.window_s = window_s
        self._queued: deque[tuple[float, float]] = deque()  # (play time, level dBFS), not yet played
        self._played: deque[tuple[float, float]] = deque()  # played: window maxima, loudest first
        self._heard: deque[tuple[float, float]] = deque()  # microphone (time, level): window maxima
        self._returns: deque[float] = deque(maxlen=_RETURNS_KEPT)  # agent minus microphone, dB
        self._since = 0  # frames observed since the median was last taken
        self.return_loss_db: float | None = None  # learned echo return loss; None: not yet known
        self._gain_db = 0.0  # the agent's audio is ducked by this much (a Duck event): so is its echo
        self.path = EchoPath()  # the echo's lag and loss: releases the caller's frames the gate hides

    def add(self, pcm: bytes, sample_rate: int, start: float) -> None:
        """Agent audio (PCM16 mono at ``sample_rate``) that plays from ``start`` (loop time, not
        before what is already queued)."""
        step = max(1, int(sample_rate * _FRAME_S)) * 2  # bytes per 20 ms
        view = memoryview(pcm)
        append = self._queued.append
        for index in range(len(pcm) // step):  # one C call per 20 ms (audioop.rms)
            level = frame_dbfs(view[index * step : (index + 1) * step])
            level += self._gain_db
            append((start + index * _FRAME_S, level if level > _FLOOR_DB else _FLOOR_DB))

    def duck(self, now: float, gain_db: float) -> None:
        """The agent's audio plays at ``gain_db`` from ``now`` on (0: restored): so does its echo,
        and a caller speaking over a ducked agent is no longer taken for it."""
        change = gain_db - self._gain_db
        if not change:
            return
        self._gain_db = gain_db
        queued = self._queued
        for index in range(len(queued) - 1, -1, -1):
            at, level = queued[index]
            if at < now:
                break
            queued[index] = (at, max(_FLOOR_DB, level + change) if level > _FLOOR_DB else level)

    def cut(self, now: float) -> None:
        """The agent stopped at ``now`` (barge-in): what it had queued after that never plays."""
        queued = self._queued
        while queued and queued[-1][0] > now:
            queued.pop()
        self._gain_db = 0.0  # what plays next (a resumed or new answer) is at full level

    def forget(self) -> None:
        """The client has played every agent frame already, at once (a test or text client, with
        no loudspeaker on the playback clock): none of it comes back, now or later. What the line
        has shown of its return loss is kept."""
        self._queued.clear()
        self._played.clear()
        self._gain_db = 0.0

    def level(self, now: float) -> float:
        """The loudest agent frame that played in ``[now - window_s, now]``; -100 when none did."""
        queued, played = self._queued, self._played
        while queued and queued[0][0] <= now:
            frame = queued.popleft()
            self.path.agent(*frame)
            while played and played[-1][1] <= frame[1]:
                played.pop()
            played.append(frame)
        oldest = now - self.window_s - _FRAME_S
        while played and played[0][0] < oldest:
            played.popleft()
        return played[0][1] if played else _FLOOR_DB

    def playing(self, now: float) -> bool:
        """Has agent audio played within the window (so a microphone frame may hold its echo)?"""
        return self.level(now) > _FLOOR_DB

    def observe(self, frame_level: float, now: float) -> float:
        """A microphone frame of ``frame_level`` dBFS heard at ``now`` while the caller is not in a
        turn: how far below the agent it stays is the line's echo return loss. Returns the agent's
        level (:meth:`level`), for :meth:`is_echo` on the same frame."""
        agent = self.level(now)
        if math.isnan(frame_level):
            return agent
        heard = self._heard  # a monotonic queue: the loudest microphone frame of the window first
        while heard and heard[-1][1] <= frame_level:
            heard.pop()
        heard.append((now, frame_level))
        while heard[0][0] < now - self.window_s:
            heard.popleft()
        if agent < _AUDIBLE_DB:
            return agent
        self.path.heard(now, frame_level, self.return_loss_db)
        self._returns.append(min(RETURN_LOSS_CAP_DB, agent - heard[0][1]))
        self._since += 1
        if self._since >= _RETURNS_EVERY and len(self._returns) >= _RETURNS_MIN:
            self._since = 0
            ordered = sorted(self._returns)
            self.return_loss_db = ordered[len(ordered) // 2]
        return agent

    def gate_db(self, gate_db: float) -> float:
        """The gate in force: the configured one, widened on a line that has shown little echo."""
        learned = self.return_loss_db
        if gate_db <= 0.0 or learned is None:
            return gate_db
        return max(gate_db, learned - RETURN_MARGIN_DB)

    def is_echo(self, frame_level: float, now: float, gate_db: float, agent: float | None = None) -> bool:
        """Is a caller frame of ``frame_level`` dBFS heard at ``now`` only the agent's echo?
        ``agent``: :meth:`level` at ``now`` when already known."""
        if gate_db <= 0.0 or not (self._played or self._queued):
            return False
        if agent is None:
            agent = self.level(now)
        gate = self.gate_db(gate_db)
        if not (agent > _FLOOR_DB and frame_level < agent - gate) or math.isnan(frame_level):
            return False
        return not self.path.is_caller(frame_level, now)  # louder than this line's echo: the caller
