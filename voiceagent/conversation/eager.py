"""Run a coroutine now, in the caller's stack, and hand it to a task only if it has to wait.

Why: a socket send (``websockets``' ``send``, aiohttp's ``send_str``) is a coroutine that, unless
the socket applies back-pressure, finishes without ever suspending: the frame is built and handed
to the transport synchronously. Scheduling it on a task instead costs a wake-up and a loop
iteration per 20 ms frame, and under load the frame then waits behind every other ready callback
(hundreds of conversations' worth). Driving the coroutine's first step directly puts the frame on
the socket before ``push_audio`` returns; the rare send that must wait continues on a task, exactly
as Python 3.12's eager tasks do (this service runs on 3.11, where ``eager_start`` does not exist).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["start_eagerly"]


def start_eagerly(coro: Coroutine[Any, Any, Any]) -> asyncio.Future | None:
    """Step ``coro`` until it finishes or first suspends.

    Returns None when it finished (its result is discarded); otherwise a future for the rest:
    a task that drives it to the end, or an already-failed future when it raised on the first step.
    Must be called from inside the running loop.
    """
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    except BaseException as exc:  # handed to whoever awaits the future
        failed = asyncio.get_running_loop().create_future()
        failed.set_exception(exc)
        return failed
    return asyncio.ensure_future(_finish(coro, _received(yielded)))


def _received(yielded: Any) -> Any:
    """What a task does with a future its coroutine yields: take over the wait (``await`` on a future
    still flagged as blocking is refused by asyncio's C futures)."""
    if yielded is not None:
        yielded._asyncio_future_blocking = False
    return yielded


async def _finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive a coroutine that suspended on ``yielded`` (an asyncio future, or None for a bare yield)."""
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                await yielded
        except BaseException as exc:
            if yielded is not None and yielded.done():
                pass  # the coroutine reads the future's outcome (or its cancellation) itself
            else:  # this task was cancelled while the coroutine's future is still pending
                if yielded is not None:
                    yielded.cancel()
                try:
                    yielded = _received(coro.throw(exc))
                except StopIteration as stop:
                    return stop.value
                continue
        try:
            yielded = _received(coro.send(None))
        except StopIteration as stop:
            return stop.value
