"""Helpers for driving the engine in tests: agents, frames, event collection."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.specs import AgentSpec, HandoffSpec, ScenarioSpec
from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedChat, ScriptedSTT, StaticDirectory
from voiceagent.conversation.tools import ToolRegistry

RATE = 16000
FRAME = RATE * 20 // 1000
TONE = (np.sin(np.arange(FRAME) * 2 * np.pi * 440 / RATE) * 8000).astype("<i2").tobytes()
SILENCE = bytes(FRAME * 2)

AGENTS = [
    AgentSpec(
        name="front",
        prompt_template="You are the front desk.",
        greeting="Hello, front desk.",
        handoff_trigger="to_front",
        tools=("lookup", "to_billing", "to_tech"),
        return_greeting="Front again.",
    ),
    AgentSpec(
        name="billing",
        prompt_template="You are billing.",
        greeting="Billing here.",
        handoff_trigger="to_billing",
        tools=("lookup", "to_front"),
    ),
    AgentSpec(
        name="tech",
        prompt_template="You are tech support.",
        greeting="Tech here.",
        handoff_trigger="to_tech",
        tools=("to_front",),
    ),
]
SCENARIO = ScenarioSpec(
    name="desk",
    start_agent="front",
    agents=("front", "billing", "tech"),
    handoffs=(
        HandoffSpec("front", "billing", "to_billing", "announced"),
        HandoffSpec("front", "tech", "to_tech", "discrete"),
        HandoffSpec("billing", "front", "to_front", "announced"),
        HandoffSpec("tech", "front", "to_front", "announced"),
    ),
)


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool()
    async def lookup(account: str) -> dict:
        """Look up an account.

        Args:
            account: the account number
        """
        return {"account": account, "balance": 42.5}

    return registry


class ConversationDriver:
    """What drives either pipeline in a test: caller audio in, every event collected."""

    wait_s = 3.0  # how long ``until`` waits by default

    conv: Any

    def __init__(self) -> None:
        self.events: list = []
        self._reader: asyncio.Task | None = None

    async def _read(self):
        async for event in self.conv.events():
            self.events.append(event)

    def speak(self, speech_frames: int = 10, silence_frames: int = 15) -> None:
        for _ in range(speech_frames):
            self.conv.push_audio(TONE, RATE)
        for _ in range(silence_frames):
            self.conv.push_audio(SILENCE, RATE)

    async def until(self, predicate, timeout: float | None = None):
        async with asyncio.timeout(self.wait_s if timeout is None else timeout):
            while not predicate(self):
                await asyncio.sleep(0.005)

    def kinds(
        self, *, skip_audio: bool = True, skip_deltas: bool = True, skip_metrics: bool = True
    ) -> list[str]:
        out = []
        for e in self.events:
            if skip_audio and e.kind == "Audio":
                continue
            if skip_metrics and e.kind == "TurnMetrics":  # checked by test_turn_timing.py
                continue
            if skip_deltas and e.kind == "AgentResponse" and not e.final:
                continue
            out.append(describe(e))
        return out

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.kind == kind]


class Harness(ConversationDriver):
    def __init__(self, script=(), texts=(), tts: InstantTTS | None = None, silence_ms: int = 200, **config):
        super().__init__()
        self.registry = make_registry()
        self.store = InMemorySessionStore()
        self.stt = ScriptedSTT(texts)
        self.tts = tts or InstantTTS(ms_per_word=20, chunk_ms=20)
        self.chat = ScriptedChat(script)
        self.directory = StaticDirectory(AGENTS, SCENARIO, self.registry)
        cfg = EngineConfig(silence_timeout_ms=lambda: silence_ms, **config)
        self.conv = Conversation(
            "s1",
            scenario="desk",
            directory=self.directory,
            store=self.store,
            stt=self.stt,
            tts=self.tts,
            chat=self.chat,
            vad=EnergyVAD(),
            registry=self.registry,
            config=cfg,
        )

    async def __aenter__(self):
        await self.conv.start()
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc):
        await self.conv.close()
        if self._reader:
            await asyncio.wait_for(self._reader, 2)

    async def idle(self, timeout: float = 3.0):
        """Wait until the conversation is listening again with no response running."""
        await self.until(
            lambda h: (
                (h.conv._response_task is None or h.conv._response_task.done())
                and h.conv._utterance is None
                and h.conv.loop_time() >= h.conv.playback_end
                and not h.conv._pending
            ),
            timeout,
        )
        await asyncio.sleep(0.02)


def describe(e) -> str:
    k = e.kind
    if k == "Transcript":
        return f"Transcript({'final' if e.final else 'interim'}:{e.text})"
    if k == "AgentResponse":
        return f"AgentResponse({e.agent}:{e.text})"
    if k == "Handoff":
        return f"Handoff({e.from_agent}->{e.to_agent}:{e.type})"
    if k == "ToolCall":
        return f"ToolCall({e.name}:{'ok' if e.ok else 'error'})"
    if k == "StateChange":
        return f"State({e.state})"
    if k == "Error":
        return f"Error({e.code})"
    if k == "StopAudio":
        return "StopAudio"
    return k
