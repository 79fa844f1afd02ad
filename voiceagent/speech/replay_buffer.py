"""Items produced once by one task and read, as they come, by readers that may join late.

Why: a synthesis shared by several speakers (:mod:`voiceagent.speech.synthesis_cache`) and an
answer begun ahead of the turn (:mod:`voiceagent.conversation.head_start`: the model's chunks and
its first clause's audio) are both made by one producer and replayed from their first item to
readers that start before, during or after the making. Each reader gets every item in order, then
the producer's error if it failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """What one producer made so far (``items``), whether it is done, and its error if it failed."""

    __slots__ = ("_changed", "done", "error", "items")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.done = False
        self.error: BaseException | None = None
        self._changed = asyncio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._wake()

    def close(self, error: BaseException | None = None) -> None:
        """No more items; readers get ``error`` (raised) after the last, or simply stop."""
        self.done, self.error = True, error
        self._wake()

    def _wake(self) -> None:
        # a fresh event each time: readers waiting on the old one wake, later ones wait anew
        self._changed.set()
        self._changed = asyncio.Event()

    async def read(self) -> AsyncIterator[Any]:
        """Every item from the first, waiting for those not made yet; the producer's error last."""
        index = 0
        while True:
            while index < len(self.items):
                index += 1
                yield self.items[index - 1]
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            await self._changed.wait()
