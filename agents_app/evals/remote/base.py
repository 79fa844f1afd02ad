"""What the three remote targets share: the service's messages, a microphone paced in real time,
the seeded demo caller, and when a turn is over.

A turn is over when the agent said something final, is back to ``listening`` (no tool call or
handoff after its last words) and its audio has had time to play at the caller's end; or when the
conversation ended. A turn that gets no answer within :data:`TURN_TIMEOUT_S` is an error the
runner shows (:class:`NoAnswer`, the test an ``error``), never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import websockets
from websockets.exceptions import ConnectionClosed

from agents_app.evals.observe import CallerTurn, TurnObservation, TurnRecorder

TURN_TIMEOUT_S = 30.0
PLAYOUT_MAX_S = 120.0  # once answered: a long answer (three transactions read out) plays this long at most
FRAME_S = 0.02
SPEECH_TAIL_S = 1.0  # silence after an utterance: the service's end of turn
PLAYED_MARGIN_S = 0.3  # after the last agent audio has played
# an answer whose audio has not started yet when the agent is back to listening: the phone and
# AudioHook pace it out in real time after the words (a turn without any audio waits this long)
AUDIO_GRACE_S = 3.0
CONNECT_TIMEOUT_S = 30.0


class TargetError(RuntimeError):
    """The service could not be reached or refused the conversation; the message says why."""


class NoAnswer(TargetError):
    """A turn (or the greeting) got no answer within :data:`TURN_TIMEOUT_S`: the test is an error
    with this message, never a hang."""


def base_urls(url: str) -> tuple[str, str]:
    """``http(s)://host:port[/prefix]`` -> (REST base ``.../api/v1``, WebSocket base ``ws(s)://.../api/v1``)."""
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise TargetError(f"--url must be http(s)://host:port of the running service, not {url!r}")
    path = parts.path if parts.path.endswith("/api/v1") else parts.path + "/api/v1"
    secure = parts.scheme in ("https", "wss")
    http = urlunsplit(("https" if secure else "http", parts.netloc, path, "", ""))
    ws = urlunsplit(("wss" if secure else "ws", parts.netloc, path, "", ""))
    return http, ws


def is_final_response(message: dict[str, Any]) -> bool:
    return message.get("type") == "response" and bool((message.get("payload") or {}).get("final"))


def event_name(message: dict[str, Any]) -> str | None:
    return (message.get("payload") or {}).get("name") if message.get("type") == "event" else None


