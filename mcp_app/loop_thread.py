"""The MCP manager's own event loop, running forever in a daemon thread.

Why not the ASGI server's loop: it does not exist under WSGI, in management commands or in tests,
and ``async_to_sync`` creates a fresh loop per call, while an MCP session must stay on ONE
long-lived loop (its transport tasks and anyio cancel scopes are bound to the task that opened
them). One dedicated loop behaves the same everywhere, keeps MCP stream traffic off the audio
loop, and costs one thread hop per tool call (measured by ``bench/bench_mcp.py``).

- sync code (DRF views, admin, management commands, tests) calls :meth:`LoopThread.run`, which
  blocks the calling thread, never the loop;
- async code on another loop awaits :meth:`LoopThread.arun` (``asyncio.wrap_future``; cancelling
  the caller cancels the work on this loop, so a barge-in still stops a running tool call).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

logger = logging.getLogger("mcp_app.loop_thread")
T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread named ``name``; ``on_start`` runs on it once it is up."""

    def __init__(self, name: str, on_start: Callable[[], None]):
        self.name = name
        self.on_start = on_start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._spawned: set[asyncio.Task] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def running(self) -> bool:
        return self._loop is not None and self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Start the thread (idempotent, thread-safe); whether this call started it."""
        with self._lock:
            if self.running:
                return False
            loop = asyncio.new_event_loop()
            started = threading.Event()
            thread = threading.Thread(
                target=self._run_loop, args=(loop, started), name=self.name, daemon=True
            )
            thread.start()
            started.wait(5)
            self._loop, self._thread = loop, thread
            loop.call_soon_threadsafe(self.on_start)
        logger.debug("MCP manager loop started")
        return True

    def _run_loop(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self, shutdown: Callable[[], Coroutine[Any, Any, Any]], timeout: float) -> bool:
        """Run ``shutdown()`` on the loop, then stop the thread (idempotent); whether it was running.

        A shutdown that fails or overruns ``timeout`` is logged; the thread is stopped anyway."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return False
            if thread.is_alive():
                try:
                    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout)
                except Exception as exc:
                    logger.warning("MCP manager shutdown incomplete: %s", exc)
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout)
            self._loop = self._thread = None
        logger.debug("MCP manager stopped")
        return True

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it (from any thread but the loop's)."""
        self.start()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("McpManager.run() called on the manager loop; await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"MCP operation did not finish within {timeout:g} s") from None

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the loop from any loop (directly when already on it)."""
        if self._loop is not None and asyncio.get_running_loop() is self._loop:
            return await coro
        self.start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))  # type: ignore[arg-type]

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """A task on the loop (call from the loop) that :meth:`cancel_spawned` can cancel."""
        # a clean context: a background task is nobody's request (no stale request id in its logs)
        task = asyncio.get_running_loop().create_task(coro, name=name, context=contextvars.Context())
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

    def cancel_spawned(self) -> None:
        for task in list(self._spawned):
            task.cancel()
