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


async def test_a_sessions_flush_waits_for_its_own_rows_not_for_another_sessions():
    """A conversation that starts (reading its history) or ends waits for its own rows only: under
    load the queue as a whole is never empty, and 200 callers starting at once waited seconds for
    their greetings behind everyone else's rows."""
    gate, batches = asyncio.Event(), []

    async def write(batch: list[tuple]) -> None:
        batches.append([item[1] for item in batch])
        if any(item[1] == "busy" for item in batch):
            await gate.wait()  # another conversation's rows: the database is slow for them

    def turn(session: str) -> tuple:
        return ("turn", session, Turn(role="user", content="hi", agent="a"), "banking", None)

    writer = HistoryWriter(write, min_interval_s=0)
    await writer.put(turn("mine"))
    assert await writer.flush(timeout=5, session_id="mine")
    await writer.put(turn("busy"))
    while not batches[1:]:
        await asyncio.sleep(0)  # the writer holds the busy session's batch
    assert await writer.flush(timeout=5, session_id="mine")  # nothing of mine is queued
    assert await writer.flush(timeout=5, session_id="new")  # a session with no rows at all
    assert not await writer.flush(timeout=0.05)  # everything: held by the busy batch
    await writer.put(turn("mine"))  # queued behind the busy batch: its flush waits for it
    mine = asyncio.ensure_future(writer.flush(timeout=5, session_id="mine"))
    await asyncio.sleep(0.05)
    assert not mine.done()
    gate.set()
    assert await mine
    assert batches == [["mine"], ["busy"], ["mine"]]
    assert not writer.pending
    writer.task.cancel()
