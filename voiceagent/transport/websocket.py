"""A minimal ASGI WebSocket endpoint for high-rate audio sockets.

Channels' ``AsyncWebsocketConsumer`` creates a task and runs ``asyncio.wait`` for every inbound
message (``await_many_dispatch``) and closes old DB connections in a thread per message; at 50
audio frames a second per caller that was most of the server's per-frame cost. An audio socket
receives only from its client (it publishes to channel-layer groups but never consumes from
one), so it needs none of that: this class reads the ASGI events directly and offers the same
small surface (``connect``/``receive``/``disconnect`` hooks, ``accept``, ``send``, ``close``).

``disconnect`` runs once, when the client goes and also when a hook raises: the exception (a
bug, a store that is down) is logged once and closes the socket with 1011, and the endpoint that
counted the connection open and started its conversation still counts it closed and ends it.
Before, the exception ended the ASGI task without ``disconnect`` (uvicorn swallows a
``ClientDisconnected`` without a word): the process kept the connection counted and its
conversation running.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from channels.layers import get_channel_layer

from voiceagent.servers_compat import fit_close_reason

logger = logging.getLogger(__name__)


class LeanWebSocket:
    def __init__(self, scope: dict, receive, send):
        self.scope = scope
        self._receive = receive
        self._send = send
        self.channel_layer = get_channel_layer()
        self._closed = False

    @classmethod
    def as_asgi(cls):
        async def app(scope, receive, send) -> None:
            await cls(scope, receive, send).run()

        app.consumer_class = cls  # type: ignore[attr-defined]
        return app

    async def run(self) -> None:
        """Feed the server's events to the hooks until the socket is gone; then ``disconnect``."""
        try:
            while True:
                message: dict[str, Any] = await self._receive()
                kind = message["type"]
                if kind == "websocket.receive":
                    await self.receive(text_data=message.get("text"), bytes_data=message.get("bytes"))
                elif kind == "websocket.connect":
                    await self.connect()
                elif kind == "websocket.disconnect":
                    code = message.get("code", 1000)
                    break
        except Exception:  # not CancelledError: a cancelled socket was never told disconnect either
            logger.exception("%s failed; the socket closes with 1011", type(self).__name__)
            code = 1011
            with contextlib.suppress(Exception):
                await self.close(1011, "internal error")
        await self.disconnect(code)

    # --- hooks ---------------------------------------------------------------------------------------
    async def connect(self) -> None:
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        return None

    async def disconnect(self, code: int) -> None:
        return None

    # --- actions -------------------------------------------------------------------------------------
    async def accept(self, subprotocol: str | None = None) -> None:
        try:
            await self._send({"type": "websocket.accept", "subprotocol": subprotocol})
        except OSError:  # the client left before it was accepted (uvicorn's ClientDisconnected):
            # nothing is sent to it any more; its disconnect event ends the socket as usual
            self._closed = True
            logger.info("%s: the client left before the socket was accepted", type(self).__name__)

    async def send(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self._closed:
            return
        message = (
            {"type": "websocket.send", "text": text_data}
            if text_data is not None
            else {"type": "websocket.send", "bytes": bytes_data}
        )
        try:
            await self._send(message)
        except OSError:  # the client went away mid-send (uvicorn's ClientDisconnected): stop sending
            self._closed = True

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        # a reason over 123 bytes is an error under uvicorn (websockets): cut it
        with contextlib.suppress(OSError):  # the client is already gone: nothing to close
            await self._send(
                {"type": "websocket.close", "code": code or 1000, "reason": fit_close_reason(reason)}
            )
