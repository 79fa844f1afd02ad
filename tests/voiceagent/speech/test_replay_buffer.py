"""The buffer a synthesis line and a head start share: every reader gets every item, in order."""

from __future__ import annotations

import asyncio

import pytest

from voiceagent.speech.replay_buffer import ReplayBuffer


async def _collect(buffer: ReplayBuffer) -> list[object]:
    return [item async for item in buffer.read()]


async def test_readers_joining_before_during_and_after_get_every_item_in_order():
    buffer = ReplayBuffer()
    early = asyncio.create_task(_collect(buffer))
    await asyncio.sleep(0)
    buffer.add(1)
    during = asyncio.create_task(_collect(buffer))
    await asyncio.sleep(0)
    buffer.add(2)
    buffer.close()
    assert await early == [1, 2]
    assert await during == [1, 2]
    assert await _collect(buffer) == [1, 2]  # after the end: a replay


async def test_a_failed_producer_s_error_reaches_each_reader_after_what_it_made():
    buffer = ReplayBuffer()
    got: list[object] = []

    async def read() -> None:
        async for item in buffer.read():
            got.append(item)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    buffer.add("a")
    buffer.close(RuntimeError("voice died"))
    with pytest.raises(RuntimeError, match="voice died"):
        await reader
    assert got == ["a"]
    with pytest.raises(RuntimeError):
        await _collect(buffer)


async def test_a_reader_waits_for_items_not_made_yet():
    buffer = ReplayBuffer()
    reader = asyncio.create_task(_collect(buffer))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not reader.done()
    buffer.close()
    assert await reader == []