class Microphone:
    """Sends one frame every 20 ms of real time for the whole conversation: queued speech, else
    silence (a live microphone or phone line never goes quiet on the wire)."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], silence: bytes) -> None:
        self._send = send
        self.silence = silence
        self._speech: list[tuple[bytes, asyncio.Future | None]] = []
        self.task: asyncio.Task | None = None
        self.failed: BaseException | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def say(self, audio: bytes) -> None:
        """Queue ``audio`` and wait until its last frame has gone out."""
        size = len(self.silence)
        audio += self.silence[: (-len(audio)) % size]
        done = asyncio.get_running_loop().create_future()
        for i in range(0, len(audio), size):
            self._speech.append((audio[i : i + size], done if i + size >= len(audio) else None))
        await done

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        for _, done in self._speech:
            if done is not None and not done.done():
                done.cancel()
        self._speech.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        try:
            while True:
                frame, done = self._speech.pop(0) if self._speech else (self.silence, None)
                await self._send(frame)
                if done is not None and not done.done():
                    done.set_result(None)
                next_at += FRAME_S
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -1.0:  # the loop stalled: a real microphone drops, it does not burst
                    next_at = loop.time()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the socket closed: whoever waits on speech hears why
            self.failed = exc
            for _, pending in self._speech:
                if pending is not None and not pending.done():
                    pending.set_exception(TargetError(f"the connection closed while speaking: {exc}"))


class RemoteTarget:
    """A conversation on a running service; subclasses hold one transport's wire."""

    name = "remote"

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = url
        self.api_key = api_key or ""
        self.http_base, self.ws_base = base_urls(url)
        self.session_id = ""
        self.profile: dict[str, Any] | None = None  # the seeded demo caller, for the runner's templates
        self.recorder = TurnRecorder()
        self.messages: list[dict[str, Any]] = []  # every envelope message, in the browser's names
        self.closed: str | None = None  # why the conversation's socket closed
        self.playing_until = 0.0  # when the agent audio received so far has played at our end
        self.audio_times: list[float] = []  # arrival of each agent audio message
        self._changed = asyncio.Event()
        self.ws: Any = None  # the conversation's socket, the microphone on it, its reader
        self.mic: Microphone | None = None
        self._reader: asyncio.Task | None = None
        self._greeting: TurnObservation | None = None
        self._turn_started = 0.0

    # --- what subclasses call -------------------------------------------------------------------------
    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def received(self, message: dict[str, Any]) -> None:
        """An envelope message of this session (browser names)."""
        self.messages.append(message)
        self.recorder.add(message)
        self._changed.set()

    def heard_audio(self, seconds: float) -> None:
        """Agent audio of ``seconds`` arrived; it plays after what came before it."""
        now = time.monotonic()
        self.audio_times.append(now)
        self.playing_until = max(self.playing_until, now) + seconds
        if self.recorder.observation.first_audio_ms is None:
            self.recorder.add({"type": "audio", "payload": {}})
        self._changed.set()

    async def open_socket(self, url: str, wire: str, **options: Any) -> Any:
        """A WebSocket to the service; ``wire`` names it in the error when it cannot be opened."""
        try:
            return await websockets.connect(url, max_size=2**23, open_timeout=CONNECT_TIMEOUT_S, **options)
        except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
            raise TargetError(f"cannot open the {wire} at {self.ws_base}: {exc}") from None

    async def send_json(self, message: dict[str, Any], wire: str) -> None:
        """``message`` on the conversation's socket; a closed one is a :class:`TargetError` naming
        ``wire``."""
        try:
            await self.ws.send(dumps(message))
        except ConnectionClosed as exc:
            raise TargetError(f"the {wire} closed: {exc}") from None

    async def say_into_mic(self, audio: bytes, tail: bytes) -> float:
        """``audio`` into the microphone, then ``tail`` (silence: the service's end of turn);
        returns when the speech ended."""
        assert self.mic is not None
        await self.mic.say(audio)
        spoken = time.monotonic()
        await self.mic.say(tail)
        return spoken

    async def close_wire(self) -> None:
        """The microphone, the socket and its reader, in that order."""
        if self.mic is not None:
            await self.mic.stop()
        if self.ws is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def until_started(self, started: Callable[[], bool], wire: str) -> None:
        """Wait for ``started()`` (the service's first word on ``wire``); a refusal or 30 s of
        silence is a :class:`TargetError` saying which."""
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                while not started():
                    if self.closed is not None:
                        raise TargetError(f"the service refused the {wire}: {self.closed}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TargetError(f"the {wire} said nothing within {CONNECT_TIMEOUT_S:g} s") from None

    def start_reading(self) -> None:
        """The conversation's socket is open: its messages go to :meth:`on_text` and
        :meth:`on_binary` from now on."""
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def on_text(self, message: dict[str, Any]) -> None:
        """A JSON message of the service's, parsed (each wire its own)."""

    def on_binary(self, data: bytes) -> None:
        """A binary frame of the service's (only AudioHook sends any: audio)."""

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                if isinstance(raw, str):
                    await self.on_text(json.loads(raw))
                else:
                    self.on_binary(raw)
        except ConnectionClosed:
            pass
        self.lost(f"closed {self.ws.close_code} {self.ws.close_reason or ''}".strip())

    def lost(self, why: str) -> None:
        """The conversation's socket closed."""
        if self.closed is None:
            self.closed = why
        self._changed.set()

    async def seed(self, seed: int | None, scenario: str, session_id: str) -> None:
        """The demo caller for ``session_id`` (``POST /profiles/generate``), before the conversation
        starts: the service reads the caller from the session when the conversation begins."""
        if seed is None:
            return
        body = {"seed": seed, "scenario": scenario, "session_id": session_id}
        async with httpx.AsyncClient(timeout=30, headers=self.headers) as http:
            response = await http.post(f"{self.http_base}/profiles/generate", json=body)
        if response.status_code != 201:
            raise TargetError(
                f"POST /profiles/generate answered {response.status_code}: {response.text[:300]}"
            )
        self.profile = response.json()

    async def wait_answer(self, start: int, timeout: float = TURN_TIMEOUT_S) -> TurnObservation:
        """Messages from index ``start`` on, until the turn is over; the recorder's observation."""
        try:
            async with asyncio.timeout(timeout) as bound:
                while True:
                    if self._over(start):  # answered: its playing out is not "no answer"
                        bound.reschedule(asyncio.get_running_loop().time() + PLAYOUT_MAX_S)
                        await self._played()
                        if self._over(start):
                            break
                        continue
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise NoAnswer(f"error: no answer within {timeout:g} s{self._heard()}") from None
        return self.recorder.observation

    def _heard(self) -> str:
        """What the turn that got no answer did bring, for the error's reader."""
        obs = self.recorder.observation
        parts = [f"heard {obs.transcript!r}"] if obs.transcript else ["no transcript"]
        parts.append(f"the agent said {obs.reply[:120]!r}" if obs.reply else "no final response")
        states = [m["payload"].get("state") for m in obs.messages if event_name(m) == "state"]
        if states:
            parts.append(f"last state {states[-1]}")
        parts += [f"error {e.get('code')}: {e.get('message')}" for e in obs.errors[:2]]
        return f" ({'; '.join(parts)})"

    def _over(self, start: int) -> bool:
        if self.closed is not None or self.recorder.observation.ended:
            self.recorder.observation.ended = True
            return True
        answered, listening = False, False
        for message in self.messages[start:]:
            name = event_name(message)
            if is_final_response(message):
                answered = True
            elif name in ("tool_call", "handoff"):
                answered = False  # another round follows: the tool's answer, the new agent
            elif name == "state":
                listening = message["payload"].get("state") == "listening"
        return answered and listening

    async def _played(self) -> None:
        """Until the agent audio of this turn has started (or :data:`AUDIO_GRACE_S` went by without
        any) and played out, no more arriving meanwhile."""
        grace_until = time.monotonic() + AUDIO_GRACE_S
        while self.closed is None:
            now = time.monotonic()
            if not self.audio_times or self.audio_times[-1] < self._turn_started:
                left = grace_until - now  # no audio in this turn yet
            else:
                left = self.playing_until + PLAYED_MARGIN_S - now
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    self._changed.clear()
                    await self._changed.wait()

    # --- the Target protocol ----------------------------------------------------------------------------
    async def greeting(self) -> TurnObservation:
        assert self._greeting is not None, "open() first"
        return self._greeting

    async def turn(self, turn: CallerTurn) -> TurnObservation:
        if self.closed is not None:
            obs = self.recorder.start()
            obs.ended = True
            obs.errors.append({"code": "closed", "message": f"the conversation was over: {self.closed}"})
            return obs
        start = len(self.messages)
        obs = self.recorder.start()
        self._turn_started = time.monotonic()
        sent_at = await self.send_turn(turn)  # a TargetError: the socket is gone, the test an error
        obs = await self.wait_answer(start)
        firsts = [t for t in self.audio_times if t >= sent_at]
        obs.first_audio_ms = round((firsts[0] - sent_at) * 1000.0, 1) if firsts else None
        return obs

    async def send_turn(self, turn: CallerTurn) -> float:
        """Send the caller's turn; returns when (``time.monotonic()``) the caller finished it."""
        raise NotImplementedError

    def begin_open(self) -> None:
        """``open`` starts: the greeting's observation counts from here (its first audio too)."""
        self.recorder.start()
        self.messages.clear()
        self._turn_started = time.monotonic()

    async def finish_open(self) -> None:
        """The greeting, heard out: the first turn's observation."""
        self._greeting = await self.wait_answer(0)


def dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))
