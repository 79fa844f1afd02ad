"""The transport driver (AudioSocket): admission and close codes, limits, idle timeout, the
conversation's start, pump and end, the slot released once, whatever ends the socket.

Driven through its ASGI interface with a small codec (text frames become ``push_text``, events
are echoed as their kind) and a scripted conversation in place of the engine, so every path of
the driver is reached without a provider, a database or a server.
"""

from __future__ import annotations

import asyncio

import pytest

from voiceagent.connections import tracker
from voiceagent.conversation.engine import ENDED_BY_AGENT
from voiceagent.conversation.events import Audio, StateChange, Transcript
from voiceagent.runtime import runtime
from voiceagent.transport.driver import AudioSocket, Refused, StartFailed
from voiceagent.transport.playback import PacedPlayback


class ScriptedConversation:
    """What the driver needs of a conversation: start, events, close with its close hooks (and an
    input to push)."""

    def __init__(self, start: str = "ok"):
        self.start_mode = start
        self.closed = False
        self.close_reason: str | None = None
        self.texts: list[str] = []
        self.close_hooks: list = []
        self._events: asyncio.Queue = asyncio.Queue()

    async def start(self) -> None:
        if self.start_mode == "hang":
            await asyncio.sleep(10)
        elif self.start_mode == "refused":
            await self.close("the peer refused")
        elif self.start_mode == "raise":
            raise ConnectionError("no route to the peer")

    def emit(self, event) -> None:
        self._events.put_nowait(event)

    async def push_text(self, text: str) -> None:
        self.texts.append(text)

    async def close(self, reason: str) -> None:
        if not self.closed:
            self.closed, self.close_reason = True, reason
            self._events.put_nowait(None)
            for hook in self.close_hooks:
                hook(self)

    async def events(self):
        while (event := await self._events.get()) is not None:
            yield event


class Echo(AudioSocket):
    transport = "browser"
    busy_reason = "busy: try later"
    limit = 5
    idle_s: float | None = None
    seen: list[str]

    async def connect(self) -> None:
        self.limit_messages(16, 10, 1.0)
        await self.accept()
        try:
            self.take_slot(self.limit)
        except Refused as exc:
            await self.close(exc.code, exc.reason)
            return
        self.session_id = "s-1"
        await self.start_conversation("cascade", "default", deadline=1)
        self.run_pump()
        if self.idle_s:
            self.watch_idle(self.idle_s)

    async def decode(self, text_data, bytes_data) -> None:
        await self.conversation.push_text(text_data)

    async def on_audio(self, event) -> None:
        self.seen.append("Audio")

    async def on_event(self, event) -> None:
        self.seen.append(event.kind)


class Made(list):
    """The conversations the runtime made; ``modes[0]`` says how the next ones start."""

    modes: list[str]


@pytest.fixture
def conversations(monkeypatch):
    made = Made()
    modes: list[str] = []

    def new_conversation_for(mode, session_id, scenario, *, transport, agent=None):
        if modes and modes[0] == "fail":
            raise ValueError("no such agent")
        made.append(ScriptedConversation(modes[0] if modes else "ok"))
        return made[-1]

    monkeypatch.setattr(runtime, "new_conversation_for", new_conversation_for)
    tracker.reset()
    made.modes = modes
    return made


class Client:
    """The server side's ASGI events, fed by the test; what the socket sent, collected."""

    def __init__(self, cls: type[Echo]):
        self.inbox: asyncio.Queue[dict] = asyncio.Queue()
        self.sent: list[dict] = []
        self.inbox.put_nowait({"type": "websocket.connect"})
        self.task = asyncio.create_task(cls.as_asgi()({"type": "websocket"}, self.inbox.get, self._send))

    async def _send(self, message: dict) -> None:
        self.sent.append(message)

    def text(self, text: str) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "text": text})

    async def closed(self) -> dict:
        async with asyncio.timeout(5):
            while not (self.sent and self.sent[-1]["type"] == "websocket.close"):
                await asyncio.sleep(0.01)
        return self.sent[-1]

    async def gone(self, code: int = 1001) -> None:
        self.inbox.put_nowait({"type": "websocket.disconnect", "code": code})
        await asyncio.wait_for(self.task, 5)


def echo(**attrs) -> type[Echo]:
    return type("Echo", (Echo,), {"seen": [], **attrs})


async def test_a_busy_process_refuses_with_1013_and_counts_nothing(conversations):
    client = Client(echo(limit=0))
    assert await client.closed() == {"type": "websocket.close", "code": 1013, "reason": "busy: try later"}
    await client.gone()
    assert tracker.metrics() == {"connected": 0, "disconnected": 0, "active": 0}
    assert conversations == []


