"""Outside clients of the service for the acceptance suite, over real sockets (``websockets``).

Each caller has a :class:`Microphone` that sends 20 ms frames paced at real time for the whole
call (silence between utterances, as a live microphone or phone line does) and an :class:`Inbox`
of what the server sent. An utterance's outcome is an :class:`Utterance`: its final transcript or
the ``error`` the caller was shown, then the agent's answers and how much audio they carried.

* :class:`BrowserCaller` - the web page's conversation socket (binary PCM16 16 kHz frames).
* :class:`Dashboard` - the dashboard relay, all sessions.

Callers who come through a provider (the phone media stream, AudioHook) are in provider_clients.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import websockets
from websockets.exceptions import ConnectionClosed

FRAME_S = 0.02
TURN_TIMEOUT_S = 45.0  # a loaded 2-core machine decodes a dozen callers at once: generous, not a target
Predicate = Callable[[dict], bool]


@dataclass
class Utterance:
    """What became of one thing a caller said."""

    sentence: str
    voice: str
    transcript: str | None = None  # the final transcript shown for it
    error: dict | None = None  # or the error shown instead
    answers: list[str] = field(default_factory=list)  # the agents' final responses to it
    answer_audio_s: float = 0.0  # agent audio received after it
    # it interrupted the agent before its transcript: the server said so, with ``barge_in`` (stopped)
    # or a ``duck`` that lowered the agent (issue 30: speech over the agent first ducks it while its
    # words are recognised; under a busy recogniser the stop itself may come with the transcript)
    barged_in: bool = False
    over_agent_s: float = 0.0  # agent audio the caller still had to play when it began speaking


class Inbox:
    """Messages one socket received, in order; waiting for one that matches."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.closed: dict | None = None  # {"code", "reason"} once the server closed
        self._changed = asyncio.Event()

    def add(self, message: dict) -> None:
        self.messages.append(message)
        self._changed.set()

    def close(self, code: int | None, reason: str) -> None:
        self.closed = {"code": code, "reason": reason}
        self._changed.set()

    async def wait(self, predicate: Predicate, start: int = 0, timeout: float = TURN_TIMEOUT_S) -> int:
        """The index of the first message from ``start`` on that matches; fails on timeout or close."""
        seen = start
        async with asyncio.timeout(timeout):
            while True:
                for i in range(seen, len(self.messages)):
                    if predicate(self.messages[i]):
                        return i
                seen = len(self.messages)
                if self.closed is not None:
                    raise AssertionError(f"the socket closed {self.closed} while waiting")
                self._changed.clear()
                await self._changed.wait()


def is_type(type_: str, **payload: Any) -> Predicate:
    return lambda m: m.get("type") == type_ and all(m["payload"].get(k) == v for k, v in payload.items())


def is_final_transcript(m: dict) -> bool:
    return m.get("type") == "transcript" and m["payload"].get("final") is True


