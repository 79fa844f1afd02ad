"""The Redis channel layer, with a receive that always ends when it is cancelled and never loses
another consumer's message.

Channels tears a consumer down by cancelling its pending ``channel_layer.receive`` and awaiting it.
Under channels-redis 4.3 / redis-py 7.1 that cancellation is sometimes lost inside the blocking
``BZPOPMIN`` read (the redis-py family of bugs around cancelled blocking commands, e.g.
redis/redis-py#2028): the task stays "cancelling" and goes on polling Redis every 5 s forever, so
the socket's handler never finishes and uvicorn's shutdown waits on it ("Waiting for background
tasks to complete"). Measured before this layer: 4 of 8 rounds of dashboards relaying across two
uvicorn workers left a worker unable to stop. And a cancelled receive that was the one popping the
process's shared key lost the message Redis had just popped for another consumer.

Here the process's channels are read by one reader task that no consumer cancels
(:class:`RedisChannelLayer`); a consumer's receive waits on its own inbox. Other channels keep the
library's receive in its own task behind a shield; a cancelled caller re-cancels it every
``RECANCEL_EVERY_S`` until it has ended (a lost cancellation is delivered again at its next await),
for at most ``RECANCEL_FOR_S``, then leaves it and logs a warning: the caller always ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels_redis.core import RedisChannelLayer as _LibraryRedisChannelLayer

logger = logging.getLogger("voiceagent.transport.channel_layer")

RECANCEL_EVERY_S = 0.2
RECANCEL_FOR_S = 5.0
READ_TIMEOUT_S = 1  # the reader's BZPOPMIN: how soon it notices that it should end


async def end_cancelled(
    task: asyncio.Task, every_s: float = RECANCEL_EVERY_S, for_s: float = RECANCEL_FOR_S
) -> bool:
    """Cancel ``task`` until it has ended or ``for_s`` has passed; True when it ended.

    Runs while its own caller is being cancelled, so it waits with :func:`asyncio.wait` (which a
    further cancellation of the caller interrupts, as it should)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + for_s
    attempts = 0
    while not task.done() and loop.time() < deadline:
        task.cancel()
        attempts += 1
        await asyncio.wait({task}, timeout=every_s)
    if attempts > 1 and task.done():
        logger.info("channel layer: a cancelled receive ended after %d cancellations", attempts)
    if not task.done():
        logger.warning(
            "channel layer: a cancelled receive did not end within %.1f s; left to Redis' timeout", for_s
        )
        return False
    if not task.cancelled() and task.exception() is not None:
        logger.debug("channel layer: cancelled receive ended with %r", task.exception())
    return True


class RedisChannelLayer(_LibraryRedisChannelLayer):
    """channels-redis' layer whose receive neither hangs when cancelled nor loses messages.

    The process's own channels (``specific.<client>!<id>``: every consumer's) share one Redis key. In
    the library, whichever consumer's ``receive`` got there first pops that key for all of them, so
    a consumer that closes (Channels cancels its receive) while its BZPOPMIN reply is in flight took
    a message meant for another consumer of the process with it: the library moves a popped message
    to its backup queue only after the pop returns. A dashboard missed a relayed event when another
    dashboard on its worker closed (tests: 3 of 20 in a loop). Here one reader task per process pops
    that key and files each message in its channel's inbox; a consumer's receive only waits on its
    inbox, and cancelling that loses nothing.

    An inbox whose consumer has not received for the layer's ``expiry`` is dropped (messages older
    than that expire in Redis too); the reader ends when none is left, and honours a
    cancellation that redis-py lost at its next pop (at most :data:`READ_TIMEOUT_S`). A Redis error
    reaches the consumers waiting at that moment (as the library's receive raised it) and ends the
    reader; the next receive starts another. Other channels use the library's receive behind
    :func:`end_cancelled`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inboxes: dict[str, asyncio.Queue] = {}
        self._idle_since: dict[str, float] = {}  # channel -> when its consumer stopped receiving
        self._waiting: set[str] = set()
        self._readers: dict[str, asyncio.Task] = {}  # process key (``specific.<client>!``) -> reader
        self._swept = 0.0  # when idle inboxes were last looked for (at most once a second)

    async def receive(self, channel: str) -> dict:
        if "!" not in channel:
            return await self._receive_shared(channel)
        self._start_reader(self.non_local_name(channel))
        inbox = self._inboxes.get(channel)
        if inbox is None:
            inbox = self._inboxes[channel] = asyncio.Queue()
        self._idle_since.pop(channel, None)
        self._waiting.add(channel)
        try:
            item = await inbox.get()
        finally:  # until its consumer receives again (a Channels consumer does after each message)
            self._waiting.discard(channel)
            self._idle_since[channel] = time.monotonic()
        if isinstance(item, Exception):
            raise item
        return item

    def _start_reader(self, process_channel: str) -> None:
        loop = asyncio.get_running_loop()
        if any(r.get_loop() is not loop for r in self._readers.values()):  # a new event loop (tests)
            self._readers.clear()
            self._inboxes.clear()
            self._idle_since.clear()
            self._waiting.clear()
        reader = self._readers.get(process_channel)
        if reader is None or reader.done():
            self._readers[process_channel] = loop.create_task(
                self._read(process_channel), name="channel-layer-reader"
            )

    async def _read(self, process_channel: str) -> None:
        index = self.consistent_hash(process_channel)
        key = self.prefix + process_channel
        task = asyncio.current_task()
        while self._inboxes:
            try:
                raw = await self._brpop_with_clean(index, key, timeout=READ_TIMEOUT_S)
            except Exception as exc:  # Redis down: those waiting hear of it, as from the library
                for channel in self._waiting:
                    if self.non_local_name(channel) == process_channel:
                        self._inboxes[channel].put_nowait(exc)
                return
            if raw is not None:
                self._file(raw)
            if task is not None and task.cancelling():  # a cancellation redis-py swallowed
                raise asyncio.CancelledError
            if raw is not None:
                with contextlib.suppress(Exception):  # not lost: delivered again at worst
                    await self._clean_receive_backup(index, key)
            self._drop_idle()

    def _file(self, raw: bytes) -> None:
        message = self.deserialize(raw)
        targets = message.pop("__asgi_channel__", None)
        for channel in targets if isinstance(targets, list) else [targets]:
            if not isinstance(channel, str):
                continue
            inbox = self._inboxes.get(channel)
            if inbox is None:  # not received on yet: kept for ``expiry``, as Redis would keep it
                inbox = self._inboxes[channel] = asyncio.Queue()
                self._idle_since[channel] = time.monotonic()
            inbox.put_nowait(message)

    def _drop_idle(self) -> None:
        now = time.monotonic()
        if now - self._swept < 1.0:  # not a scan of every inbox per relayed message
            return
        self._swept = now
        cutoff = now - self.expiry
        for channel in [c for c, since in self._idle_since.items() if since < cutoff]:
            del self._idle_since[channel]
            self._inboxes.pop(channel, None)

    async def _receive_shared(self, channel: str) -> dict:
        inner = asyncio.ensure_future(super().receive(channel))
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            if not inner.done():
                await end_cancelled(inner)
            elif not inner.cancelled():
                inner.exception()  # retrieved: a message that raced the cancellation is dropped
            raise
