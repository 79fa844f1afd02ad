"""Where the agent's echo sits in time on this line and how loud it comes back: the echo path.

The level gate of :mod:`voiceagent.conversation.echo` compares a microphone frame with the
loudest agent frame of the last second: robust to any delay, but blind to the caller for as long
as the agent keeps talking. A caller at -20 dBFS who interrupts an agent whose loudest syllables
are at -10 dBFS sits at the gate's edge, and on a line that echoes (a phone line without a
carrier's canceller) most of their first words were taken for the agent's voice: the agent gave
way 475-640 ms after their onset, against ~190 ms on a line without echo (bench_turn_taking,
``interrupt_echo``).

An echo is the agent's audio delayed and attenuated, so the microphone's level follows the
agent's level of a fixed time before, a fixed number of dB down. :class:`EchoPath` finds that
time (the *lag*, up to :data:`MAX_LAG` frames) from the frames heard while the caller is not in a
turn: at the right lag ``agent - microphone`` hardly varies over the agent's loud frames (a
linear echo path; the louder half of them through a phone band), at any other it varies as much
as speech does. Once one lag explains the echo within :data:`MAX_SPREAD_DB`, the
echo *expected now* is the agent's level around that lag less the path's loss (the loudest
:data:`LOUD_QUANTILE` of the echo, so that it errs on the echo's side), and a frame
:data:`MARGIN_DB` louder than that is the caller, even when it is below the level gate: in the
agent's gaps between words, or when the caller talks over a quiet syllable.

It only ever *releases* frames the level gate would hide: a line whose echo does not follow one
lag (none found, or non-linear) keeps the level gate alone. The microphone frame's time is the
loop time its VAD verdict came back at, as the level gate's; :data:`SPAN` frames either side of
the lag absorb the jitter of a batched VAD.

Cost: two list writes a frame, and a vectorised estimate (~0.2 ms, numpy over the last five
seconds) every :data:`EARLY_EVERY` frames heard over the agent for the first two seconds of the
call (an interruption may come that soon, and callers hear no greeting on some lines), then
every :data:`ESTIMATE_EVERY` frames, backing off to :data:`BACKOFF_MAX` on a line without a
steady path, every :data:`RECHECK_EVERY` once one is found; none on a line with hardly any echo
(:data:`NO_ECHO_LOSS_DB`).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

__all__ = ["EchoPath"]

GRID_S: Final = 0.02  # levels are kept on a 20 ms grid of the loop clock
RING: Final = 512  # grid slots kept (~10 s)
MAX_LAG: Final = 25  # frames (500 ms): the longest echo delay looked for
SPAN: Final = 2  # frames either side of the lag: the expected echo is the loudest agent frame there
WINDOW: Final = 256  # grid slots (~5 s) an estimate looks back over
MIN_FRAMES: Final = 15  # frames heard over a loud agent before a lag is trusted (0.3 s)
EARLY_EVERY: Final = 10  # frames heard between two estimates over the first EARLY_FRAMES
EARLY_FRAMES: Final = 100  # (the first 2 s: an interruption may come that soon)
ESTIMATE_EVERY: Final = 50  # frames heard between two estimates after that while none is found,
BACKOFF_MAX: Final = 500  # doubled after each estimate that finds none, up to this (10 s)
RECHECK_EVERY: Final = 50  # ... and once one is found (a playback clock drifts: the browser test's did)
# p50 - p10 of (agent - microphone) at the lag: a path this steady is one (a linear echo: ~0.2 dB;
# through a phone band, which loses a fricative's energy but not a vowel's: ~2.5 dB; a wrong lag
# or a noise that does not follow the agent: 5-25 dB) ...
MAX_SPREAD_DB: Final = 6.0
# ... and at most this share of the median lag's (one lag stands out) and of the microphone's own
# p90 - p10 over the same frames (the echo follows the agent; a line's steady hiss follows any lag)
CONTRAST: Final = 0.5
# ... and the microphone must move over those frames as an echo of speech does (tens of dB): one
# that hardly moves follows nothing (a constant hiss against a constant-level agent read as a
# path of spread 0, every lag alike, and the estimate ran at every surprise: bench_capacity's
# callers, loop lag p99 189-405 ms at 200 conversations)
MIN_OWN_SPREAD_DB: Final = 3.0
LOUD_DB: Final = 20.0  # only agent frames this close to its loudest say where the echo is
LOUD_QUANTILE: Final = 5.0  # percent: the path's loss is where its loudest echo frames sit
MARGIN_DB: Final = 3.0  # above the expected echo, a frame is the caller
SURPRISE_EVERY: Final = 10  # an echo louder than the path expects: look again at once (at most this often)
HEARD_FLOOR_DB: Final = -70.0  # a microphone quieter than this hears no echo to learn from
NO_ECHO_LOSS_DB: Final = 40.0  # a line whose echo is this far down needs no path (the gate is wide)
_FLOOR: Final = -100.0
_LAGS = np.arange(MAX_LAG + 1)


class EchoPath:
    """The echo's lag and loss on one line, learned from the levels the level gate already has."""

    __slots__ = (
        "_agent",
        "_agent_at",
        "_every",
        "_heard",
        "_mic",
        "_mic_at",
        "_since",
        "lag",
        "loss_db",
        "spread_db",
    )

    def __init__(self) -> None:
        self._agent = [_FLOOR] * RING  # agent level of each grid slot
        self._agent_at = [-1] * RING  # the grid index each agent slot holds (older: stale)
        self._mic = [_FLOOR] * RING  # microphone level heard over the agent, out of the caller's turn
        self._mic_at = [-1] * RING
        self._since = 0  # frames heard since the last estimate
        self._heard = 0  # frames heard in all
        self._every = ESTIMATE_EVERY  # frames between two estimates once the first EARLY_FRAMES are past
        self.lag: int | None = None  # frames; None: no steady echo path found (the level gate alone)
        self.loss_db = 0.0  # how far below the agent's level the echo's loudest frames come back
        self.spread_db: float | None = None  # how steady the path was at the last estimate

    def agent(self, at: float, level: float) -> None:
        """An agent frame of ``level`` dBFS played at loop time ``at``."""
        grid = round(at / GRID_S)
        slot = grid % RING
        if self._agent_at[slot] == grid:
            self._agent[slot] = max(self._agent[slot], level)
        else:
            self._agent[slot], self._agent_at[slot] = level, grid

    def heard(self, at: float, level: float, return_loss_db: float | None) -> None:
        """A microphone frame of ``level`` dBFS at ``at`` while the agent plays and the caller is
        not in a turn (what it holds is the echo). ``return_loss_db``: the level gate's learned
        loss (a line with hardly any echo needs no path)."""
        if math.isnan(level) or level < HEARD_FLOOR_DB:
            return
        grid = round(at / GRID_S)
        slot = grid % RING
        self._mic[slot], self._mic_at[slot] = level, grid
        self._since += 1
        self._heard += 1
        # louder than the path expects of the echo: its delay moved (a jitter buffer, a drifting
        # playback clock) or the caller began; looking again at once tells which, before this
        # very frame is judged (a caller's onset leaves the path as it was)
        surprised = self._since >= SURPRISE_EVERY and self.is_caller(level, at)
        if self._since < (EARLY_EVERY if self._heard <= EARLY_FRAMES else self._every) and not surprised:
            return
        self._since = 0
        if return_loss_db is not None and return_loss_db >= NO_ECHO_LOSS_DB:  # hardly any echo
            self.lag = None
        else:
            self._estimate(grid)
        if self.lag is not None:
            self._every = RECHECK_EVERY
        elif self._heard > EARLY_FRAMES:  # a line without a steady path: look less and less often
            self._every = min(BACKOFF_MAX, 2 * self._every)

    def expected(self, at: float) -> float | None:
        """The echo's level expected at ``at`` (dBFS); None when no steady path is known."""
        lag = self.lag
        if lag is None:
            return None
        grid = round(at / GRID_S) - lag
        agent, agent_at = self._agent, self._agent_at
        loudest = _FLOOR
        for g in range(grid - SPAN, grid + SPAN + 1):
            slot = g % RING
            if agent_at[slot] == g and agent[slot] > loudest:
                loudest = agent[slot]
        return loudest - self.loss_db

    def is_caller(self, level: float, at: float) -> bool:
        """Is a frame of ``level`` dBFS at ``at`` clearly louder than the echo expected then?"""
        expected = self.expected(at)
        return expected is not None and level >= expected + MARGIN_DB

    def _estimate(self, now: int) -> None:
        """The lag at which ``agent - microphone`` is steadiest over the frames kept, if steady."""
        grids = np.arange(now - WINDOW + 1, now + 1)
        slots = grids % RING
        heard = np.asarray(self._mic_at)[slots] == grids
        if int(heard.sum()) < MIN_FRAMES:
            return
        at = grids[heard]
        mic = np.asarray(self._mic, dtype=np.float32)[slots[heard]]
        wanted = at[:, None] - _LAGS[None, :]  # the agent frame each lag puts under each heard one
        wanted_slots = wanted % RING
        fresh = np.asarray(self._agent_at)[wanted_slots] == wanted
        agent = np.where(fresh, np.asarray(self._agent, dtype=np.float32)[wanted_slots], _FLOOR)
        loud = agent >= agent.max() - LOUD_DB
        counts = loud.sum(axis=0)
        diff = np.sort(np.where(loud, agent - mic[:, None], np.inf), axis=0)  # each lag's, ascending
        usable = np.flatnonzero(counts >= MIN_FRAMES)
        if not len(usable):
            return
        last = counts[usable] - 1
        columns = diff[:, usable]

        def quantile(q: float) -> np.ndarray:
            return np.take_along_axis(columns, np.round(last * q).astype(np.intp)[None, :], axis=0)[0]

        spread = quantile(0.5) - quantile(0.1)  # the loud half: a phone band's lost fricatives are the rest
        best = int(np.argmin(spread))
        self.spread_db = float(spread[best])
        # the microphone's own spread over the same frames: a steady hiss "follows" any lag
        heard_there = np.sort(mic[loud[:, usable[best]]])
        count = len(heard_there) - 1
        own = float(heard_there[round(count * 0.9)] - heard_there[round(count * 0.1)])
        if (
            own < MIN_OWN_SPREAD_DB
            or self.spread_db > MAX_SPREAD_DB
            or self.spread_db > CONTRAST * min(own, float(np.median(spread)))
        ):
            self.lag = None
            return
        self.lag, self.loss_db = int(usable[best]), float(quantile(LOUD_QUANTILE / 100.0)[best])
