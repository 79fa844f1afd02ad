"""Typed events the engine emits, and the bounded channel that carries them to a transport.

A transport renders these into its wire format (browser JSON envelope, ACS media messages,
AudioHook). :class:`EventChannel` is a bounded queue with one extra power: on barge-in the
engine purges the audio of the cancelled response that the transport has not taken yet, so
nothing of it is played after ``StopAudio`` even when the transport lags.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("voiceagent.conversation.events")


@dataclass(frozen=True)
class Event:
    session_id: str
    ts: float = field(default_factory=time.time, kw_only=True)

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Transcript(Event):
    text: str
    final: bool
    speaker: str = "user"


@dataclass(frozen=True)
class AgentResponse(Event):
    """``final=False``: a text delta; ``final=True``: the whole text the agent said this round."""

    text: str
    agent: str
    final: bool
    response_id: int = 0
    by: str = ""  # a person's line said in the agent's voice (a takeover): who


@dataclass(frozen=True)
class Audio(Event):
    pcm: bytes
    sample_rate: int
    seq: int
    response_id: int = 0

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


@dataclass(frozen=True)
class StopAudio(Event):
    """Flush queued playback: the caller spoke over the agent (barge-in) or the response was dropped."""

    reason: str = "barge_in"
    response_id: int = 0


@dataclass(frozen=True)
class Duck(Event):
    """Play the agent's audio not yet played at ``gain_db`` (below 0: lowered; 0: restored). The
    caller speaks over the agent and their words are not known yet: a backchannel restores the
    gain (no gap, nothing repeated), a real interruption is a ``StopAudio``. Every transport
    honours it on what it has not sent (a paced wire) or not played (the browser); a ``StopAudio``
    ends a duck too (the next audio plays at full gain)."""

    gain_db: float = 0.0
    response_id: int = 0


@dataclass(frozen=True)
class Handoff(Event):
    from_agent: str
    to_agent: str
    type: str
    tool: str = ""


@dataclass(frozen=True)
class ToolCall(Event):
    name: str
    arguments: dict[str, Any]
    result: Any
    ok: bool
    duration_ms: float
    agent: str = ""


@dataclass(frozen=True)
class Takeover(Event):
    """A person took the conversation over (``active``) or handed it back to the agent."""

    active: bool
    by: str


@dataclass(frozen=True)
class TransferRequested(Event):
    """The agent escalated to a person (``escalate_to_human``) and its line about it has been said:
    the transport transfers the call to ``target`` (the scenario's; "" when it sets none) its own way
    (ACS transfer, AudioHook disconnect for the contact centre to route, a takeover request on the
    dashboard)."""

    target: str
    reason: str = ""
    reference: str = ""
    priority: str = "normal"


@dataclass(frozen=True)
class StateChange(Event):
    state: str  # listening | thinking | speaking | paused | ended
    agent: str = ""


@dataclass(frozen=True)
class TurnMetrics(Event):
    """A turn closed with its assistant turn: its ``latency_ms`` and ``usage`` as stored in the
    history (keys in :mod:`voiceagent.conversation.timing`); ``turn_index`` counts this
    conversation's measured turns from 1."""

    latency_ms: dict[str, Any]
    usage: dict[str, Any]
    turn_index: int
    agent: str = ""


@dataclass(frozen=True)
class Error(Event):
    code: str  # llm_error | tts_error | stt_error | tool_error | input_overflow | ...
    message: str
    recoverable: bool = True


class EventChannel:
    """Bounded FIFO of events. ``put`` waits when full (backpressure on the producer)."""

    def __init__(self, maxsize: int = 512):
        self.maxsize = maxsize
        self._items: deque[Event] = deque()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, event: Event) -> None:
        while len(self._items) >= self.maxsize and not self.closed:
            self._writable.clear()
            await self._writable.wait()
        self._append(event)

    def put_nowait(self, event: Event) -> bool:
        """Add without waiting; when full the event is dropped (counted, logged once per 100)."""
        if len(self._items) >= self.maxsize:
            self.dropped += 1
            if self.dropped % 100 == 1:
                logger.warning(
                    "event channel full: dropped %s event (%d dropped so far)", event.kind, self.dropped
                )
            return False
        self._append(event)
        return True

    def _append(self, event: Event) -> None:
        if self.closed:
            return
        self._items.append(event)
        self._readable.set()

    async def get(self) -> Event | None:
        """Next event, or None once closed and drained."""
        while not self._items:
            if self.closed:
                return None
            self._readable.clear()
            await self._readable.wait()
        event = self._items.popleft()
        if len(self._items) < self.maxsize:
            self._writable.set()
        return event

    async def stream(self) -> AsyncIterator[Event]:
        """Every event until the channel is closed and drained."""
        while True:
            event = await self.get()
            if event is None:
                return
            yield event

    def purge(self, predicate: Callable[[Event], bool]) -> int:
        """Remove queued events matching ``predicate``; returns how many."""
        kept = deque(e for e in self._items if not predicate(e))
        removed = len(self._items) - len(kept)
        self._items = kept
        if removed:
            self._writable.set()
        return removed

    def close(self) -> None:
        self.closed = True
        self._readable.set()
        self._writable.set()
