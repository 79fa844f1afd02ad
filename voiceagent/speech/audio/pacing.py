"""Real-time pacing of outbound frames (one frame every ``frame_ms``, without drift)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


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
