"""The message-rate limiter of our WebSocket endpoints (browser, dashboard relay, media stream).

A token bucket: it holds ``rate * burst_s`` tokens, refills at ``rate`` per second and every
message takes one; a message finding the bucket empty is a flood (the socket closes with 1008).

Why not a one-second window of timestamps: ASGI servers do not tell us when a message arrived,
only when we read it. While the event loop stalls (a blocking call, a garbage collection, a CPU
burst of other sessions) a client's messages wait in the socket and are then read all at once;
a window counted that backlog as a burst and closed clients that never exceeded the rate (issue
12: 50 real-time browser clients at 51 messages/s against a limit of 100 were dropped). The
bucket bounds what a client can do over any interval ``T`` to ``rate * (T + burst_s)`` messages.
A client that sends at most ``rate`` per second and whose messages the server reads at most
``burst_s`` seconds late can never be read faster than that, so it is never closed; a flood at
``k`` times the rate is closed after about ``burst_s / (k - 1)`` seconds.

The bucket alone still closed compliant clients when the server's own handler held the socket's
reading up for longer than the bucket lasts: a conversation's start awaited for seconds while
200 callers started at once (it waited for every session's history rows, since fixed; any slow
handler does the same) (bench_capacity: 50 of 200 callers sending 50 frames a second
closed with 1008). :meth:`MessageRateLimiter.excuse` credits that time: what a client within the
rate sent while we did not read is not its burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class MessageRateLimiter:
    """Token bucket of one socket; :meth:`allow` is called for each message as it is read."""

    __slots__ = ("_clock", "_excused", "_excused_until", "_stamp", "_tokens", "capacity", "rate")

    def __init__(self, rate: float, burst_s: float, clock: Callable[[], float] = time.monotonic):
        self.rate = float(rate)
        self.capacity = max(1.0, self.rate * burst_s)
        self._tokens = self.capacity
        self._excused = 0.0  # messages the server's own delay let queue up (see excuse)
        self._excused_until = 0.0
        self._clock = clock
        self._stamp = clock()

    def allow(self) -> bool:
        """Take one token; False when the client has sent more than its rate allows (a flood)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._excused >= 1.0:
            if now <= self._excused_until:
                self._excused -= 1.0
                return True
            self._excused = 0.0
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def excuse(self, seconds: float) -> None:
        """The server held this socket's reading up for ``seconds`` (its own handler ran): the
        rate's worth of messages for that time may be read on top of the bucket, within the
        bucket's own span from now (the backlog is read at once; after that, no excuse is left).
        A client gains nothing beyond its rate over the time we did not read it."""
        if seconds > 0:
            self._excused += seconds * self.rate
            self._excused_until = self._clock() + self.capacity / self.rate
