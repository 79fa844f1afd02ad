"""Warm client pools for speech synthesis and recognition (spec startup step 2).

A pool holds up to ``size`` ready clients; a conversation leases one for a turn or a stream and
gives it back. Acquire waits at most ``acquire_timeout`` seconds, then raises
:class:`PoolTimeout` (the caller answers with a clear error instead of hanging). Metrics feed
``GET /pools``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

logger = logging.getLogger("voiceagent.speech.pools")
T = TypeVar("T")


class PoolTimeout(TimeoutError):
    """No client became free within the acquire timeout."""


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ClientPool(Generic[T]):
    """A bounded pool of reusable clients with lease metrics."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], Awaitable[T] | T],
        size: int,
        provider: str,
        acquire_timeout: float = 2.0,
        closer: Callable[[T], Awaitable[None] | None] | None = None,
    ):
        self.name = name
        self.factory = factory
        self.size = size
        self.provider = provider
        self.acquire_timeout = acquire_timeout
        self.closer = closer
        self._idle: deque[T] = deque()
        self._created = 0
        self._in_use = 0
        self._waiters = 0
        self._cond: asyncio.Condition | None = None
        self.acquired_total = 0
        self._waits_ms: deque[float] = deque(maxlen=512)
        self.closed = False

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def warm(self) -> int:
        """Create clients up to ``size`` concurrently; return how many are ready."""
        missing = self.size - self._created
        if missing <= 0:
            return len(self._idle)
        results = await asyncio.gather(
            *(_maybe_await(self.factory()) for _ in range(missing)), return_exceptions=True
        )
        for client in results:
            if isinstance(client, BaseException):
                logger.warning("pool %s: warming a client failed: %s", self.name, client)
                continue
            self._idle.append(client)
            self._created += 1
        return len(self._idle)

    async def acquire(self, timeout: float | None = None) -> T:
        """Lease a client, creating one lazily if the pool is not full."""
        if self.closed:
            raise RuntimeError(f"pool {self.name} is closed")
        began = time.perf_counter()
        cond = self._condition()
        async with cond:
            if not self._idle and self._created >= self.size:
                self._waiters += 1
                try:
                    await asyncio.wait_for(
                        cond.wait_for(lambda: bool(self._idle) or self._created < self.size),
                        timeout if timeout is not None else self.acquire_timeout,
                    )
                except TimeoutError:
                    raise PoolTimeout(
                        f"no {self.name} client free within "
                        f"{timeout if timeout is not None else self.acquire_timeout:g} s"
                    ) from None
                finally:
                    self._waiters -= 1
            if self._idle:
                client = self._idle.popleft()
            else:
                self._created += 1
                try:
                    client = await _maybe_await(self.factory())
                except BaseException:
                    self._created -= 1
                    raise
            self._in_use += 1
            self.acquired_total += 1
        self._waits_ms.append((time.perf_counter() - began) * 1000)
        return client

    async def release(self, client: T, broken: bool = False) -> None:
        """Return a client; a broken one is closed and replaced lazily."""
        cond = self._condition()
        async with cond:
            self._in_use -= 1
            if broken or self.closed:
                self._created -= 1
            else:
                self._idle.append(client)
            cond.notify()
        if broken or self.closed:
            await self._close_client(client)

    @contextlib.asynccontextmanager
    async def lease(self, timeout: float | None = None) -> AsyncIterator[T]:
        client = await self.acquire(timeout)
        broken = False
        try:
            yield client
        except Exception:
            broken = True
            raise
        finally:
            await self.release(client, broken=broken)

    async def _close_client(self, client: T) -> None:
        if self.closer is None:
            return
        try:
            await _maybe_await(self.closer(client))
        except Exception as exc:  # a client failing to close must not stop the others
            logger.warning("pool %s: closing a client failed: %s", self.name, exc)

    async def close(self) -> None:
        """Close idle clients; leased ones are closed on release."""
        self.closed = True
        idle, self._idle = list(self._idle), deque()
        self._created -= len(idle)
        await asyncio.gather(*(self._close_client(c) for c in idle))

    def metrics(self) -> dict[str, Any]:
        waits = sorted(self._waits_ms)
        p95 = waits[min(len(waits) - 1, int(len(waits) * 0.95))] if waits else 0.0
        return {
            "size": self.size,
            "available": len(self._idle) + max(0, self.size - self._created),
            "in_use": self._in_use,
            "utilization": round(self._in_use / self.size, 4) if self.size else 0.0,
            "waiters": self._waiters,
            "acquired_total": self.acquired_total,
            "wait_ms_p95": round(p95, 3),
            "provider": self.provider,
            "warm": len(self._idle),
        }


POOLS: dict[str, ClientPool] = {}
EMPTY_METRICS = {
    "size": 0,
    "available": 0,
    "in_use": 0,
    "utilization": 0.0,
    "waiters": 0,
    "acquired_total": 0,
    "wait_ms_p95": 0.0,
    "provider": "none",
    "warm": 0,
}


def pool_metrics() -> dict[str, dict[str, Any]]:
    """Metrics of the ``tts`` and ``stt`` pools (zeros for a pool not created)."""
    return {
        name: (POOLS[name].metrics() if name in POOLS else dict(EMPTY_METRICS)) for name in ("tts", "stt")
    }
