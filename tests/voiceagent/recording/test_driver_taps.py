"""The transport driver's recording taps, the same for every wire: the caller's audio through
``push_caller``, the agent's as the pump hands it over (none of a response a ``StopAudio`` cut),
cuts and ducks; one recording per conversation, a socket's second conversation included."""

from __future__ import annotations

import asyncio

import pytest

from voiceagent.conversation.events import Audio, Duck, StateChange, StopAudio
from voiceagent.runtime import runtime
from voiceagent.transport import driver
from voiceagent.transport.driver import AudioSocket


class FakeRecorder:
    made: list[FakeRecorder] = []

    def __init__(self, session_id: str, transport: str):
        self.calls: list[tuple] = [("open", session_id, transport)]
        FakeRecorder.made.append(self)

    def caller(self, pcm: bytes, rate: int) -> None:
        self.calls.append(("caller", len(pcm), rate))

    def agent(self, pcm: bytes, rate: int) -> None:
        self.calls.append(("agent", pcm, rate))

    def cut(self) -> None:
        self.calls.append(("cut",))

    def gain(self, db: float) -> None:
        self.calls.append(("gain", db))

    def flush(self) -> None:
        self.calls.append(("flush",))

    def close(self) -> None:
        self.calls.append(("close",))


class Conversation:
    def __init__(self, recording: bool):
        self.recording = recording
        self.closed = False
        self.close_reason = None
        self.close_hooks: list = []
        self.heard: list[int] = []
        self.queue: asyncio.Queue = asyncio.Queue()

    async def start(self) -> None: ...

    def push_audio(self, pcm: bytes, rate: int) -> None:
        self.heard.append(len(pcm))

    async def close(self, reason: str) -> None:
        self.closed, self.close_reason = True, reason
        self.queue.put_nowait(None)

    async def events(self):
        while (event := await self.queue.get()) is not None:
            yield event


class Wire(AudioSocket):
    transport = "phone"

    def __init__(self):
        super().__init__({"type": "websocket", "path": "/"}, None, None)
        self.session_id = "s-taps"
        self.sent: list[str] = []

    async def on_audio(self, event) -> None:
        self.sent.append("audio")

    async def on_event(self, event) -> None:
        self.sent.append(event.kind)

    async def conversation_lost(self, reason) -> None:
        """The events ended: nothing to close here (no client)."""


@pytest.fixture
def conversations(monkeypatch):
    made: list[Conversation] = []
    plan: list[bool] = []

    def new(mode, session_id, scenario, *, transport, agent=None):
        made.append(Conversation(plan.pop(0)))
        return made[-1]

    monkeypatch.setattr(runtime, "new_conversation_for", new)
    monkeypatch.setattr(driver, "Recorder", FakeRecorder)
    FakeRecorder.made = []
    return made, plan


def audio(rid: int, pcm: bytes = b"\x01\x00" * 4) -> Audio:
    return Audio(session_id="s-taps", pcm=pcm, sample_rate=24000, seq=1, response_id=rid)


async def test_both_sides_go_to_the_recording_and_a_cut_response_stays_cut(conversations):
    made, plan = conversations
    plan.append(True)
    wire = Wire()
    await wire.start_conversation("cascade", "default")
    wire.push_caller(b"\x00\x00" * 160, 8000)
    conversation = made[0]
    for event in (
        audio(1, b"A" * 8),
        Duck(session_id="s-taps", gain_db=-20.0, response_id=1),
        StopAudio(session_id="s-taps", response_id=1),
        audio(1, b"B" * 8),  # already handed over by the engine: never heard
        audio(0, b"U" * 8),  # no response id: kept
        audio(2, b"C" * 8),
        StateChange(session_id="s-taps", state="listening"),
    ):
        conversation.queue.put_nowait(event)
    conversation.queue.put_nowait(None)
    await wire.pump(conversation)
    await wire.end_conversation("done")
    (recorder,) = FakeRecorder.made
    assert recorder.calls == [
        ("open", "s-taps", "phone"),
        ("caller", 320, 8000),
        ("agent", b"A" * 8, 24000),
        ("gain", -20.0),
        ("cut",),
        ("agent", b"U" * 8, 24000),
        ("agent", b"C" * 8, 24000),
        ("flush",),  # the response ended: what the recorder gathered is due
        ("close",),
    ]
    assert conversation.heard == [320] and wire.sent.count("audio") == 4  # the wire still decides for itself


async def test_not_recorded_means_no_recorder_and_a_second_conversation_gets_its_own(conversations):
    made, plan = conversations
    plan += [False, True, True]
    wire = Wire()
    await wire.start_conversation("cascade", "default")
    wire.push_caller(b"\x00\x00" * 10, 16000)
    assert wire.recorder is None and FakeRecorder.made == []
    await wire.end_conversation("done")

    await wire.start_conversation("cascade", "default")
    first = FakeRecorder.made[0]
    made[1].queue.put_nowait(StopAudio(session_id="s-taps", response_id=3))
    made[1].queue.put_nowait(None)
    await wire.pump(made[1])
    wire.conversation = None  # it ended on its own and the socket stayed (the browser's way)
    await wire.start_conversation("cascade", "default")  # numbers its responses from 1 again
    assert first.calls[-1] == ("close",)
    second = FakeRecorder.made[1]
    made[2].queue.put_nowait(audio(1))
    made[2].queue.put_nowait(None)
    await wire.pump(made[2])
    assert ("agent", b"\x01\x00" * 4, 24000) in second.calls
