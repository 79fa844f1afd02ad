"""ClientPool: a warm set that grows on demand up to its maximum, trims back, and counts refusals.

Issue 11, finding 2: with pools of 4, eight of twelve callers speaking at once were refused
("speech recognition busy"). These tests fail on the pool that capped callers at ``size``.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from voiceagent.speech.pools import DEFAULT_MAX_SIZE, ClientPool, PoolTimeout, session_limit


class Clients:
    """A factory and closer that record what the pool made and closed."""

    def __init__(self):
        self.numbers = itertools.count(1)
        self.closed: list[int] = []
        self.gate: asyncio.Event | None = None  # when set to an Event, making a client waits on it
        self.fail_next = 0

    async def make(self) -> int:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("could not make a client")
        return next(self.numbers)

    async def close(self, client: int) -> None:
        self.closed.append(client)


def pool_of(clients: Clients, size: int, max_size: int, **kw) -> ClientPool[int]:
    return ClientPool(
        "stt", clients.make, size=size, provider="test", closer=clients.close, max_size=max_size, **kw
    )


async def eventually(predicate, timeout: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (a hang guard, not a timing assertion)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def test_session_limit_is_the_sum_of_the_cascade_transport_limits():
    # 200 browser + 200 phone + 2 channels x 20 monitors, the defaults
    assert session_limit({}) == DEFAULT_MAX_SIZE == 440
    assert session_limit({"BROWSER_MAX_CONNECTIONS": 30, "TELEPHONY_MAX_STREAMS": 12}) == 82
    limits = {
        "BROWSER_MAX_CONNECTIONS": 30,
        "TELEPHONY_MAX_STREAMS": 12,
        "CONTACTCENTER_MONITOR_MAX_SESSIONS": 0,
    }
    assert session_limit(limits) == 42
    # the bot runs the realtime API (no speech client); a monitor may hold one per channel
    assert session_limit({"BROWSER_MAX_CONNECTIONS": "7", "CONTACTCENTER_MAX_SESSIONS": 500}) == 247
    assert session_limit({"CONTACTCENTER_MONITOR_MAX_SESSIONS": "5"}) == 410


async def test_grows_beyond_the_warm_size_without_waiting():
    clients = Clients()
    pool = pool_of(clients, size=4, max_size=20, acquire_timeout=0.05)
    assert await pool.warm() == 4
    leased = await asyncio.gather(*(pool.acquire() for _ in range(12)))
    assert sorted(leased) == list(range(1, 13))
    m = pool.metrics()
    assert (m["size"], m["max_size"], m["clients"], m["in_use"], m["peak_in_use"]) == (4, 20, 12, 12, 12)
    assert (m["refused_total"], m["waiters"], m["created_total"], m["acquired_total"]) == (0, 0, 12, 12)
    assert m["utilization"] == 0.6 and m["available"] == 8  # in_use / max_size; room left to grow
    for client in leased:
        await pool.release(client)
    await pool.close()
    assert sorted(clients.closed) == list(range(1, 13))


async def test_default_maximum_is_the_session_limit_not_the_warm_size():
    pool = ClientPool("tts", object, size=2, provider="test", acquire_timeout=0.05)
    assert pool.max_size == DEFAULT_MAX_SIZE
    held = [await pool.acquire() for _ in range(5)]
    assert pool.metrics()["refused_total"] == 0
    for client in held:
        await pool.release(client)


async def test_making_a_client_does_not_hold_up_releases_and_idle_leases():
    clients = Clients()
    pool = pool_of(clients, size=1, max_size=3)
    await pool.warm()
    first = await pool.acquire()
    clients.gate = asyncio.Event()
    making = asyncio.create_task(pool.acquire())  # a slow factory (a decoder loading its model)
    await asyncio.sleep(0)
    await pool.release(first)
    async with asyncio.timeout(2):  # hang guard: the old pool made clients under its lock
        assert await pool.acquire() == first
    clients.gate.set()
    assert await making == 2
    assert pool.metrics()["in_use"] == 2


async def test_extra_clients_are_closed_after_idling_and_the_warm_set_stays():
    clients = Clients()
    pool = pool_of(clients, size=2, max_size=10, idle_timeout=0.05)
    await pool.warm()
    leased = [await pool.acquire() for _ in range(5)]
    held = leased.pop()  # a client in use is never trimmed
    for client in leased:
        await pool.release(client)
    await eventually(lambda: len(clients.closed) == 3)  # 5 clients back to 2: the held one + 1 idle
    m = pool.metrics()
    assert (m["clients"], m["in_use"], m["warm"], m["trimmed_total"]) == (2, 1, 1, 3)
    assert held not in clients.closed
    await pool.release(held)
    await asyncio.sleep(0.1)  # longer than idle_timeout: nothing more is trimmed below the warm size
    assert pool.metrics()["clients"] == 2 and len(clients.closed) == 3
    again = [await pool.acquire(), await pool.acquire()]
    assert held in again and pool.metrics()["created_total"] == 5  # the warm set serves, none made
    for client in again:
        await pool.release(client)
    await pool.close()
    assert len(clients.closed) == 5


async def test_at_the_maximum_a_waiter_gets_the_next_client_in_order():
    clients = Clients()
    pool = pool_of(clients, size=1, max_size=2, acquire_timeout=5)
    a, b = await pool.acquire(), await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    second = asyncio.create_task(pool.acquire())
    await eventually(lambda: pool.metrics()["waiters"] == 2)
    assert pool.metrics()["utilization"] == 1.0 and pool.metrics()["available"] == 0
    await pool.release(b)
    await pool.release(a)
    assert (await first, await second) == (b, a)
    assert pool.metrics()["refused_total"] == 0 and pool.metrics()["waiters"] == 0


async def test_refusal_only_at_the_maximum_is_counted_and_says_why():
    clients = Clients()
    pool = pool_of(clients, size=1, max_size=2, acquire_timeout=0.1)
    held = [await pool.acquire(), await pool.acquire()]
    with pytest.raises(PoolTimeout, match=r"all 2 stt clients are in use .* within 0.1 s"):
        await pool.acquire()
    with pytest.raises(PoolTimeout):
        await pool.acquire(timeout=0.01)
    m = pool.metrics()
    assert (m["refused_total"], m["waiters"], m["in_use"], m["acquired_total"]) == (2, 0, 2, 2)
    await pool.release(held[0])
    assert await pool.acquire() == held[0]


async def test_a_broken_client_at_the_maximum_lets_a_waiter_make_a_new_one():
    clients = Clients()
    pool = pool_of(clients, size=1, max_size=1, acquire_timeout=5)
    broken = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await eventually(lambda: pool.metrics()["waiters"] == 1)
    await pool.release(broken, broken=True)
    assert await waiter == 2 and clients.closed == [broken]
    assert pool.metrics()["clients"] == 1


async def test_a_failed_make_gives_its_place_back():
    clients = Clients()
    pool = pool_of(clients, size=0, max_size=1, acquire_timeout=0.1)
    clients.fail_next = 1
    with pytest.raises(ConnectionError):
        await pool.acquire()
    assert pool.metrics()["clients"] == 0
    assert await pool.acquire() == 1  # the place is free again: no refusal
    assert pool.metrics()["refused_total"] == 0


async def test_a_cancelled_waiter_leaks_nothing():
    clients = Clients()
    pool = pool_of(clients, size=1, max_size=1, acquire_timeout=5)
    held = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await eventually(lambda: pool.metrics()["waiters"] == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await pool.release(held)
    assert pool.metrics()["waiters"] == 0 and pool.metrics()["warm"] == 1
    assert pool.metrics()["refused_total"] == 0  # a caller giving up is not a refusal


async def test_close_fails_waiters_and_closes_idle_clients():
    clients = Clients()
    pool = pool_of(clients, size=2, max_size=2, acquire_timeout=5)
    await pool.warm()
    a, b = await pool.acquire(), await pool.acquire()
    await pool.release(a)
    c = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await eventually(lambda: pool.metrics()["waiters"] == 1)
    await pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        await waiter
    await pool.release(b)
    await pool.release(c)
    assert sorted(clients.closed) == [1, 2]
    with pytest.raises(RuntimeError, match="closed"):
        await pool.acquire()
