"""Session state as the engine sees it, and the small store interface it talks to.

The engine never knows Django (architecture rule 1): ``agents_app.sessions.DjangoSessionStore``
implements :class:`SessionStore` on the cache (state, with a TTL) and the database (history,
written turn by turn); :class:`InMemorySessionStore` serves tests and benchmarks.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
Role = Literal["user", "assistant", "tool", "system"]
# How much of an assistant turn the caller heard. It is written as "unknown" the moment it is sent
# (text and audio on their way to the caller) and corrected once that is known: "played" (in full)
# or "cut" (a barge-in: the content becomes the words heard). A process that died before then leaves
# "unknown" - the caller may have heard all of it.
HEARD_UNKNOWN, HEARD_PLAYED, HEARD_CUT = "unknown", "played", "cut"
# Turn.speaker of what a person said in the agent's voice, and of the takeover's and handback's
# system turns (a human took the conversation over: voiceagent.conversation.takeover)
PERSON = "person"


def valid_session_id(value: str | None) -> bool:
    """1-128 characters of ``[A-Za-z0-9_.:-]``."""
    return bool(value) and SESSION_ID_RE.match(value) is not None  # type: ignore[arg-type]


@dataclass
class Turn:
    """One history entry; an assistant turn carries its turn's ``latency_ms`` and ``usage``
    (:mod:`voiceagent.conversation.timing`), other roles None."""

    role: Role
    content: str
    agent: str | None = None
    tool_name: str | None = None
    at: float = field(default_factory=time.time)
    latency_ms: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    heard: str | None = None  # assistant turns: HEARD_UNKNOWN / HEARD_PLAYED / HEARD_CUT
    uid: str | None = None  # a turn written before it was heard: what its correction replaces
    tool_call_id: str | None = None  # tool turns: the model's id of the call this answers
    arguments: dict[str, Any] | None = None  # tool turns: the arguments it was called with
    speaker: str | None = None  # who said it when not the agent or the caller: PERSON (a takeover)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HandoffEvent:
    from_agent: str
    to_agent: str
    type: str
    at: float = field(default_factory=time.time)


@dataclass
class SessionState:
    """Everything a worker needs to continue a conversation; lives in the session cache."""

    session_id: str
    scenario: str
    active_agent: str
    transport: str | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    handoffs: list[dict[str, Any]] = field(default_factory=list)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)  # session-scoped agent records
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)  # session-scoped scenarios
    created_at: float = field(default_factory=time.time)
    last_activity_at: float = field(default_factory=time.time)
    previous_session_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionState:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


class SessionStore(Protocol):
    """What the engine needs from persistence. Implementations must not block the loop."""

    async def load(self, session_id: str) -> SessionState | None: ...

    async def save(self, state: SessionState) -> None: ...

    async def append_turn(self, state: SessionState, turn: Turn) -> None: ...

    async def correct_turn(self, state: SessionState, turn: Turn) -> None:
        """Replace the turn written with ``turn.uid`` by ``turn`` (what was heard of a reply written
        when sent); an empty ``content`` removes it (the caller heard none of it)."""
        ...

    async def record_handoff(self, state: SessionState, event: HandoffEvent) -> None: ...

    async def history(self, session_id: str, limit: int | None = None) -> list[Turn]: ...

    async def flush(self, session_id: str | None = None) -> None:
        """Wait until queued history (of ``session_id``, or all) is durable."""


class InMemorySessionStore:
    """Process-local store for tests and benchmarks."""

    def __init__(self) -> None:
        self.states: dict[str, SessionState] = {}
        self.turns: dict[str, list[Turn]] = {}

    async def load(self, session_id: str) -> SessionState | None:
        state = self.states.get(session_id)
        return SessionState.from_dict(state.to_dict()) if state else None

    async def save(self, state: SessionState) -> None:
        state.last_activity_at = time.time()
        self.states[state.session_id] = SessionState.from_dict(state.to_dict())

    async def append_turn(self, state: SessionState, turn: Turn) -> None:
        self.turns.setdefault(state.session_id, []).append(turn)

    async def correct_turn(self, state: SessionState, turn: Turn) -> None:
        turns = self.turns.get(state.session_id, [])
        for i, written in enumerate(turns):
            if written.uid is not None and written.uid == turn.uid:
                if turn.content:
                    turns[i] = turn
                else:
                    del turns[i]
                return

    async def record_handoff(self, state: SessionState, event: HandoffEvent) -> None:
        state.handoffs.append(
            {"from": event.from_agent, "to": event.to_agent, "type": event.type, "at": event.at}
        )
        await self.save(state)

    async def history(self, session_id: str, limit: int | None = None) -> list[Turn]:
        turns = self.turns.get(session_id, [])
        return list(turns[-limit:] if limit else turns)

    async def flush(self, session_id: str | None = None) -> None:
        return None
