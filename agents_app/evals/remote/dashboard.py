"""The dashboard relay (``/api/v1/browser/dashboard/relay``) as a feed of one session's messages for
a remote target: what a wire does not carry itself (the agent's ``state`` on the phone stream,
every event of an AudioHook session) comes from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import websockets
from websockets.exceptions import ConnectionClosed

from agents_app.evals.remote.base import CONNECT_TIMEOUT_S, TargetError, event_name

if TYPE_CHECKING:
    from agents_app.evals.remote.base import RemoteTarget


class DashboardFeed:
    """Hands ``target`` the relay's messages of one session: all of them (``everything``) or only
    the agent's ``state`` events. Without a session id yet it follows every session and keeps
    them until :meth:`follow` names the one."""

    def __init__(self, ws: Any, target: RemoteTarget, session_id: str | None, everything: bool) -> None:
        self.ws = ws
        self.target = target
        self.session_id = session_id
        self.everything = everything
        self.waiting: list[dict[str, Any]] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(
        cls, target: RemoteTarget, session_id: str | None, everything: bool = False
    ) -> DashboardFeed:
        params = [f"session_id={quote(session_id)}"] if session_id else []
        if target.api_key:
            params.append(f"api_key={quote(target.api_key)}")
        url = f"{target.ws_base}/browser/dashboard/relay?{'&'.join(params)}"
        try:
            ws = await websockets.connect(url, max_size=2**23, open_timeout=CONNECT_TIMEOUT_S)
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                while True:  # relay_connected first: from then on nothing of the session is missed
                    first = json.loads(await ws.recv())
                    if event_name(first) == "relay_connected":
                        break
        except ConnectionClosed as exc:
            raise TargetError(f"the dashboard relay refused the connection: {exc}") from None
        except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
            raise TargetError(f"cannot open the dashboard relay at {target.ws_base}: {exc}") from None
        return cls(ws, target, session_id, everything)

    def follow(self, session_id: str) -> None:
        """The session is known now: hand over what was kept of it."""
        self.session_id = session_id
        kept, self.waiting = self.waiting, []
        for message in kept:
            self._take(message)

    def _take(self, message: dict[str, Any]) -> None:
        if self.session_id is None:
            self.waiting.append(message)
            return
        if message.get("session_id") != self.session_id or (message.get("payload") or {}).get("snapshot"):
            return
        if self.everything:
            if message.get("type") not in ("audio", "audio_levels"):
                self.target.received(message)
        elif event_name(message) == "state":
            self.target.received(message)

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                if isinstance(raw, str):
                    self._take(json.loads(raw))

    async def close(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)
