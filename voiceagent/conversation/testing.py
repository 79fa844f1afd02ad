"""Instant, scripted providers and a static agent directory, for engine tests and benchmarks.

They implement the real interfaces of :mod:`voiceagent.conversation.providers` with no I/O, so
what a test or benchmark measures is the engine itself.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable

from voiceagent.conversation.context import AgentDirectory, TurnContext, resolve_tools
from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError, ToolCallRequest
from voiceagent.conversation.session import SessionState
from voiceagent.conversation.specs import AgentSpec, HandoffMap, ScenarioSpec, VoiceSpec
from voiceagent.conversation.tools import REGISTRY, ToolRegistry


class EnergyVAD:
    """Speech = any sample louder than ``threshold`` (tests feed silence or a tone)."""

    def __init__(self, threshold: int = 500):
        import numpy as np

        self._np = np
        self.threshold = threshold

    def is_speech(self, frame: bytes) -> bool:
        samples = self._np.frombuffer(frame, dtype="<i2")
        return bool(samples.size) and int(self._np.abs(samples).max()) > self.threshold


class _ScriptedStream:
    def __init__(self, owner: ScriptedSTT, on_interim: Callable[[str], None]):
        self.owner = owner
        self.on_interim = on_interim
        self.frames = 0

    async def push(self, pcm16: bytes) -> None:
        if self.owner.fail_push:
            raise ProviderError("scripted STT push failure")
        self.frames += 1
        if self.frames == self.owner.interim_after:
            self.on_interim(self.owner.peek())

    async def finish(self) -> str:
        return self.owner.next_text()

    async def cancel(self) -> None:
        self.owner.cancelled += 1


class _HintingStream(_ScriptedStream):
    """A stream that also says, on demand, what was said so far (as Whisper's ``hint_pause``):
    the utterance's scripted text, on the next loop iteration."""

    text: str | None = None  # this utterance's text, taken from the script at the first hint

    def hint_pause(self, on_text: Callable[[str, float | None], None]) -> bool:
        if self.text is None:
            self.text = self.owner.next_text()
        asyncio.get_running_loop().call_soon(on_text, self.text, self.owner.logprob)
        self.owner.hints += 1
        self.owner.hint_frames.append(self.frames)
        return True

    async def finish(self) -> str:
        return self.owner.next_text() if self.text is None else self.text


class ScriptedSTT:
    """Returns the scripted texts, one per utterance; ``fail_open``/``fail_push`` simulate failures.
    ``on_demand``: its streams answer ``hint_pause`` (a hypothesis whenever asked) like Whisper's,
    with ``logprob`` as the recogniser's confidence in it."""

    name = "scripted-stt"
    sample_rate = 16000

    def __init__(
        self,
        texts: Iterable[str] = (),
        interim_after: int = 3,
        on_demand: bool = False,
        logprob: float = -0.2,
    ):
        self.texts: deque[str] = deque(texts)
        self.logprob = logprob
        self.interim_after = interim_after
        self.on_demand = on_demand
        self.hints = 0  # hypotheses asked for
        self.hint_frames: list[int] = []  # frames the stream had been given when each was asked
        self.fail_open = 0  # how many next opens fail
        self.fail_push = False
        self.opened = 0
        self.cancelled = 0

    def peek(self) -> str:
        return (self.texts[0].split() or [""])[0] if self.texts else ""

    def next_text(self) -> str:
        return self.texts.popleft() if self.texts else ""

    async def open(self, language: str, on_interim: Callable[[str], None]) -> _ScriptedStream:
        self.opened += 1
        if self.fail_open > 0:
            self.fail_open -= 1
            raise ProviderError("scripted STT open failure")
        return (_HintingStream if self.on_demand else _ScriptedStream)(self, on_interim)

    async def warm(self) -> int:
        return 1

    async def close(self) -> None:
        return None


class InstantTTS:
    """``ms_per_word`` of audio per word, in ``chunk_ms`` chunks, produced instantly: silence, or
    with ``level`` a 300 Hz tone of that amplitude (a level a transport's gain shows in)."""

    name = "instant-tts"

    def __init__(
        self,
        sample_rate: int = 16000,
        ms_per_word: int = 100,
        chunk_ms: int = 100,
        fail: bool = False,
        delay_s: float = 0.0,
        level: int = 0,
    ):
        self.level = level
        self.sample_rate = sample_rate
        self.ms_per_word = ms_per_word
        self.chunk_ms = chunk_ms
        self.fail = fail
        self.delay_s = delay_s
        self.spoken: list[str] = []

    async def synthesize(self, text: str, voice: VoiceSpec) -> AsyncIterator[bytes]:
        if self.fail:
            raise ProviderError("scripted TTS failure")
        self.spoken.append(text)
        total = max(1, len(text.split())) * self.ms_per_word
        chunk = bytes(self.sample_rate * self.chunk_ms // 1000 * 2)
        if self.level:
            import numpy as np

            n = self.sample_rate * self.chunk_ms // 1000
            wave = np.sin(np.arange(n) * 2 * np.pi * 300 / self.sample_rate) * self.level
            chunk = wave.astype("<i2").tobytes()
        for _ in range(max(1, total // self.chunk_ms)):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            yield chunk

    async def warm(self) -> int:
        return 1

    async def close(self) -> None:
        return None


Step = str | list[tuple[str, dict]] | Exception | float | None


class ScriptedChat:
    """Plays a script, one entry per model round: a reply text, a list of tool calls (name, args),
    an exception to raise, a float (seconds to stall, for timeouts), or None (empty reply).
    Text is streamed in word chunks. Every request is recorded."""

    name = "scripted-chat"

    def __init__(self, script: Iterable[Step] = (), default: str = "Okay."):
        self.script: deque[Step] = deque(script)
        self.default = default
        self.requests: list[ChatRequest] = []
        self._ids = itertools.count(1)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.requests.append(request)
        step = self.script.popleft() if self.script else self.default
        if isinstance(step, Exception):
            raise step
        if isinstance(step, float):
            await asyncio.sleep(step)
            step = self.default
        if isinstance(step, list):
            yield ChatChunk(
                tool_calls=[
                    ToolCallRequest(
                        id=f"call_{next(self._ids)}", name=name, arguments=__import__("json").dumps(args)
                    )
                    for name, args in step
                ]
            )
        elif step:
            words = step.split(" ")
            for i, word in enumerate(words):
                yield ChatChunk(text=word + ("" if i == len(words) - 1 else " "))
        yield ChatChunk(done=True, finish_reason="stop")

    async def warm(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class StaticDirectory(AgentDirectory):
    """Agents and one scenario held in memory; prompts rendered by ``render`` (default: as written)."""

    def __init__(
        self,
        agents: Iterable[AgentSpec],
        scenario: ScenarioSpec,
        registry: ToolRegistry = REGISTRY,
        render: Callable[[AgentSpec, ScenarioSpec, SessionState], str] | None = None,
    ):
        self.agents = {a.name: a for a in agents}
        self.scenario = scenario
        self.registry = registry
        self.render = render or (lambda agent, scenario, state: agent.prompt_template)
        self.handoff_map = HandoffMap.build(scenario, self.agents)

    async def context(self, state: SessionState, agent_name: str | None = None) -> TurnContext:
        name = agent_name or state.active_agent or self.scenario.start_agent
        agent = self.agents[name]
        return TurnContext(
            agent=agent,
            scenario=self.scenario,
            handoff_map=self.handoff_map,
            system_prompt=self.render(agent, self.scenario, state),
            tools=resolve_tools(agent, self.handoff_map, self.registry, self.agents),
        )
