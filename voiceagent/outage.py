"""One log line when a dependency starts failing and one when it answers again, not one per call.

A Redis outage seen from an audio socket is a failure on every frame (50 a second per caller);
logging each would bury the log and cost more than the frame. Code that rides out an outage
(keeps its last value, queues the write, skips the dashboard relay) reports it through an
:class:`OutageLog`: the first failure is a WARNING naming what goes on without the dependency,
the first success after it an INFO with how long it lasted. Pure Python: the engine may use it.
"""

from __future__ import annotations

import logging
import time


class OutageLog:
    """Tracks one dependency's outage in this process and logs its start and end once each."""

    def __init__(self, logger: logging.Logger, what: str, consequence: str):
        self.logger = logger
        self.what = what
        self.consequence = consequence
        self.down_since: float | None = None
        self.failures = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException) -> bool:
        """Record a failure; True (and one WARNING) when it starts an outage."""
        self.failures += 1
        if self.down_since is not None:
            return False
        self.down_since = time.monotonic()
        self.logger.warning(
            "%s unavailable (%s: %s); %s", self.what, type(exc).__name__, _first_line(exc), self.consequence
        )
        return True

    def ok(self) -> bool:
        """Record a success; True (and one INFO) when it ends an outage."""
        if self.down_since is None:
            return False
        lasted = time.monotonic() - self.down_since
        failures, self.down_since, self.failures = self.failures, None, 0
        self.logger.info("%s is back after %.1f s (%d failed call(s))", self.what, lasted, failures)
        return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
