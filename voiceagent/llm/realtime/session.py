"""What the live engine sees of a realtime voice API: the session it asks for and the interface.

:class:`SessionConfig` is dialect-neutral (each connection builds its own ``session.update`` from
it); :class:`RealtimeClient` and :class:`RealtimeConnection` are the two small protocols the live
engine codes against, so it never names VoiceLive or OpenAI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.voices import OPENAI_VOICES  # the voices OpenAI's realtime models have

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "OPENAI_VOICES",
    "SAMPLE_RATE",
    "RealtimeClient",
    "RealtimeConnection",
    "RealtimeError",
    "SessionConfig",
    "setting",
]

SAMPLE_RATE = 24000  # pcm16 in and out
DEFAULT_CONNECT_TIMEOUT_S = 5.0


class RealtimeError(ProviderError):
    """The realtime API failed; ``retryable`` is False for answers that will not change (401, 404)."""

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class SessionConfig:
    """What a conversation asks of the realtime session, independent of the dialect."""

    instructions: str = ""
    voice: str | None = None
    tools: tuple[dict, ...] = ()
    tool_choice: str = "auto"
    silence_duration_ms: int = 500  # the shortest end of turn (turn_taking.endpointing_min_ms)
    endpointing_max_ms: int | None = None  # the longest: a semantic end-of-turn detector's bound
    semantic_vad: bool = False  # the service's semantic turn detector instead of silence alone
    # True: the service answers at the end of speech and stops its answer when speech starts
    # (create_response / interrupt_response); False: the engine decides both (a barge-in needs
    # MIN_INTERRUPTION_MS of speech, a backchannel is no turn) and sends response.create itself
    auto_respond: bool = False
    vad_threshold: float = 0.5
    prefix_padding_ms: int = 300
    transcription: bool = True
    transcription_model: str | None = None  # None: the dialect's default
    language: str | None = None  # BCP-47, e.g. "en-US"
    temperature: float | None = None


class RealtimeConnection(Protocol):
    """One conversation's realtime socket: client events out, normalised server events in."""

    provider: str

    async def send(self, event: Mapping[str, Any]) -> None: ...

    async def send_json(self, text: str) -> None: ...

    def session_event(self, session: SessionConfig) -> dict[str, Any]: ...

    async def update_session(self, session: SessionConfig) -> None: ...

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...

    async def close(self) -> None: ...


class RealtimeClient(Protocol):
    """Opens :class:`RealtimeConnection` s to one configured service."""

    name: str

    async def connect(self, session: SessionConfig) -> RealtimeConnection: ...

    async def close(self) -> None: ...


def setting(config: Mapping[str, Any], name: str) -> Any:
    """A setting from the validated table, else (not declared there) the raw environment."""
    value = config.get(name)
    if value is None and hasattr(config, "raw"):
        value = config.raw(name)  # type: ignore[attr-defined]
    return value
