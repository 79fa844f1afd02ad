"""Session-state writes that ride out a cache outage: the latest state per session, kept and retried.

A conversation's state lives in the shared session cache (Redis) so that another worker can read
it. When that cache is down, the conversation must go on from process memory (issue 12, "degrade,
never drop"): :meth:`PendingStates.save` never raises. A write that fails is kept as the session's
*pending* state - one slot per session, the newest save replacing the older one - and a retry task
writes every pending state with backoff (0.25 s doubling to 5 s) until the cache answers again.
While a session has a pending state, its saves only replace the slot (the retry writes it), so an
older state can never overwrite a newer one; writes of one session are serialised by a lock.

Logged per session once per outage: a WARNING when its state is first kept, an INFO when it is
written. The number of slots is bounded (:data:`MAX_PENDING`); past it the oldest is dropped with a
WARNING. :meth:`PendingStates.latest` lets a conversation restarting in this process during the
outage read its own last state.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("agents_app.sessions")

Write = Callable[[str, dict[str, Any]], Awaitable[None]]
MAX_PENDING = 10_000
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 5.0


class PendingStates:
    """The latest unwritten state of each session whose cache write failed, and their retry."""

    def __init__(
        self,
        write: Write,
        *,
        first_delay: float = FIRST_DELAY_S,
        max_delay: float = MAX_DELAY_S,
        max_pending: int = MAX_PENDING,
    ):
        self._write = write
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.max_pending = max_pending
        self.pending: dict[str, dict[str, Any]] = {}
        self._since: dict[str, float] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._task: asyncio.Task | None = None

    def latest(self, session_id: str) -> dict[str, Any] | None:
        """The state of ``session_id`` saved here but not yet written to the cache, if any."""
        return self.pending.get(session_id)

    async def save(self, session_id: str, data: dict[str, Any]) -> bool:
        """Write ``data`` as the session's state; never raises. True when written now, False when
        kept for the retry (the cache is failing, or an earlier state of it is still pending)."""
        if session_id in self.pending:
            self.pending[session_id] = data  # the retry writes the newest
            return False
        lock = self._lock(session_id)
        async with lock:
            if session_id in self.pending:
                self.pending[session_id] = data
                return False
            try:
                await self._write(session_id, data)
            except Exception as exc:
                self._keep(session_id, data, exc)
                return False
        return True

    async def flush(self) -> list[str]:
        """One attempt to write every pending state now (shutdown); the sessions still pending."""
        await self._write_pending()
        return list(self.pending)

    # --- internals ---------------------------------------------------------------------------------
    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _keep(self, session_id: str, data: dict[str, Any], exc: BaseException) -> None:
        if len(self.pending) >= self.max_pending:
            oldest = next(iter(self.pending))
            self.pending.pop(oldest)
            self._since.pop(oldest, None)
            logger.warning(
                "session %s: its unwritten state is dropped (more than %d sessions wait for the cache)",
                oldest,
                self.max_pending,
            )
        self.pending[session_id] = data
        self._since[session_id] = time.monotonic()
        logger.warning(
            "session %s: the session cache is unavailable (%s: %s); the conversation goes on, its latest "
            "state is kept in memory and written when the cache is back",
            session_id,
            type(exc).__name__,
            str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "",
        )
        task = self._task
        if task is None or task.done():
            self._task = asyncio.get_running_loop().create_task(self._retry(), name="session-state-retry")

    async def _retry(self) -> None:
        delay = self.first_delay
        while self.pending:
            await asyncio.sleep(delay)
            written = await self._write_pending()
            delay = self.first_delay if written else min(delay * 2, self.max_delay)

    async def _write_pending(self) -> bool:
        """Write the pending states, oldest first; False at the first failure (the cache is still
        down: no point trying the others now)."""
        for session_id in list(self.pending):
            async with self._lock(session_id):
                data = self.pending.get(session_id)
                if data is None:
                    continue
                try:
                    await self._write(session_id, data)
                except Exception:
                    return False
                if self.pending.get(session_id) is data:  # else a newer state came meanwhile: next round
                    del self.pending[session_id]
                    since = self._since.pop(session_id, time.monotonic())
                    logger.info(
                        "session %s: state written, the session cache is back after %.1f s",
                        session_id,
                        time.monotonic() - since,
                    )
        return True

    def cancel(self) -> None:
        """Stop retrying (tests); pending states stay readable."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
