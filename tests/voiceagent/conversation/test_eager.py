"""start_eagerly: a coroutine's first step runs in the caller's stack; only a suspension makes a task."""

from __future__ import annotations

import asyncio

import pytest

from voiceagent.conversation.eager import start_eagerly


async def test_a_coroutine_that_never_waits_finishes_before_the_call_returns():
    done: list[str] = []

    async def send() -> str:
        done.append("sent")
        return "result"

    assert start_eagerly(send()) is None
    assert done == ["sent"]


async def test_a_suspended_coroutine_continues_on_a_task_with_its_result():
    gate = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def send() -> str:
        steps.append("before")
        value = await gate
        steps.append(f"after {value}")
        return "finished"

    pending = start_eagerly(send())
    assert steps == ["before"] and pending is not None and not pending.done()
    gate.set_result("go")
    assert await pending == "finished"
    assert steps == ["before", "after go"]


async def test_an_exception_on_the_first_step_is_handed_to_the_awaiter():
    async def send() -> None:
        raise ConnectionError("socket gone")

    pending = start_eagerly(send())
    assert pending is not None and pending.done()
    with pytest.raises(ConnectionError, match="socket gone"):
        await pending


async def test_a_failed_wait_is_raised_inside_the_coroutine():
    gate = asyncio.get_running_loop().create_future()

    async def send() -> str:
        try:
            await gate
        except OSError as exc:
            return f"handled {exc}"
        return "not reached"

    pending = start_eagerly(send())
    gate.set_exception(OSError("reset"))
    assert await pending == "handled reset"


async def test_bare_yields_and_several_waits_are_driven_to_the_end():
    loop = asyncio.get_running_loop()
    gates = [loop.create_future() for _ in range(3)]

    async def send() -> int:
        total = 0
        for gate in gates:
            await asyncio.sleep(0)
            total += await gate
        return total

    pending = start_eagerly(send())
    for i, gate in enumerate(gates):
        await asyncio.sleep(0)
        gate.set_result(i + 1)
    assert await pending == 6


async def test_cancelling_the_continuation_cancels_the_coroutine_and_its_wait():
    gate = asyncio.get_running_loop().create_future()
    cleanup: list[str] = []

    async def send() -> None:
        try:
            await gate
        finally:
            cleanup.append("closed")

    pending = start_eagerly(send())
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert cleanup == ["closed"] and gate.cancelled()


async def test_cancelling_during_a_bare_yield_reaches_the_coroutine():
    cleanup: list[str] = []

    async def send() -> None:
        try:
            while True:
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            cleanup.append("cancelled")
            raise

    pending = start_eagerly(send())
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert cleanup == ["cancelled"]
