"""voiceagent.cache_io: cache calls from the loop run inline for the in-process cache and in a
worker thread for a network one (Redis) or anything else (a test double standing in for one)."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache

from agents_app.sessions import cache_call
from voiceagent import cache_io


class SlowLocMem(LocMemCache):
    """A double for a network cache (tests block or fail it): not the exact in-process class."""


def _cache(settings, backend: str, **extra) -> None:
    settings.CACHES = {"default": {"BACKEND": backend, **extra}}


async def test_the_in_process_cache_is_called_on_the_loop_thread(settings):
    _cache(settings, "django.core.cache.backends.locmem.LocMemCache", LOCATION="cache-io")
    assert cache_io.in_process()
    assert await cache_io.call(threading.get_ident) == threading.get_ident()
    await cache_io.call(cache.set, "k", {"v": 1}, 30)
    assert await cache_io.call(cache.get, "k") == {"v": 1}


async def test_the_session_store_saves_state_without_a_thread_hop_on_the_in_process_cache(settings):
    """The state saved after every answer: before, each save was a thread hand-off on a worker
    whose loop then waited for the GIL while the worker thread pickled."""
    _cache(settings, "django.core.cache.backends.locmem.LocMemCache", LOCATION="cache-io")
    assert await cache_call(threading.get_ident) == threading.get_ident()


async def test_a_cache_class_other_than_the_in_process_ones_goes_to_a_worker_thread(settings):
    _cache(settings, f"{__name__}.SlowLocMem", LOCATION="cache-io-double")
    assert not cache_io.in_process()
    assert await cache_io.call(threading.get_ident) != threading.get_ident()


async def test_errors_reach_the_caller_either_way(settings):
    def boom() -> None:
        raise ConnectionError("cache down")

    for backend in ("django.core.cache.backends.locmem.LocMemCache", f"{__name__}.SlowLocMem"):
        _cache(settings, backend, LOCATION="cache-io-errors")
        with pytest.raises(ConnectionError, match="cache down"):
            await cache_io.call(boom)


@pytest.mark.redis
async def test_redis_is_called_in_a_worker_thread_and_answers(settings):
    _cache(settings, "django.core.cache.backends.redis.RedisCache", LOCATION="redis://127.0.0.1:6379/5")
    assert not cache_io.in_process()
    assert await cache_io.call(threading.get_ident) != threading.get_ident()
    await cache_io.call(cache.set, "cache-io-key", {"v": 2}, 30)
    try:
        assert await cache_io.call(cache.get, "cache-io-key") == {"v": 2}
    finally:
        await cache_io.call(cache.delete, "cache-io-key")
