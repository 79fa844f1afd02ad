"""A person's requests reach the live conversation (voiceagent.transport.control): here at once;
an unknown session 404 without a wait; a registry entry nobody answers for 404 after the reply
timeout; the worker that holds the conversation answers on the request's reply channel and the
others stay silent. The two-worker path over Redis is tests/calls/test_banking_demo_servers.py's."""

from __future__ import annotations

import asyncio
import time

from channels.layers import InMemoryChannelLayer

from voiceagent.conversation.takeover import ControlResult
from voiceagent.transport import control, session_memory
from voiceagent.transport.live import live_sessions


class Held:
    """What the feed calls: a conversation's takeover methods, recorded."""

    closed = False

    def __init__(self) -> None:
        self.close_hooks: list = []
        self.calls: list[tuple[str, dict]] = []

    def take_over(self, by: str) -> ControlResult:
        self.calls.append(("take_over", {"by": by}))
        return ControlResult(200, body={"taken_over": True, "by": by})


async def test_a_conversation_held_here_is_asked_directly():
    held = Held()
    session_memory.live.add("ctl-here", held)
    try:
        result = await control.request("ctl-here", "takeover", {"by": "alice"})
    finally:
        session_memory.live.discard("ctl-here", held)
    assert result.ok and result.body == {"taken_over": True, "by": "alice"}
    assert held.calls == [("take_over", {"by": "alice"})]


async def test_an_unknown_session_is_404_at_once():
    began = time.monotonic()
    result = await control.request("ctl-nobody", "takeover", {"by": "alice"})
    assert result.status == 404 and "no live conversation" in result.detail
    assert time.monotonic() - began < control.REPLY_TIMEOUT_S


async def test_a_live_entry_no_worker_answers_for_is_404_after_the_wait(monkeypatch):
    async def listed(session_id=None):
        return [{"session_id": session_id}]

    monkeypatch.setattr(live_sessions, "live", listed)
    monkeypatch.setattr(session_memory, "cross_process_layer", lambda: object())
    monkeypatch.setattr(control, "REPLY_TIMEOUT_S", 0.2)
    result = await control.request("ctl-stale", "handback", {"by": "alice"})
    assert result.status == 404 and "on any worker" in result.detail


async def test_the_worker_that_holds_it_answers_on_the_reply_channel_and_others_stay_silent():
    layer = InMemoryChannelLayer()
    feed = session_memory.MemoryFeed()
    feed._layer = layer
    reply_to = await layer.new_channel("control")
    message = {
        "type": "session.control",
        "session_id": "ctl-there",
        "method": "take_over",
        "args": {"by": "bob"},
        "origin": "another-worker",
        "reply_to": reply_to,
    }
    await feed._handle(message)  # not held here: no answer
    held = Held()
    session_memory.live.add("ctl-there", held)
    try:
        await feed._handle({**message, "method": "__class__"})  # not a control method: ignored
        await feed._handle({**message, "origin": session_memory.ORIGIN})  # its own: ignored
        assert held.calls == []
        await feed._handle(message)
    finally:
        session_memory.live.discard("ctl-there", held)
    answer = await asyncio.wait_for(layer.receive(reply_to), 1)
    assert answer == {
        "type": "session.control.reply",
        "status": 200,
        "detail": "",
        "body": {"taken_over": True, "by": "bob"},
    }
    assert held.calls == [("take_over", {"by": "bob"})]