class Microphone:
    """Sends ``frame_bytes`` frames every 20 ms of real time: queued speech, else ``silence``."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], silence: bytes) -> None:
        self._send = send
        self.silence = silence
        self._speech: list[tuple[bytes, asyncio.Future]] = []
        self.task: asyncio.Task | None = None
        self.frames_sent = 0

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def say(self, audio: bytes) -> None:
        """Queue ``audio`` and wait until its last frame has gone out."""
        size = len(self.silence)
        audio += self.silence[: (-len(audio)) % size]  # whole frames
        done = asyncio.get_running_loop().create_future()
        for i in range(0, len(audio), size):
            self._speech.append((audio[i : i + size], done if i + size >= len(audio) else None))
        await done

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        with contextlib.suppress(ConnectionClosed):
            while True:
                frame, done = self._speech.pop(0) if self._speech else (self.silence, None)
                await self._send(frame)
                self.frames_sent += 1
                if done is not None:
                    done.set_result(None)
                next_at += FRAME_S
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -1.0:  # the loop stalled for a second: a real microphone drops, not bursts
                    next_at = loop.time()


async def _read_json(ws, inbox: Inbox, on_message: Callable[[dict], None] | None = None) -> None:
    try:
        async for raw in ws:
            if isinstance(raw, str):
                message = json.loads(raw)
                if on_message is not None:
                    on_message(message)
                inbox.add(message)
    except ConnectionClosed:
        pass
    rcvd = ws.close_code, ws.close_reason
    inbox.close(*rcvd)


class BrowserCaller:
    """A person at the web page: the conversation socket, a microphone, ears that play the audio."""

    def __init__(self, ws, voice: str) -> None:
        self.ws = ws
        self.voice = voice
        self.inbox = Inbox()
        self.session_id = ""
        self.playing_until = 0.0  # when the agent audio received so far has finished playing
        self.utterances: list[Utterance] = []
        self.mic = Microphone(ws.send, bytes(640))
        self._reader = asyncio.get_running_loop().create_task(_read_json(ws, self.inbox, self._heard))

    @classmethod
    async def connect(
        cls, base_ws: str, api_key: str, voice: str, scenario: str = "banking"
    ) -> BrowserCaller:
        ws = await websockets.connect(
            f"{base_ws}/browser/conversation?api_key={api_key}", max_size=2**22, open_timeout=30
        )
        caller = cls(ws, voice)
        i = await caller.inbox.wait(is_type("event", name="session_started"), timeout=30)
        caller.session_id = caller.inbox.messages[i]["session_id"]
        await ws.send(json.dumps({"type": "config", "payload": {"scenario": scenario, "sample_rate": 16000}}))
        caller.mic.start()  # the conversation starts with the first audio, as on the page
        return caller

    def _heard(self, message: dict) -> None:
        if message.get("type") == "audio":
            payload = message["payload"]
            seconds = len(payload["data"]) * 3 / 4 / 2 / payload["sample_rate"]
            self.playing_until = max(self.playing_until, time.monotonic()) + seconds

    async def quiet(self, start: int = 0, played: bool = True) -> None:
        """Wait for the agents' answer from message ``start`` on, until they listen again and (if
        ``played``) their audio has played out: a caller who spoke earlier would barge in."""
        answer = await self.inbox.wait(is_type("response", final=True), start)
        await self.inbox.wait(is_type("event", name="state", state="listening"), answer)
        if played:
            await asyncio.sleep(max(0.0, self.playing_until - time.monotonic()) + 0.2)

    async def say(self, sentence: str, audio: bytes) -> Utterance:
        """Speak, then wait for the transcript (or error) and the agents' whole answer - its words,
        not its playing out: the next thing said may interrupt it, as impatient callers do."""
        utterance = Utterance(sentence, self.voice)
        self.utterances.append(utterance)
        start = len(self.inbox.messages)
        utterance.over_agent_s = max(0.0, self.playing_until - time.monotonic())
        await self.mic.say(audio)
        i = await self.inbox.wait(lambda m: is_final_transcript(m) or m.get("type") == "error", start)
        message = self.inbox.messages[i]
        if message["type"] == "error":
            utterance.error = message["payload"]
            return utterance
        utterance.transcript = message["payload"]["text"]
        utterance.barged_in = any(_yielded(m) for m in self.inbox.messages[start:i])
        await self.quiet(i, played=False)
        after = self.inbox.messages[i:]
        utterance.answers = [m["payload"]["text"] for m in after if is_type("response", final=True)(m)]
        utterance.answer_audio_s = sum(
            len(m["payload"]["data"]) * 3 / 8 / m["payload"]["sample_rate"]
            for m in after
            if m["type"] == "audio"
        )
        utterance.error = next((m["payload"] for m in after if m["type"] == "error"), None)
        return utterance

    def errors(self) -> list[dict]:
        return [m["payload"] for m in self.inbox.messages if m.get("type") == "error"]

    async def close(self) -> None:
        await self.mic.stop()
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)


class Dashboard:
    """The dashboard relay of all sessions (or one), collecting everything it is sent."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.inbox = Inbox()
        self._reader = asyncio.get_running_loop().create_task(_read_json(ws, self.inbox))

    @classmethod
    async def connect(cls, base_ws: str, api_key: str, session_id: str | None = None) -> Dashboard:
        query = f"api_key={api_key}" + (f"&session_id={session_id}" if session_id else "")
        ws = await websockets.connect(f"{base_ws}/browser/dashboard/relay?{query}", max_size=2**22)
        dashboard = cls(ws)
        await dashboard.inbox.wait(is_type("event", name="relay_connected"), timeout=30)
        return dashboard

    def of(self, session_id: str) -> list[dict]:
        return [m for m in self.inbox.messages if m.get("session_id") == session_id]

    def mentions(self, session_id: str, start: int = 0) -> bool:
        """Whether any message from ``start`` on names ``session_id`` (as its sender or in a list)."""
        return any(session_id in json.dumps(m) for m in self.inbox.messages[start:])

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)


def find(messages: list[dict], predicate: Predicate, start: int) -> int | None:
    return next((i for i in range(start, len(messages)) if predicate(messages[i])), None)


def _yielded(message: dict) -> bool:
    """The agent gave way to the caller: stopped (``barge_in``) or lowered (``duck``, gain below 0)."""
    if is_type("event", name="barge_in")(message):
        return True
    payload = message.get("payload") or {}
    return is_type("event", name="duck")(message) and (payload.get("gain_db") or 0) < 0
