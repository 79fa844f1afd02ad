"""Warm client pools for speech synthesis and recognition (spec startup step 2).

A pool is a set of warm clients, not a ceiling on callers. ``size`` (``TTS_POOL_SIZE`` /
``STT_POOL_SIZE``) clients are made at warmup and kept. When every client is leased, the pool
makes another on demand, up to ``max_size``: by default :func:`session_limit`, the most
conversations one process runs on the cascade speech path at once, each holding at most one
recogniser and one synthesiser at a time. A client made beyond ``size`` is closed again (with the
pool's ``closer``) once it has been idle for ``idle_timeout`` seconds, so the pool shrinks back to
its warm set.

Only a pool at ``max_size`` makes a caller wait, at most ``acquire_timeout`` seconds, for a client
to come back (first come, first served: a released client goes straight to the oldest waiter).
Then :class:`PoolTimeout` says why, and the refusal is counted in ``refused_total``; the provider
turns it into a ``ProviderError``, which the engine logs once at WARNING and tells the client
(``stt_error`` / ``tts_error``).

What bounds threads and processes: a pool never holds more than ``max_size`` clients (leased,
idle or being made), and a client is at most one unit of concurrent work: one pocketsphinx child
process, one espeak-ng process while its slot is leased, one Azure recognition or synthesizer
whose blocking SDK calls run on its provider's executor of ``max_size + 1`` threads (made lazily,
reused). Growth therefore stops at the session limit. Metrics feed ``GET /pools``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, Generic, TypeVar

from voiceagent.config import VARIABLES

logger = logging.getLogger("voiceagent.speech.pools")
T = TypeVar("T")

# The limits of the sessions that lease speech clients, each with the clients one session may hold
# at once: the cascade's transports one, the AudioHook monitor two (it transcribes both channels).
# The contact-center bot always runs the realtime voice API and leases none (runtime.conversation_mode).
SESSION_LIMIT_SETTINGS: Final = {
    "BROWSER_MAX_CONNECTIONS": 1,
    "TELEPHONY_MAX_STREAMS": 1,
    "CONTACTCENTER_MONITOR_MAX_SESSIONS": 2,
}
IDLE_TIMEOUT_S: Final = 30.0  # a client beyond the warm size is closed after this long unused
_DEFAULTS: Final = {var.name: var.default for var in VARIABLES if var.name in SESSION_LIMIT_SETTINGS}
_MAKE: Final = object()  # a waiter's grant: make a new client (its place is already counted)


def session_limit(config: Mapping[str, Any]) -> int:
    """``BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS + 2 * CONTACTCENTER_MONITOR_MAX_SESSIONS`` of
    ``config`` (defaults for missing keys): the hard maximum of each speech pool, because no more
    clients can be needed at once."""
    total = 0
    for key, per_session in SESSION_LIMIT_SETTINGS.items():
        value = config.get(key)
        total += per_session * int(_DEFAULTS[key] if value in (None, "") else value)
    return total


DEFAULT_MAX_SIZE: Final = session_limit({})


def pool_options(config: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A speech provider's pool arguments from ``config``: ``<KIND>_POOL_SIZE`` warm clients (4),
    ``POOL_ACQUIRE_TIMEOUT`` (2 s) and the session limit as the hard maximum. ``kind``: stt | tts."""
    size, timeout = config.get(f"{kind.upper()}_POOL_SIZE"), config.get("POOL_ACQUIRE_TIMEOUT")
    return {
        "pool_size": 4 if size is None else int(size),
        "acquire_timeout": 2.0 if timeout is None else float(timeout),
        "max_size": session_limit(config),
    }


