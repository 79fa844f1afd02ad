"""Cache calls made from the event loop: inline when the cache lives in this process, in a worker
thread when it is across a network.

Django's cache API is blocking. With Redis (``CACHE_HOST``) a call is a network round trip, so it
runs in a worker thread, never on the loop. With the embedded default, ``LocMemCache``, a call is a
dict operation and a pickle under a lock held for microseconds: handing that to a thread cost more
than the work itself (an executor submit, a futex wake-up, then the loop thread waiting for the GIL
while the worker ran), and at 200 conversations those hand-offs were ~4 % of a worker's samples
(py-spy), one of them on every turn's path (the session state saved after each answer).

Only the exact in-process backends run inline: a subclass (a test double that blocks or fails like
a partitioned Redis) still goes to a thread, as a real network cache does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.cache import caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache

T = TypeVar("T")
IN_PROCESS: tuple[type, ...] = (LocMemCache, DummyCache)


def in_process(alias: str = "default") -> bool:
    """Does the ``alias`` cache live in this process (no I/O: safe to call on the loop)?"""
    return type(caches[alias]) in IN_PROCESS


async def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a call on the default cache: at once when that cache is in-process, else in a
    worker thread (the loop's default executor; not Django's single sync thread, which the
    database's calls share)."""
    if in_process():
        return fn(*args)
    return await asyncio.to_thread(fn, *args)
