"""Live connection counts per process, for ``/health`` ``session_metrics`` and limits.

Transports call :func:`opened` / :func:`closed`; nothing here touches I/O. The session metrics
(``connected``, ``disconnected``, ``active``) count conversations only: dashboards (viewers, not
sessions) have their own count, so ``connected - disconnected == active`` always holds.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

logger = logging.getLogger(__name__)
VIEWERS = frozenset({"dashboard"})  # counted per transport, not in the session metrics


class ConnectionTracker:
    """Counts connections opened/closed per transport (browser, phone, contactcenter, dashboard)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.connected = 0
        self.disconnected = 0
        self.active: Counter[str] = Counter()

    def opened(self, transport: str) -> None:
        with self._lock:
            if transport not in VIEWERS:
                self.connected += 1
            self.active[transport] += 1

    def closed(self, transport: str) -> None:
        with self._lock:
            if self.active[transport] <= 0:  # closed twice: a bug, but the metrics stay consistent
                logger.warning("a %s connection was counted closed more often than opened", transport)
                return
            if transport not in VIEWERS:
                self.disconnected += 1
            self.active[transport] -= 1

    def active_count(self, transport: str | None = None) -> int:
        with self._lock:
            if transport is not None:
                return self.active[transport]
            return sum(v for k, v in self.active.items() if k not in VIEWERS)

    def metrics(self) -> dict[str, int]:
        return {"connected": self.connected, "disconnected": self.disconnected, "active": self.active_count()}

    def reset(self) -> None:
        with self._lock:
            self.connected = self.disconnected = 0
            self.active.clear()


tracker = ConnectionTracker()
