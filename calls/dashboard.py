"""``/api/v1/browser/dashboard/relay[?session_id=&audio=1]``: live server messages of one session
or of all sessions, from any worker process (channel-layer groups, see
:mod:`voiceagent.transport.relay`).

On connect, after ``relay_connected`` (whose ``live_sessions`` says how many follow), a dashboard is
sent one ``session_started`` event marked ``snapshot: true`` per conversation already live on any
worker (:mod:`voiceagent.transport.live`), so it can list conversations that began before it opened.

The relay only sends; what a client sends is answered with an ``error``. Limits: more than
``DASHBOARD_MAX_CONNECTIONS`` dashboards in this process are refused with 1013, a message over
``DASHBOARD_MAX_MESSAGE_BYTES`` closes with 1009, more than ``DASHBOARD_MAX_MESSAGES_PER_SECOND``
(a token bucket, :mod:`voiceagent.transport.ratelimit`) with 1008. A dashboard counted as open is
always counted closed: a client gone mid-handshake or a failure while it is being set up ends in
:meth:`disconnect` like any other close."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from calls.wsauth import query, refused
from voiceagent.connections import tracker
from voiceagent.conversation.session import valid_session_id
from voiceagent.transport.live import live_sessions, snapshot_message
from voiceagent.transport.ratelimit import MessageRateLimiter
from voiceagent.transport.relay import (
    ALL_GROUP,
    AUDIO_FLAG_TTL,
    PRESENCE_TTL,
    mark_audio_wanted,
    mark_dashboards_present,
    presence,
    session_group,
)

logger = logging.getLogger("calls.dashboard")


class LeanDispatchMixin:
    """Skip Channels' per-message ``aclose_old_connections`` (a thread hop for every message).

    Our consumers never touch the ORM on the event loop: database work goes through
    :func:`agents_app.sessions.db_call`, which manages its own connections.
    """

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class DashboardRelayConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    async def connect(self) -> None:
        config = settings.CONFIG
        self.group: str | None = None
        self.refresher: asyncio.Task | None = None
        self.present: asyncio.Task | None = None
        self.counted = False
        self.closing = False
        self.limiter = MessageRateLimiter(
            config.DASHBOARD_MAX_MESSAGES_PER_SECOND, config.WEBSOCKET_RATE_BURST_S
        )
        await self.accept()
        if reason := await refused(self.scope):
            await self.close(code=1008, reason=reason)
            return
        params = query(self.scope)
        session_id = params.get("session_id") or None
        if session_id is not None and not valid_session_id(session_id):
            await self.close(code=1008, reason="invalid session_id")
            return
        if self.channel_layer is None:
            await self.close(code=1011, reason="no channel layer configured")
            return
        if tracker.active_count("dashboard") >= config.DASHBOARD_MAX_CONNECTIONS:
            await self.close(code=1013, reason="server busy: too many dashboards, try again later")
            return
        tracker.opened("dashboard")
        self.counted = True
        try:
            await self._join(session_id, params.get("audio") == "1")
        except Exception as exc:  # e.g. the cache or the channel layer unreachable
            logger.warning("dashboard relay could not start: %s: %s", type(exc).__name__, exc)
            await self._close(1011, "internal error: the relay could not start, try again later")

    async def _join(self, session_id: str | None, audio: bool) -> None:
        self.group = session_group(session_id) if session_id else ALL_GROUP
        await self.channel_layer.group_add(self.group, self.channel_name)
        presence.local += 1  # the sockets of every worker relay to dashboards while one is here
        self.present = asyncio.get_running_loop().create_task(self._mark_present())
        if session_id and audio:
            self.refresher = asyncio.get_running_loop().create_task(self._want_audio(session_id))
        # joined the group first: a session starting meanwhile is in the snapshot or relayed after it
        live = await live_sessions.live(session_id)
        await self.send(
            text_data=json.dumps(
                {
                    "type": "event",
                    "payload": {
                        "name": "relay_connected",
                        "session_id": session_id,
                        "live_sessions": len(live),
                    },
                    "session_id": session_id,
                    "ts": round(time.time(), 3),
                }
            )
        )
        for entry in live:
            await self.send(text_data=json.dumps(snapshot_message(entry), default=str))

    async def _want_audio(self, session_id: str) -> None:
        while True:
            await mark_audio_wanted(session_id)
            await asyncio.sleep(AUDIO_FLAG_TTL / 2)

    async def _mark_present(self) -> None:
        while True:
            await mark_dashboards_present()
            await asyncio.sleep(PRESENCE_TTL / 3)

    async def disconnect(self, code: int) -> None:
        if self.refresher is not None:
            self.refresher.cancel()
        if self.present is not None:
            self.present.cancel()
            self.present = None
            presence.local -= 1
        if self.counted:
            self.counted = False
            tracker.closed("dashboard")
        if self.group is not None:
            group, self.group = self.group, None
            await self.channel_layer.group_discard(group, self.channel_name)

    async def send(self, text_data=None, bytes_data=None, close=False) -> None:
        """As Channels' send, but a client already gone is not an error: its disconnect follows
        (uvicorn raises ``ClientDisconnected`` here, and a consumer that raised it was never told
        ``disconnect``: the dashboard stayed counted and in its group)."""
        with contextlib.suppress(OSError):
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def close(self, code=None, reason=None) -> None:
        """As Channels' close; a client already gone is not an error (see :meth:`send`)."""
        with contextlib.suppress(OSError):
            await super().close(code=code, reason=reason)

    async def _close(self, code: int, reason: str) -> None:
        if not self.closing:
            self.closing = True
            await self.close(code=code, reason=reason)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The relay is one-way; anything a client sends is answered with an error and ignored,
        within the size and rate limits."""
        if self.closing:
            return
        size = len(bytes_data) if bytes_data is not None else len((text_data or "").encode())
        limit = settings.CONFIG.DASHBOARD_MAX_MESSAGE_BYTES
        if size > limit:
            await self._close(1009, f"message too big: {size} bytes, the limit is {limit}")
            return
        if not self.limiter.allow():
            await self._close(1008, f"too many messages: the limit is {self.limiter.rate:g} per second")
            return
        await self.send(
            text_data=json.dumps(
                {
                    "type": "error",
                    "payload": {"code": "read_only", "message": "the dashboard relay only sends"},
                    "ts": round(time.time(), 3),
                }
            )
        )

    async def relay_message(self, event: dict) -> None:
        await self.send(text_data=json.dumps(event["message"], default=str))
