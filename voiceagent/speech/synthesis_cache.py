"""Recently synthesised lines, replayed instead of synthesised again.

Why: every call to an agent starts with the same greeting. When 200 phone calls arrive at once,
synthesising it 200 times (200 espeak-ng processes forked from the event loop, 200 streams of
audio resampled on it) stalled every other conversation of the process for seconds. Here:

* concurrent requests for the same line share ONE synthesis (each reader streams its chunks as
  they are produced, so the first chunk is not delayed);
* a completed line is kept (least recently used first out, at most ``max_bytes`` of audio) and
  replayed, yielding to the event loop between chunks, so that many replays at once do not run
  in one loop step either;
* a line is keyed by everything that shapes its audio (the caller gives the key: the provider's
  resolved voice, rate and text), and only lines up to ``max_chars`` are cached: greetings,
  fixed lines and clauses, not monologues;
* a failed synthesis is never kept: its readers get its error, the next request tries again;
  when the last reader stops early (barge-in), the shared synthesis is cancelled and awaited,
  so the provider's process and pool slot are released as if it had not been shared.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable

from voiceagent.speech.replay_buffer import ReplayBuffer

__all__ = ["SynthesisCache"]

Produce = Callable[[], AsyncIterator[bytes]]


class _Line(ReplayBuffer):
    """One synthesis in progress, shared by its readers."""

    __slots__ = ("loop", "readers", "size", "stopped", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.size = 0
        self.task: asyncio.Task | None = None
        self.readers = 0
        self.stopped = False  # its last reader left: whatever it produced is not the whole line
        self.loop = loop


class SynthesisCache:
    """Shares and keeps synthesised lines (see the module docstring)."""

    def __init__(self, max_bytes: int = 8 * 1024 * 1024, max_chars: int = 300) -> None:
        self.max_bytes = max_bytes
        self.max_chars = max_chars
        self._kept: OrderedDict[Hashable, tuple[bytes, ...]] = OrderedDict()
        self._kept_bytes = 0
        self._live: dict[Hashable, _Line] = {}
        self.hits = 0  # replays of a kept line
        self.shared = 0  # requests that joined a synthesis already running
        self.misses = 0  # syntheses started

    def metrics(self) -> dict[str, int]:
        """Figures for ``/pools``-style reporting and tests."""
        return {
            "lines": len(self._kept),
            "bytes": self._kept_bytes,
            "hits": self.hits,
            "shared": self.shared,
            "misses": self.misses,
        }

    async def stream(self, key: Hashable, text: str, produce: Produce) -> AsyncIterator[bytes]:
        """The audio of ``text`` (identified by ``key``): replayed, shared or produced by ``produce()``."""
        if len(text) > self.max_chars or self.max_bytes <= 0:
            async with contextlib.aclosing(produce()) as chunks:  # an early stop ends it at once
                async for chunk in chunks:
                    yield chunk
            return
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            self.hits += 1
            for index, chunk in enumerate(kept):
                if index:
                    await asyncio.sleep(0)  # many replays at once: one chunk each per loop step
                yield chunk
            return
        loop = asyncio.get_running_loop()
        line = self._live.get(key)
        if line is None or line.loop is not loop or line.done:
            line = self._live[key] = _Line(loop)
            line.task = loop.create_task(self._produce(key, line, produce), name="tts-shared-line")
            self.misses += 1
        else:
            self.shared += 1
        line.readers += 1
        try:
            async for chunk in line.read():
                yield chunk
        finally:
            line.readers -= 1
            if line.readers == 0 and not line.done and line.task is not None:
                # a request arriving while it winds down starts afresh: joining, it got the
                # cancellation (its caller heard the answer's words and no audio)
                if self._live.get(key) is line:
                    del self._live[key]
                line.stopped = True
                line.task.cancel()  # nobody listens any more: stop the synthesis, free its slot
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await line.task

    async def _produce(self, key: Hashable, line: _Line, produce: Produce) -> None:
        try:
            async with contextlib.aclosing(produce()) as chunks:
                async for chunk in chunks:
                    line.size += len(chunk)
                    line.add(chunk)
        except asyncio.CancelledError:
            line.close(RuntimeError("speech synthesis cancelled"))
            raise
        except Exception as exc:  # the readers get it; nothing is kept
            line.close(exc)
        else:
            line.close()
        finally:
            if self._live.get(key) is line:
                del self._live[key]
        # a producer may end quietly when cancelled (a synthesis thread stopped between sentences):
        # what it made then is a cut line, and kept it would be replayed as the whole answer
        if line.error is None and not line.stopped and line.items:
            self._keep(key, tuple(line.items), line.size)

    def _keep(self, key: Hashable, chunks: tuple[bytes, ...], size: int) -> None:
        if size > self.max_bytes:
            return
        old = self._kept.pop(key, None)
        if old is not None:
            self._kept_bytes -= sum(map(len, old))
        self._kept[key] = chunks
        self._kept_bytes += size
        while self._kept_bytes > self.max_bytes:
            _, dropped = self._kept.popitem(last=False)
            self._kept_bytes -= sum(map(len, dropped))
