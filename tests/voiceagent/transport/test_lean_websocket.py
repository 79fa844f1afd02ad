"""LeanWebSocket: ``disconnect`` runs once whatever a hook does, so nothing stays counted open.

Driven through its ASGI interface (the events a server sends, the messages it gets back), with a
small endpoint that counts itself in the connection tracker as the real transports do.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from voiceagent.connections import tracker
from voiceagent.transport.websocket import LeanWebSocket


class Counted(LeanWebSocket):
    """Counted open after accept, like the browser and media sockets; ``fail_in`` names the hook
    that raises (a bug, a store that is down) after that."""

    fail_in = ""
    ended: list[int]

    async def connect(self) -> None:
        self.counted = False
        await self.accept()
        tracker.opened("browser")
        self.counted = True
        if self.fail_in == "connect":
            raise ConnectionError("the cache is down")

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.fail_in == "receive":
            raise ValueError("a bug in a handler")
        await self.send(text_data=text_data)

    async def disconnect(self, code: int) -> None:
        self.ended.append(code)
        if self.counted:
            self.counted = False
            tracker.closed("browser")


async def drive(cls: type[Counted], events: list[dict]) -> list[dict]:
    """Run the endpoint on ``events`` (then nothing more: a client that stays silent)."""
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    for event in events:
        inbox.put_nowait(event)
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await asyncio.wait_for(cls.as_asgi()({"type": "websocket"}, inbox.get, send), 5)
    return sent


@pytest.mark.parametrize("hook", ["connect", "receive"])
async def test_a_failing_hook_closes_1011_and_still_disconnects(hook, caplog):
    tracker.reset()
    cls = type("Failing", (Counted,), {"fail_in": hook, "ended": []})
    with caplog.at_level(logging.ERROR, logger="voiceagent.transport.websocket"):
        sent = await drive(cls, [{"type": "websocket.connect"}, {"type": "websocket.receive", "text": "hi"}])
    assert sent[0]["type"] == "websocket.accept"
    assert sent[-1] == {"type": "websocket.close", "code": 1011, "reason": "internal error"}
    assert cls.ended == [1011]
    assert tracker.metrics() == {"connected": 1, "disconnected": 1, "active": 0}
    assert len([r for r in caplog.records if r.name == "voiceagent.transport.websocket"]) == 1


async def test_a_client_gone_before_the_accept_is_no_error(caplog):
    """Under overload a client may give up while its upgrade waits: the server's accept then
    raises (uvicorn: ClientDisconnected, an OSError). That is a client leaving, not a failure of
    ours: no ERROR, no 1011, and the disconnect event ends the socket once."""
    from uvicorn.protocols.utils import ClientDisconnected

    Counted.ended = []
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    for event in ({"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1006}):
        inbox.put_nowait(event)
    sent: list[dict] = []

    async def send(message: dict) -> None:
        if message["type"] == "websocket.accept":
            raise ClientDisconnected()
        sent.append(message)

    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(Counted.as_asgi()({"type": "websocket"}, inbox.get, send), 5)
    assert Counted.ended == [1006] and sent == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "left before the socket was accepted" in caplog.text