class PoolTimeout(TimeoutError):
    """The pool is at its maximum and no client came back within the acquire timeout (a refusal)."""


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ClientPool(Generic[T]):
    """``size`` warm clients, grown on demand up to ``max_size``, with lease metrics."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], Awaitable[T] | T],
        size: int,
        provider: str,
        acquire_timeout: float = 2.0,
        closer: Callable[[T], Awaitable[None] | None] | None = None,
        *,
        max_size: int | None = None,
        idle_timeout: float = IDLE_TIMEOUT_S,
    ):
        self.name = name
        self.factory = factory  # read at each creation: a benchmark may swap what the pool leases
        self.size = max(0, int(size))
        self.max_size = max(1, self.size, DEFAULT_MAX_SIZE if max_size is None else int(max_size))
        self.provider = provider
        self.acquire_timeout = acquire_timeout
        self.closer = closer
        self.idle_timeout = idle_timeout
        self._idle: deque[tuple[T, float]] = deque()  # (client, idle since); newest on the right
        self._created = 0  # clients that exist or are being made: leased + idle + in the making
        self._in_use = 0
        self._waiting: deque[asyncio.Future] = deque()
        self._trim_timer: asyncio.TimerHandle | None = None
        self._trim_loop: asyncio.AbstractEventLoop | None = None
        self._closing: set[asyncio.Task] = set()
        self._waits_ms: deque[float] = deque(maxlen=512)
        self.details: Callable[[], dict[str, Any]] | None = None  # what the provider adds to /pools
        self.acquired_total = 0
        self.refused_total = 0
        self.created_total = 0
        self.trimmed_total = 0
        self.peak_in_use = 0
        self.closed = False

    @property
    def in_use(self) -> int:
        """Clients leased now."""
        return self._in_use

    # --- making clients ---------------------------------------------------------------------------
    async def _make(self) -> T:
        """Make one client whose place in ``_created`` is already counted; give the place back if
        making it fails (or is cancelled)."""
        try:
            client = await _maybe_await(self.factory())
        except BaseException:
            self._created -= 1
            self._grant_place()
            raise
        self.created_total += 1
        return client

    async def warm(self) -> int:
        """Make clients up to ``size`` concurrently; return how many are idle and ready."""
        missing = self.size - self._created
        if missing > 0:
            self._created += missing
            results = await asyncio.gather(*(self._make() for _ in range(missing)), return_exceptions=True)
            for client in results:
                if isinstance(client, BaseException):
                    logger.warning("pool %s: warming a client failed: %s", self.name, client)
                elif self.closed:
                    self._created -= 1
                    await self._close_client(client)
                else:
                    self._give(client)
        return len(self._idle)

    # --- leasing ------------------------------------------------------------------------------------
    async def acquire(self, timeout: float | None = None) -> T:
        """Lease an idle client, else make one, else (at ``max_size``) wait for one to come back.

        Raises :class:`PoolTimeout` when the pool is at its maximum for ``timeout`` seconds
        (default ``acquire_timeout``), ``RuntimeError`` when the pool is closed.
        """
        if self.closed:
            raise RuntimeError(f"pool {self.name} is closed")
        began = time.perf_counter()
        if self._idle:
            client = self._idle.pop()[0]  # most recently used: the longest idle age out at the left
        elif self._created < self.max_size:
            self._created += 1
            client = await self._make()
        else:
            client = await self._wait(self.acquire_timeout if timeout is None else timeout)
        self._in_use += 1
        self.peak_in_use = max(self.peak_in_use, self._in_use)
        self.acquired_total += 1
        self._waits_ms.append((time.perf_counter() - began) * 1000)
        return client

    async def _wait(self, limit: float) -> T:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        try:
            async with asyncio.timeout(limit):
                grant = await fut
        except BaseException as exc:
            with contextlib.suppress(ValueError):
                self._waiting.remove(fut)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._return_grant(fut.result())  # granted in the same instant: pass it on
            if isinstance(exc, TimeoutError):
                self.refused_total += 1
                raise PoolTimeout(self.refusal_reason(limit)) from None
            raise
        return await self._make() if grant is _MAKE else grant

    def refusal_reason(self, waited: float) -> str:
        """Why a caller was refused (the text of :class:`PoolTimeout`)."""
        return (
            f"all {self.max_size} {self.name} clients are in use (this pool's maximum) "
            f"and none came free within {waited:g} s"
        )

    async def release(self, client: T, broken: bool = False) -> None:
        """Return a client; a broken one (or any, once the pool is closed) is closed instead."""
        self._in_use = max(0, self._in_use - 1)
        if broken or self.closed:
            self._created -= 1
            self._grant_place()
            await self._close_client(client)
        else:
            self._give(client)

    @contextlib.asynccontextmanager
    async def lease(self, timeout: float | None = None) -> AsyncIterator[T]:
        """``async with pool.lease() as client``: released on exit, as broken on an exception."""
        client = await self.acquire(timeout)
        broken = False
        try:
            yield client
        except Exception:
            broken = True
            raise
        finally:
            await self.release(client, broken=broken)

    def _next_waiter(self) -> asyncio.Future | None:
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                return fut
        return None

    def _give(self, client: T) -> None:
        """Hand a client to the oldest waiter, else keep it idle (and maybe trim later)."""
        fut = self._next_waiter()
        if fut is not None:
            fut.set_result(client)
            return
        self._idle.append((client, time.monotonic()))
        self._schedule_trim()

    def _grant_place(self) -> None:
        """A place below ``max_size`` opened: let the oldest waiter make a client in it."""
        if self.closed or self._created >= self.max_size:
            return
        fut = self._next_waiter()
        if fut is not None:
            self._created += 1
            fut.set_result(_MAKE)

    def _return_grant(self, grant: Any) -> None:
        if grant is _MAKE:
            self._created -= 1
            self._grant_place()
        elif self.closed:
            self._created -= 1
            self._close_later(grant)
        else:
            self._give(grant)

    # --- shrinking back to the warm set ---------------------------------------------------------------
    def _schedule_trim(self) -> None:
        if self.closed or self._created <= self.size or not self._idle:
            return
        loop = asyncio.get_running_loop()
        if self._trim_timer is not None and self._trim_loop is loop:
            return
        delay = max(0.0, self._idle[0][1] + self.idle_timeout - time.monotonic())
        self._trim_timer, self._trim_loop = loop.call_later(delay, self._trim), loop

    def _trim(self) -> None:
        """Close clients beyond the warm size that have been idle for ``idle_timeout``."""
        self._trim_timer = None
        now = time.monotonic()
        while self._idle and self._created > self.size and now - self._idle[0][1] >= self.idle_timeout:
            client, _ = self._idle.popleft()
            self._created -= 1
            self.trimmed_total += 1
            self._close_later(client)
        self._schedule_trim()

    def _close_later(self, client: T) -> None:
        task = asyncio.get_running_loop().create_task(self._close_client(client))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close_client(self, client: T) -> None:
        if self.closer is None:
            return
        try:
            await _maybe_await(self.closer(client))
        except Exception as exc:  # a client failing to close must not stop the others
            logger.warning("pool %s: closing a client failed: %s", self.name, exc)

    async def close(self) -> None:
        """Close idle clients and fail waiters; leased ones are closed on release."""
        self.closed = True
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        while (fut := self._next_waiter()) is not None:
            fut.set_exception(RuntimeError(f"pool {self.name} is closed"))
        idle, self._idle = [client for client, _ in self._idle], deque()
        self._created -= len(idle)
        await asyncio.gather(*(self._close_client(c) for c in idle), *self._closing, return_exceptions=True)

    # --- metrics ------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """The ``GET /pools`` figures (plus ``warm``, the idle clients, for ``/ready``)."""
        waits = sorted(self._waits_ms)
        p95 = waits[min(len(waits) - 1, int(len(waits) * 0.95))] if waits else 0.0
        extra = self.details() if self.details is not None else {}
        return extra | {
            "size": self.size,
            "max_size": self.max_size,
            "clients": self._created,
            "available": len(self._idle) + max(0, self.max_size - self._created),
            "in_use": self._in_use,
            "utilization": round(self._in_use / self.max_size, 4),
            "waiters": sum(not fut.done() for fut in self._waiting),
            "acquired_total": self.acquired_total,
            "refused_total": self.refused_total,
            "created_total": self.created_total,
            "trimmed_total": self.trimmed_total,
            "peak_in_use": self.peak_in_use,
            "wait_ms_p95": round(p95, 3),
            "provider": self.provider,
            "warm": len(self._idle),
        }


POOLS: dict[str, ClientPool] = {}
EMPTY_METRICS = {
    "size": 0,
    "max_size": 0,
    "clients": 0,
    "available": 0,
    "in_use": 0,
    "utilization": 0.0,
    "waiters": 0,
    "acquired_total": 0,
    "refused_total": 0,
    "created_total": 0,
    "trimmed_total": 0,
    "peak_in_use": 0,
    "wait_ms_p95": 0.0,
    "provider": "none",
    "warm": 0,
}


def pool_metrics() -> dict[str, dict[str, Any]]:
    """Metrics of the ``tts`` and ``stt`` pools (zeros for a pool not created)."""
    return {
        name: (POOLS[name].metrics() if name in POOLS else dict(EMPTY_METRICS)) for name in ("tts", "stt")
    }
