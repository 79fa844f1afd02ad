"""Session-memory entries for a live conversation, whichever worker process holds it.

A live conversation keeps its session state in memory and saves it after each turn, so a write to
the session cache from outside (``POST /api/v1/profiles/generate`` with a ``session_id``) was
overwritten at its next save and never seen by the conversation. Such a write now also goes to the
conversation (:meth:`ConversationCore.remember`, seen from its next turn):

- in this process, through :data:`live`, the conversations the transport driver started here;
- in the others, through the channel layer (architecture rule 5): :func:`deliver` sends
  ``{"type": "session.memory", "session_id", "memory", "origin"}`` to the group :data:`GROUP`, and
  each worker's :class:`MemoryFeed` (a startup component: one listener task with its own layer, as
  :mod:`mcp_app.change_feed`) hands it to the conversation it holds, if any. With the in-memory
  channel layer (one process) there is nobody else to tell and no listener runs.

A message lost while the layer is down is a profile the conversation misses until it restarts
(it loads the state the cache holds); that is logged, never raised to the caller of :func:`deliver`.

The same feed carries a person's requests to a live conversation (``session.control``: take over,
say, hand back; sent by :mod:`voiceagent.transport.control`): the worker that holds the
conversation applies it and answers on the request's ``reply_to`` channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from voiceagent.conversation.takeover import ControlResult

logger = logging.getLogger(__name__)

GROUP = "session-memory"
# voiceagent.conversation.takeover's methods another worker may ask for
CONTROL_METHODS = frozenset({"take_over", "say", "hand_back", "transfer_done", "transfer_failed"})
GROUP_RENEW_S = 3600.0
STOP_WAIT_S = 3.0
ORIGIN = uuid.uuid4().hex  # this process


class LiveConversations:
    """The conversations running in this process, by session id (a set: two sockets may share one)."""

    def __init__(self) -> None:
        self._by_session: dict[str, set[Any]] = {}

    def add(self, session_id: str, conversation: Any) -> None:
        """Follow ``conversation`` of ``session_id`` until it closes."""
        self._by_session.setdefault(session_id, set()).add(conversation)
        conversation.close_hooks.append(lambda closed: self.discard(session_id, closed))

    def discard(self, session_id: str, conversation: Any) -> None:
        held = self._by_session.get(session_id)
        if held is not None:
            held.discard(conversation)
            if not held:
                del self._by_session[session_id]

    async def control(self, session_id: str, method: str, args: dict[str, Any]) -> Any:
        """A person's request (``method`` of :class:`~voiceagent.conversation.takeover.
        PersonControl`) applied to this process's conversation of ``session_id``, on its loop; its
        ``ControlResult``, or None when no conversation of it runs here."""
        held = [c for c in self._by_session.get(session_id, ()) if not c.closed]
        if not held:
            return None
        conversation = held[0]
        action = getattr(conversation, method, None)
        if action is None:
            return ControlResult(409, "this session is not a voice-agent conversation")
        loop = getattr(conversation, "_loop", None)
        if loop is None or loop is asyncio.get_running_loop():
            return action(**args)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_call(action, args), loop))

    def remember(self, session_id: str, memory: dict[str, Any]) -> int:
        """Give ``memory`` to this process's conversations of ``session_id``; how many took it."""
        held = [c for c in self._by_session.get(session_id, ()) if not c.closed]
        for conversation in held:
            conversation.remember(memory)
        return len(held)


live = LiveConversations()


async def _call(action: Any, args: dict[str, Any]) -> Any:
    return action(**args)


def cross_process_layer() -> Any:
    """The default channel layer when it reaches other processes (Redis), else None."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None or type(layer).__name__ == "InMemoryChannelLayer":
        return None
    return layer


async def deliver(session_id: str, memory: dict[str, Any]) -> None:
    """``memory`` to the live conversation of ``session_id``: here at once, elsewhere through the
    channel layer. Never raises: the session cache already holds the entries."""
    here = live.remember(session_id, memory)
    layer = cross_process_layer()
    if layer is None:
        return
    message = {"type": "session.memory", "session_id": session_id, "memory": memory, "origin": ORIGIN}
    try:
        await layer.group_send(GROUP, message)
    except Exception as exc:
        logger.warning(
            "session %s: memory update not sent to other workers (%s); %s",
            session_id,
            exc,
            "applied here" if here else "a conversation elsewhere sees it when it restarts",
        )


class MemoryFeed:
    """This worker's listener on :data:`GROUP` (a private layer: a layer receives on one loop)."""

    def __init__(self) -> None:
        self._layer: Any = None
        self._task: asyncio.Task | None = None

    async def start(self) -> str:
        from channels.layers import channel_layers

        if cross_process_layer() is None:
            return "in-memory channel layer: one process, no listener"
        self._layer = channel_layers.make_backend("default")
        self._task = asyncio.get_running_loop().create_task(self._listen(), name="session-memory-feed")
        return f"listening on channel-layer group {GROUP!r}"

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=STOP_WAIT_S)  # a shutdown never waits on Redis for long
        if self._layer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(STOP_WAIT_S):
                    await self._layer.close_pools()
            self._layer = None

    async def _listen(self) -> None:
        layer, delay = self._layer, 1.0
        while True:
            renew: asyncio.Task | None = None
            try:
                channel = await layer.new_channel("memory")
                await layer.group_add(GROUP, channel)
                renew = asyncio.get_running_loop().create_task(self._renew(channel))
                delay = 1.0
                while True:
                    await self._handle(await layer.receive(channel))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("session memory listener: %s; retrying in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            finally:
                if renew is not None:
                    renew.cancel()

    async def _renew(self, channel: str) -> None:
        while True:
            await asyncio.sleep(GROUP_RENEW_S)
            with contextlib.suppress(Exception):
                await self._layer.group_add(GROUP, channel)

    async def _handle(self, message: dict[str, Any]) -> None:
        if message.get("type") == "session.control":
            await self._control(message)
        else:
            self._apply(message)

    async def _control(self, message: dict[str, Any]) -> None:
        """A person's request from another worker: applied when the conversation runs here, and
        answered on its reply channel (a worker that does not hold it stays silent)."""
        session_id, method, args = message.get("session_id"), message.get("method"), message.get("args")
        reply_to = message.get("reply_to")
        if message.get("origin") == ORIGIN or not isinstance(session_id, str) or not isinstance(args, dict):
            return
        if method not in CONTROL_METHODS:
            return
        try:
            result = await live.control(session_id, method, args)
        except Exception:
            logger.exception("session %s: %s from another worker failed", session_id, method)
            return
        if result is None or not isinstance(reply_to, str):
            return
        answer = {"type": "session.control.reply", "status": result.status, "detail": result.detail}
        with contextlib.suppress(Exception):
            await self._layer.send(reply_to, {**answer, "body": result.body})

    @staticmethod
    def _apply(message: dict[str, Any]) -> None:
        session_id, memory = message.get("session_id"), message.get("memory")
        if message.get("origin") == ORIGIN or not isinstance(session_id, str) or not isinstance(memory, dict):
            return
        if live.remember(session_id, memory):
            logger.info("session %s: memory update from another worker applied", session_id)


feed = MemoryFeed()
