"""The small interfaces the engine drives: speech-to-text, end of turn, text-to-speech, chat LLM.

Implementations live in :mod:`voiceagent.speech` (Azure Speech, offline pocketsphinx/espeak-ng)
and :mod:`voiceagent.llm` (Azure OpenAI, OpenAI-compatible, offline rules engine). The engine
knows only these shapes (architecture rule 3). All audio here is PCM16 mono little-endian.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from voiceagent.conversation.specs import VoiceSpec


class ProviderError(RuntimeError):
    """A provider failed in a way the engine reports as an ``Error`` event and recovers from."""


# --- speech to text ----------------------------------------------------------------------------
@runtime_checkable
class STTStream(Protocol):
    """One utterance's recognition, opened when the caller starts speaking.

    ``push`` takes 16 kHz PCM16 audio as it arrives (never blocks the loop); interim hypotheses go
    to the ``on_interim`` callback given at open; ``finish`` is called at end of turn and returns
    the final text ("" for nothing recognised); ``cancel`` drops the utterance.
    """

    async def push(self, pcm16: bytes) -> None: ...

    async def finish(self) -> str: ...

    async def cancel(self) -> None: ...


class STTProvider(Protocol):
    name: str  # e.g. "azure-speech", "offline-pocketsphinx"
    sample_rate: int  # what push() expects: 16000

    async def open(self, language: str, on_interim: Callable[[str], None]) -> STTStream: ...

    async def warm(self) -> int: ...  # clients ready after warming (pool size), for /ready

    async def close(self) -> None: ...


# --- end of turn -------------------------------------------------------------------------------
class TurnModel(Protocol):
    """Hears whether the caller's turn is complete (Smart Turn in :mod:`voiceagent.speech`).

    ``predict`` queues the utterance's audio so far (16 kHz PCM16, ending in the pause) and returns
    at once; ``on_result`` is called later ON THE CALLING EVENT LOOP with the probability (0-1) that
    the turn is complete, or ``None`` when the model failed or gave way to a backlogged recogniser.
    ``wanted()``, asked just before the model runs (in its thread), may say the answer is no longer
    needed. False when it cannot take the request (queue full): the pause is then judged without
    it. One instance per process.
    """

    name: str

    def predict(
        self,
        pcm16: bytes,
        on_result: Callable[[float | None], None],
        wanted: Callable[[], bool] | None = None,
    ) -> bool: ...


# --- text to speech ----------------------------------------------------------------------------
class TTSProvider(Protocol):
    """Synthesises text to PCM16 chunks at ``sample_rate``, streaming as the audio is produced."""

    name: str  # e.g. "azure-speech", "offline-espeak-ng"
    sample_rate: int

    def synthesize(self, text: str, voice: VoiceSpec) -> AsyncIterator[bytes]: ...

    async def warm(self) -> int: ...

    async def close(self) -> None: ...


# --- chat LLM ------------------------------------------------------------------------------------
@dataclass
class ToolCallRequest:
    """A complete tool call the model asked for (arguments as the JSON string it produced)."""

    id: str
    name: str
    arguments: str


@dataclass
class ChatUsage:
    """Tokens one model round used, as the server reported them."""

    input_tokens: int
    output_tokens: int


@dataclass
class ChatChunk:
    """One streamed piece: a text delta, or the finished tool calls of this round, or the end
    (with the round's token ``usage`` when the provider reports it)."""

    text: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None
    usage: ChatUsage | None = None


@dataclass
class ChatRequest:
    """Everything one model round needs. ``messages`` use the OpenAI chat format."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # OpenAI "function" tool schemas
    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    # context for providers that reason about the conversation rather than text (offline rules)
    agent: str = ""
    scenario: str = ""
    memory: dict[str, Any] = field(default_factory=dict)


class ChatProvider(Protocol):
    name: str  # e.g. "azure-openai", "openai-compatible", "offline-rules"

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]: ...

    async def warm(self) -> bool: ...

    async def close(self) -> None: ...
