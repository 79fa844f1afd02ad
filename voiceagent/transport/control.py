"""A person's requests to a live conversation (take over, say, hand back), whichever worker holds it.

The REST API answers on whichever worker the load balancer picked; the conversation runs on the
worker its socket reached. :func:`request` applies a request here when this process holds the
conversation (:data:`~voiceagent.transport.session_memory.live`), else sends it to every worker
through the channel layer (the session-memory group: each worker's
:class:`~voiceagent.transport.session_memory.MemoryFeed` hands it to the conversation it holds and
answers on the request's private reply channel) and waits :data:`REPLY_TIMEOUT_S` for the answer.

An unknown session answers 404 at once: the live registry (:data:`~voiceagent.transport.live.
live_sessions`) is read before anything is sent, so a guessed id costs a cache read, not a wait.
A registry entry of a worker that died answers 404 after the wait ("not live on any worker").
With the in-memory channel layer (one process) only this process's conversations are reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from voiceagent.conversation.takeover import ControlResult
from voiceagent.transport import session_memory
from voiceagent.transport.live import live_sessions

__all__ = ["ACTIONS", "REPLY_TIMEOUT_S", "request"]

logger = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 2.0
NOT_LIVE = "no live conversation has this session id"
# what a request may ask, and the conversation's method that does it (voiceagent.conversation.takeover)
ACTIONS = {
    "takeover": "take_over",
    "say": "say",
    "handback": "hand_back",
    "transfer_done": "transfer_done",  # the provider's word on a transfer (calls/callbacks.py)
    "transfer_failed": "transfer_failed",
}


async def request(session_id: str, action: str, args: dict[str, Any]) -> ControlResult:
    """Apply ``action`` with ``args`` to the live conversation of ``session_id``, here or on the
    worker that holds it; 404 when none does."""
    if action not in ACTIONS:
        raise ValueError(f"unknown control action {action!r}")
    here = await session_memory.live.control(session_id, ACTIONS[action], args)
    if here is not None:
        return here
    if session_memory.cross_process_layer() is None or not await live_sessions.live(session_id):
        return ControlResult(404, NOT_LIVE)
    return await _ask_other_workers(session_id, action, args)


async def _ask_other_workers(session_id: str, action: str, args: dict[str, Any]) -> ControlResult:
    """One private layer per request (a layer receives on one loop; a person's requests are rare)."""
    from channels.layers import channel_layers

    layer = channel_layers.make_backend("default")
    try:
        reply_to = await layer.new_channel("control")
        message = {
            "type": "session.control",
            "session_id": session_id,
            "method": ACTIONS[action],
            "args": args,
            "origin": session_memory.ORIGIN,
            "reply_to": reply_to,
        }
        await layer.group_send(session_memory.GROUP, message)
        async with asyncio.timeout(REPLY_TIMEOUT_S):
            answer = await layer.receive(reply_to)
    except TimeoutError:
        logger.info("session %s: %s not answered by any worker (a stale live entry)", session_id, action)
        return ControlResult(404, f"{NOT_LIVE} on any worker")
    except Exception as exc:
        logger.warning("session %s: %s not sent to the other workers: %s", session_id, action, exc)
        return ControlResult(503, "the channel layer is unavailable: try again")
    finally:
        with contextlib.suppress(Exception):
            await layer.close_pools()
    body = answer.get("body")
    return ControlResult(int(answer.get("status", 500)), str(answer.get("detail", "")), body or {})
