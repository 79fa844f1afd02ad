"""The Redis channel layer, with a receive that always ends when it is cancelled.

Channels tears a consumer down by cancelling its pending ``channel_layer.receive`` and awaiting it.
Under channels-redis 4.3 / redis-py 7.1 that cancellation is sometimes lost inside the blocking
``BZPOPMIN`` read (the redis-py family of bugs around cancelled blocking commands, e.g.
redis/redis-py#2028): the task stays "cancelling" and goes on polling Redis every 5 s forever, so
the socket's handler never finishes and uvicorn's shutdown waits on it ("Waiting for background
tasks to complete"). Measured before this layer: 4 of 8 rounds of dashboards relaying across two
uvicorn workers left a worker unable to stop.

Here the library's receive runs in its own task behind a shield; a cancelled caller re-cancels it
every ``RECANCEL_EVERY_S`` until it has ended (a lost cancellation is delivered again at its next
await), for at most ``RECANCEL_FOR_S``, then leaves it and logs a warning: the caller always ends.
"""

from __future__ import annotations

import asyncio
import logging

from channels_redis.core import RedisChannelLayer as _LibraryRedisChannelLayer

logger = logging.getLogger("voiceagent.transport.channel_layer")

RECANCEL_EVERY_S = 0.2
RECANCEL_FOR_S = 5.0


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
    """channels-redis' layer whose :meth:`receive` ends when cancelled (see the module docstring)."""

    async def receive(self, channel: str) -> dict:
        inner = asyncio.ensure_future(super().receive(channel))
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            if not inner.done():
                await end_cancelled(inner)
            elif not inner.cancelled():
                inner.exception()  # retrieved: a message that raced the cancellation is dropped
            raise
