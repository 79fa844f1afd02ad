"""A caller who types, and what the service remembers: the fault suite's view from outside.

The caller is the acceptance suite's :class:`~clients.BrowserCaller` (the real conversation socket,
its inbox, its ears keeping the playback clock of the audio it received); turns are typed
(``text`` messages, the same path as a final transcript), so every case is about the fault, not
about speech recognition. What the caller heard is compared with ``GET /sessions/{id}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx
import websockets
from clients import BrowserCaller, Predicate, is_type
from deployments import Deployment

FALLBACK = "I'm sorry, I'm having trouble answering right now. Could you say that again?"
TURN_TIMEOUT_S = 45.0  # generous: only against hangs
FATAL = ("start_failed", "internal", "unknown_scenario", "bad_config")
HISTORY_TIMEOUT_S = 30.0


@dataclass
class Reply:
    """What came back after one typed turn."""

    said: str
    answers: list[str] = field(default_factory=list)  # final responses
    deltas: list[str] = field(default_factory=list)  # the streamed words, in order
    errors: list[dict] = field(default_factory=list)
    audio_s: float = 0.0

    @property
    def codes(self) -> list[str]:
        return [e.get("code", "") for e in self.errors]


async def open_caller(
    deployment: Deployment, *, session_id: str | None = None, scenario: str = "default", mode: str = "cascade"
) -> BrowserCaller:
    """Open the conversation socket, configure it and start the conversation (the greeting follows)."""
    query = f"api_key={deployment.api_key}" + (f"&session_id={session_id}" if session_id else "")
    ws = await websockets.connect(
        f"{deployment.ws}/browser/conversation?{query}", max_size=2**22, open_timeout=30
    )
    caller = BrowserCaller(ws, voice="typed")
    i = await caller.inbox.wait(is_type("event", name="session_started"), timeout=30)
    caller.session_id = caller.inbox.messages[i]["session_id"]
    await send(caller, "config", {"scenario": scenario, "mode": mode})
    await send(caller, "control", {"action": "start"})
    return caller


async def send(caller: BrowserCaller, type_: str, payload: dict) -> None:
    await caller.ws.send(json.dumps({"type": type_, "payload": payload}))


def is_error(m: dict) -> bool:
    return m.get("type") == "error"


def settled(m: dict) -> bool:
    return is_type("event", name="state", state="listening")(m)


async def heard_out(caller: BrowserCaller) -> None:
    """Wait until the agent audio received so far has played (plus a little)."""
    await asyncio.sleep(max(0.0, caller.playing_until - time.monotonic()) + 0.3)


async def type_turn(caller: BrowserCaller, text: str, answered: bool = True) -> Reply:
    """Type ``text`` and wait for the end of the turn: with ``answered``, a final response then
    ``listening``; otherwise an ``error`` then ``listening``. Then the answer is heard out."""
    start = len(caller.inbox.messages)
    await send(caller, "text", {"text": text})
    await wait_turn(caller, start, answered)
    return reply_since(caller, text, start)


def fatal(m: dict) -> bool:
    """An error that means no turn is coming (the conversation did not start, the session broke)."""
    return is_error(m) and (m.get("payload") or {}).get("code") in FATAL


async def wait_turn(caller: BrowserCaller, start: int, answered: bool = True) -> None:
    first: Predicate = is_type("response", final=True) if answered else is_error
    i = await caller.inbox.wait(lambda m: fatal(m) or first(m), start, timeout=TURN_TIMEOUT_S)
    if fatal(caller.inbox.messages[i]):  # fail now, not at the timeout
        raise AssertionError(f"the turn cannot end: {caller.inbox.messages[i]['payload']}")
    await caller.inbox.wait(settled, i, timeout=TURN_TIMEOUT_S)
    await heard_out(caller)


def reply_since(caller: BrowserCaller, said: str, start: int) -> Reply:
    reply = Reply(said)
    for m in caller.inbox.messages[start:]:
        kind, payload = m.get("type"), m.get("payload") or {}
        if kind == "response":
            (reply.answers if payload.get("final") else reply.deltas).append(payload["text"])
        elif kind == "error":
            reply.errors.append(payload)
        elif kind == "audio":
            reply.audio_s += len(payload["data"]) * 3 / 8 / payload["sample_rate"]
    return reply


async def history(deployment: Deployment, session_id: str) -> list[dict]:
    async with httpx.AsyncClient(timeout=15) as http:
        response = await http.get(f"{deployment.http}/sessions/{session_id}", headers=deployment.auth)
    assert response.status_code == 200, response.text
    return response.json()["history"]


def _words(text: str) -> str:
    return " ".join(text.split())


def _subsequence(turns: list[dict], heard: list[tuple[str, str]]) -> bool:
    """Whether every heard ``(role, text)`` is in ``turns`` in order: a user turn word for word, an
    assistant turn containing the text (a cut answer holds its spoken start and the fallback)."""
    i = 0
    for role, text in heard:
        while i < len(turns):
            turn = turns[i]
            i += 1
            content = _words(turn["content"])
            if turn["role"] == role and (
                content == _words(text) if role == "user" else _words(text) in content
            ):
                break
        else:
            return False
    return True


async def assert_in_history(
    deployment: Deployment, session_id: str, heard: list[tuple[str, str]], timeout: float = HISTORY_TIMEOUT_S
) -> list[dict]:
    """Every turn the caller heard is in ``GET /sessions/{id}``, in order (waited for: the history is
    written once the audio has played, by a background writer). The history, for more checks."""
    deadline = time.monotonic() + timeout
    while True:
        turns = await history(deployment, session_id)
        if _subsequence(turns, heard):
            return turns
        if time.monotonic() > deadline:
            shown = "\n".join(f"  {t['role']}: {t['content']!r}" for t in turns)
            raise AssertionError(f"the history lacks what the caller heard {heard}:\n{shown}")
        await asyncio.sleep(0.3)
