"""``/api/v1/browser/dashboard/relay[?session_id=&audio=1]``: live server messages of one session
or of all sessions, from any worker process (channel-layer groups, see :mod:`calls.relay`).

On connect, after ``relay_connected`` (whose ``live_sessions`` says how many follow), a dashboard is
sent one ``session_started`` event marked ``snapshot: true`` per conversation already live on any
worker (:mod:`calls.live`), so it can list conversations that began before it opened."""

from __future__ import annotations

import asyncio
import json
import time

from channels.generic.websocket import AsyncWebsocketConsumer

from calls.browser import LeanDispatchMixin
from calls.live import live_sessions, snapshot_message
from calls.relay import ALL_GROUP, AUDIO_FLAG_TTL, mark_audio_wanted, session_group
from calls.wsauth import authorized, query
from voiceagent.connections import tracker
from voiceagent.conversation.session import valid_session_id


class DashboardRelayConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.group: str | None = None
        self.refresher: asyncio.Task | None = None
        await self.accept()
        if not await authorized(self.scope):
            await self.close(code=1008, reason="unauthorized: send an API key (?api_key=) or log in")
            return
        params = query(self.scope)
        session_id = params.get("session_id") or None
        if session_id is not None and not valid_session_id(session_id):
            await self.close(code=1008, reason="invalid session_id")
            return
        if self.channel_layer is None:
            await self.close(code=1011, reason="no channel layer configured")
            return
        self.group = session_group(session_id) if session_id else ALL_GROUP
        await self.channel_layer.group_add(self.group, self.channel_name)
        tracker.opened("dashboard")
        if session_id and params.get("audio") == "1":
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

    async def disconnect(self, code: int) -> None:
        if self.refresher is not None:
            self.refresher.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            tracker.closed("dashboard")
            self.group = None

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The relay is one-way; anything a client sends is answered with an error and ignored."""
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