@pytest.mark.parametrize(
    ("messages", "code", "reason"),
    [
        (["x" * 17], 1009, "message too big: 17 bytes, the limit is 16"),
        (["hi"] * 50, 1008, "too many messages: the limit is 10 per second"),
    ],
)
async def test_inbound_limits_close_the_socket_and_end_the_conversation(
    conversations, messages, code, reason
):
    client = Client(echo())
    for message in messages:
        client.text(message)
    assert await client.closed() == {"type": "websocket.close", "code": code, "reason": reason}
    assert conversations[0].close_reason == reason
    assert tracker.metrics() == {"connected": 1, "disconnected": 1, "active": 0}
    await client.gone()
    assert tracker.metrics()["active"] == 0  # released once


async def test_events_reach_the_codec_in_order_and_the_agent_ending_closes_1000(conversations):
    cls = echo()
    client = Client(cls)
    client.text("hello")
    await asyncio.sleep(0.05)
    conversation = conversations[0]
    assert conversation.texts == ["hello"]
    conversation.emit(Transcript("s-1", text="hello", final=True))
    conversation.emit(Audio("s-1", pcm=b"\0\0", sample_rate=16000, seq=1))
    conversation.emit(StateChange("s-1", state="listening"))
    await conversation.close(ENDED_BY_AGENT)
    closed = await client.closed()
    assert closed == {"type": "websocket.close", "code": 1000, "reason": "the agent ended the conversation"}
    assert cls.seen == ["Transcript", "Audio", "StateChange"]
    assert tracker.metrics()["active"] == 0


async def test_a_lost_conversation_closes_1011_with_its_reason(conversations):
    client = Client(echo())
    await asyncio.sleep(0.05)
    await conversations[0].close("the realtime API dropped")
    closed = await client.closed()
    assert (closed["code"], closed["reason"]) == (1011, "the conversation ended: the realtime API dropped")


async def test_the_client_going_ends_the_conversation_and_releases_the_slot(conversations):
    client = Client(echo(gone_reason="gone ({code})"))
    await asyncio.sleep(0.05)
    assert tracker.metrics()["active"] == 1
    await client.gone(1001)
    assert conversations[0].close_reason == "gone (1001)"
    assert tracker.metrics() == {"connected": 1, "disconnected": 1, "active": 0}
    assert not [m for m in client.sent if m["type"] == "websocket.close"]  # nobody left to tell


async def test_a_silent_client_is_closed_after_the_idle_timeout(conversations):
    client = Client(echo(idle_s=0.1))
    closed = await client.closed()
    assert (closed["code"], closed["reason"]) == (1000, "idle for 0.1 s")
    assert conversations[0].close_reason == "idle for 0.1 s"


@pytest.mark.parametrize(
    ("mode", "stage", "detail"),
    [
        ("fail", "create", "no such agent"),
        ("hang", "deadline", "no start within 0.1 s"),
        ("refused", "closed", "it closed at once: the peer refused"),
        ("raise", "start", "no route to the peer"),
    ],
)
async def test_a_conversation_that_cannot_start_says_at_which_stage(conversations, mode, stage, detail):
    conversations.modes.append(mode)

    async def nothing(*_):
        return None

    socket = AudioSocket({"type": "websocket"}, nothing, nothing)
    with pytest.raises(StartFailed) as failed:
        await socket.start_conversation("cascade", "default", deadline=0.1)
    assert (failed.value.stage, failed.value.detail) == (stage, detail)
    assert socket.conversation is None
    if conversations:  # made, then closed: nothing is left running
        assert conversations[0].closed


async def test_a_closed_conversation_may_be_accepted_when_the_codec_says_so(conversations):
    conversations.modes.append("refused")

    async def nothing(*_):
        return None

    socket = AudioSocket({"type": "websocket"}, nothing, nothing)
    await socket.start_conversation("cascade", "default", refuse_closed=False)
    assert socket.conversation is conversations[0] and socket.conversation.closed


async def test_paced_wire_audio_goes_through_one_encoder_per_rate():
    made: dict[int, list[str]] = {}

    class Tagger:
        """Marks which rate's encoder handled what: ``encode`` prefixes, ``flush`` adds a tail."""

        def __init__(self, rate: int):
            self.rate = rate
            made[rate] = []

        def encode(self, pcm: bytes) -> bytes:
            made[self.rate].append("encode")
            return pcm

        def flush(self) -> bytes:
            made[self.rate].append("flush")
            return b"T"

        def reset(self) -> None:
            made[self.rate].append("reset")

    sent: list[bytes] = []

    async def send(frame: bytes) -> None:
        sent.append(frame)

    p = PacedPlayback(
        send,
        frame_bytes=4,
        frame_ms=5,
        lead_frames=2,
        max_frames=100,
        pad_byte=0,
        encoder=lambda rate: None if rate == 8000 else Tagger(rate),
    )
    task = asyncio.create_task(p.run())
    p.push_pcm(b"ab", 8000)  # the wire's own rate: as it is
    p.push_pcm(b"cd", 24000)
    p.push_pcm(b"ef", 24000)
    p.finish_response()
    await p.drained(2)
    p.drop()
    p.stop()
    await task
    assert sent == [b"abcd", b"efT\0"]
    assert made == {24000: ["encode", "encode", "flush", "reset"]}
