"""The history writer gathers rows under load into one transaction per interval, and still writes a
lone row at once and flushes everything."""

from __future__ import annotations

import asyncio

from agents_app.history_writer import HistoryWriter
from voiceagent.conversation.session import Turn


def row(n: int) -> tuple:
    return ("turn", "s1", Turn(role="user", content=f"row {n}", agent="a"), "banking", None)


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.written = asyncio.Event()

    async def __call__(self, batch: list[tuple]) -> None:
        self.batches.append([item[2].content for item in batch])
        self.written.set()


async def test_a_lone_row_is_written_at_once_and_rows_under_load_share_a_batch():
    write = Recorder()
    writer = HistoryWriter(write, min_interval_s=0.5)
    await writer.put(row(0))
    await asyncio.wait_for(write.written.wait(), 0.4)  # not held back by the interval
    for n in range(1, 6):  # a row every 20 ms: all within the writer's rest
        await writer.put(row(n))
        await asyncio.sleep(0.02)
    assert await writer.flush(timeout=5)
    assert write.batches == [["row 0"], ["row 1", "row 2", "row 3", "row 4", "row 5"]]
    writer.task.cancel()


async def test_without_an_interval_each_row_goes_alone():
    write = Recorder()
    writer = HistoryWriter(write, min_interval_s=0)
    for n in range(3):
        await writer.put(row(n))
        await asyncio.sleep(0.02)
    assert await writer.flush(timeout=5)
    assert write.batches == [["row 0"], ["row 1"], ["row 2"]]
    writer.task.cancel()
