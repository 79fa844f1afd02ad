"""The background history writer: turns reach the database in order, batched, and are never dropped
silently.

A turn is queued the moment it is final and written at once, or, under load, within
``min_interval_s`` (0.25 s): after each write the writer rests for the rest of that interval while
rows gather, so a busy process writes one transaction per interval instead of one per row (the ORM's
fixed cost per transaction, on a thread that shares the GIL with the event loop, was ~9 % of a
server's CPU at 200 conversations). The conversation does not wait for the database (with SQLite all
writes share one thread). The queue is bounded: when the database falls ``maxsize`` rows behind,
producers wait instead of dropping history.

A failed write (the database locked, restarting or unreachable) is retried with backoff (0.2 s
doubling to 5 s) for up to ``retry_for_s``; the batch is written in one transaction, so a retry
never duplicates rows. What still fails after that - or at once, for an error that is not a
connection or lock problem - is written row by row, and each row that cannot be written is logged
at ERROR with its session id and role (never its content). ``flush()`` waits until everything
queued is written or given up; ``flush(session_id)`` only until that session's rows are: a
conversation that starts or ends must not wait for every other conversation's rows, which under load
are never all written at once (200 callers starting together waited seconds for their greeting).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.db import InterfaceError, OperationalError

logger = logging.getLogger("agents_app.sessions")

TRANSIENT = (OperationalError, InterfaceError)  # locked, restarting, unreachable: worth waiting for
Item = tuple
WriteBatch = Callable[[list[Item]], Awaitable[None]]


def describe(item: Item) -> tuple[str, str]:
    """(session id, role) of a queued row, for the log: never its content."""
    if item[0] in ("turn", "correct"):
        return item[1], item[2].role
    return item[1], "handoff"


class HistoryWriter:
    """Writes history rows in the background, in order, batched, retrying failed writes."""

    def __init__(
        self,
        write: WriteBatch,
        *,
        maxsize: int = 10_000,
        retry_for_s: float = 30.0,
        first_delay: float = 0.2,
        max_delay: float = 5.0,
        min_interval_s: float = 0.25,
    ):
        self.write = write
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)
        self.task: asyncio.Task | None = None
        self.retry_for_s = retry_for_s
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.min_interval_s = min_interval_s
        self.lost_total = 0
        self.pending: collections.Counter[str] = collections.Counter()  # rows not yet written, by session
        self._drained: dict[str, asyncio.Event] = {}  # set when a session's pending rows reach none

    async def put(self, item: Item) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name="history-writer")
        self.pending[item[1]] += 1  # counted before a full queue makes us wait: flush() waits for it
        try:
            await self.queue.put(item)
        except BaseException:
            self._done([item])
            raise

    async def flush(self, timeout: float | None = None, session_id: str | None = None) -> bool:
        """Wait until everything queued is written (or given up), or with ``session_id`` that
        session's rows only; False when ``timeout`` passed first (the writer goes on with it)."""
        if self.task is None or self.task.done():
            return True
        if session_id is None:
            waiting = self.queue.join()
        elif not self.pending[session_id]:
            return True
        else:
            waiting = self._drained.setdefault(session_id, asyncio.Event()).wait()
        try:
            await asyncio.wait_for(asyncio.shield(waiting), timeout)
        except TimeoutError:
            return False
        return True

    def _done(self, batch: list[Item]) -> None:
        """The batch is written or given up: its sessions' waiters wake when none of theirs is left."""
        for item in batch:
            session_id = item[1]
            self.pending[session_id] -= 1
            if self.pending[session_id] <= 0:
                del self.pending[session_id]
                drained = self._drained.pop(session_id, None)
                if drained is not None:
                    drained.set()

    async def _run(self) -> None:
        while True:
            batch = [await self.queue.get()]
            began = time.monotonic()
            while not self.queue.empty() and len(batch) < 500:
                batch.append(self.queue.get_nowait())
            try:
                await self._write(batch)
            except Exception:  # a bug in the reporting itself: say so, keep the writer alive
                logger.exception("history writer: %d row(s) in an unknown state", len(batch))
            finally:
                self._done(batch)
                for _ in batch:
                    self.queue.task_done()
            # Under load, rows gather while the writer rests: one transaction per interval, not per
            # row. A lone row still goes at once (the rest comes after the write, not before).
            rest = self.min_interval_s - (time.monotonic() - began)
            if rest > 0:
                await asyncio.sleep(rest)

    async def _write(self, batch: list[Item]) -> None:
        began = time.monotonic()
        delay = self.first_delay
        failures = 0
        while True:
            try:
                await self.write(batch)
            except Exception as exc:
                failures += 1
                if failures == 1:
                    sessions = sorted({describe(item)[0] for item in batch})
                    logger.warning(
                        "history write failed (%s: %s); %d row(s) of session(s) %s kept and retried",
                        type(exc).__name__,
                        _first_line(exc),
                        len(batch),
                        ", ".join(sessions[:5]) + (" ..." if len(sessions) > 5 else ""),
                    )
                if not isinstance(exc, TRANSIENT) or time.monotonic() - began + delay > self.retry_for_s:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_delay)
                continue
            if failures:
                logger.info(
                    "history written after %d failed attempt(s) over %.1f s (%d row(s))",
                    failures,
                    time.monotonic() - began,
                    len(batch),
                )
            return
        await self._write_rows(batch)

    async def _write_rows(self, batch: list[Item]) -> None:
        """Last resort, one row at a time: a row the database refuses does not take the others with it."""
        for item in batch:
            try:
                await self.write([item])
            except Exception as exc:
                self.lost_total += 1
                session_id, role = describe(item)
                logger.error(
                    "history lost: session %s, a %s row could not be written (%s: %s)",
                    session_id,
                    role,
                    type(exc).__name__,
                    _first_line(exc),
                )


def _first_line(exc: BaseException) -> Any:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
