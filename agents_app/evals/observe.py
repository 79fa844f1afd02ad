"""What an agent test sees of one caller turn, built from the service's own message envelope.

Every target (in-process engine, browser socket, phone media stream with ``?events=1``, AudioHook
through the dashboard socket) hands the same server messages (``{"type", "payload", ...}``, see
:func:`voiceagent.transport.envelope.event_payload`) to a :class:`TurnRecorder`; expectations are
then checked on the :class:`TurnObservation` alone, so one test file means the same thing over
every transport.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CallerTurn", "Target", "TurnObservation", "TurnRecorder"]


@dataclass(frozen=True)
class CallerTurn:
    """One caller turn of a test: ``say`` (text; spoken as synthesised audio when ``audio``) or
    ``dtmf`` (keypad digits)."""

    say: str | None = None
    dtmf: str | None = None
    audio: bool = False


@dataclass
class TurnObservation:
    """What happened in one turn, as the caller's side of the wire saw it."""

    transcript: str = ""  # what the service heard: its final transcript(s), joined
    reply: str = ""  # the agent's final response texts, joined
    agent: str = ""  # the active agent at the end of the turn
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "args", "result", "ok"}
    handoffs: list[dict[str, Any]] = field(default_factory=list)  # {"from", "to", "type", "tool"}
    ended: bool = False  # the conversation ended (session_ended / state ended)
    first_audio_ms: float | None = None  # end of the caller's turn -> the agent's first audio
    errors: list[dict[str, Any]] = field(default_factory=list)  # {"code", "message"}
    messages: list[dict[str, Any]] = field(default_factory=list)  # everything received, for reports


class TurnRecorder:
    """Feeds on server messages of one turn (call :meth:`start` when the caller's turn is sent or
    ends, then :meth:`add` for each message); :attr:`observation` is the result."""

    def __init__(self, agent: str = ""):
        self.agent = agent
        self.observation = TurnObservation(agent=agent)
        self._started = time.monotonic()

    def start(self, at: float | None = None) -> TurnObservation:
        """A new caller turn: a fresh observation (the active agent carries over)."""
        self.observation = TurnObservation(agent=self.agent)
        self._started = time.monotonic() if at is None else at
        return self.observation

    def add(self, message: dict[str, Any], at: float | None = None) -> None:
        obs = self.observation
        obs.messages.append(message)
        kind, payload = message.get("type"), message.get("payload") or {}
        if kind == "transcript" and payload.get("final") and payload.get("speaker", "user") == "user":
            obs.transcript = f"{obs.transcript} {payload.get('text', '')}".strip()
        elif kind == "response" and payload.get("final"):
            obs.reply = f"{obs.reply} {payload.get('text', '')}".strip()
            if payload.get("agent"):
                self.agent = obs.agent = payload["agent"]
        elif kind == "audio" or kind == "media":
            if obs.first_audio_ms is None:
                now = time.monotonic() if at is None else at
                obs.first_audio_ms = round((now - self._started) * 1000.0, 1)
        elif kind == "error":
            obs.errors.append({"code": payload.get("code"), "message": payload.get("message")})
        elif kind == "event":
            self._event(obs, payload)

    def _event(self, obs: TurnObservation, payload: dict[str, Any]) -> None:
        name = payload.get("name")
        if name == "tool_call":
            obs.tool_calls.append(
                {
                    "name": payload.get("tool"),
                    "args": payload.get("args") or {},
                    "result": payload.get("result"),
                    "ok": payload.get("ok", True),
                }
            )
        elif name == "handoff":
            obs.handoffs.append(
                {
                    "from": payload.get("from"),
                    "to": payload.get("to"),
                    "type": payload.get("type"),
                    "tool": payload.get("tool"),
                }
            )
            self.agent = obs.agent = payload.get("to") or obs.agent
        elif name == "state":
            if payload.get("agent"):
                self.agent = obs.agent = payload["agent"]
            if payload.get("state") == "ended":
                obs.ended = True
        elif name == "session_ended":
            obs.ended = True


class Target(Protocol):
    """Where a test's conversation runs: ``engine`` in process, or a running service's transport."""

    name: str

    async def open(self, scenario: str, *, seed: int | None, variables: dict[str, Any]) -> str:
        """Start the conversation (the greeting is heard out); returns the session id."""
        ...

    async def greeting(self) -> TurnObservation:
        """The observation of the conversation's opening (greeting) turn."""
        ...

    async def turn(self, turn: CallerTurn) -> TurnObservation:
        """Send one caller turn and return what happened until the agent finished answering
        (its last audio played, back to listening) or the conversation ended."""
        ...

    async def close(self) -> None: ...
