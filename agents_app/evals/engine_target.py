"""The ``engine`` target: agent tests in this process, on the runtime's own providers.

The providers are started the way the service's startup steps start them (definitions, tools,
speech, chat, warm-up: :func:`start_engine`); each test gets a conversation from
``runtime.new_conversation`` like a browser socket's, and its events become the service's
envelope messages (:func:`voiceagent.transport.envelope.event_payload`) fed to a
:class:`TurnRecorder`, so expectations mean the same here as over a running service.

A typed turn is ``push_text``; a spoken one is synthesised (the runtime's offline TTS, else
espeak-ng), resampled to 16 kHz and pushed through ``push_audio``, followed by silence until the
engine takes the turn; keypad digits go to ``push_dtmf`` one by one. A turn is over when the agent
is back to listening and its audio has played (the engine's playback clock, ``playback_end``), or
when the conversation ended.

Fast by default: the test client "plays" the agent's audio the moment it is done answering
(``Conversation.played_out``) and pushes speech as fast as the engine takes it, so a suite costs
recognition and synthesis time, not the seconds the agent would talk; ``realtime=True`` keeps the
wall clock of a real caller (20 ms frames paced, the agent's audio heard out).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async

from agents_app.evals.observe import CallerTurn, TurnObservation, TurnRecorder
from voiceagent.transport.envelope import envelope, event_payload

__all__ = ["EngineTarget", "load_definitions", "prepare_session", "start_engine", "stop_engine"]

FRAME = 640  # 20 ms of 16 kHz PCM16
TURN_TIMEOUT_S = 60.0
_started: list[str] = []  # what start_engine started (and stop_engine stops)
_locks: dict[int, asyncio.Lock] = {}


def _runtime():
    from voiceagent.runtime import runtime

    return runtime


def _load_definitions() -> str:
    from django.db import close_old_connections

    from agents_app.catalog import catalog, sync_files

    try:
        sync_files()
        catalog.reload()
    finally:
        close_old_connections()
    return f"{len(catalog.agents)} agents, {len(catalog.scenarios)} scenarios"


async def load_definitions() -> str | None:
    """The agent and scenario definitions served by this process's catalog (loaded once)."""
    from agents_app.catalog import catalog

    if catalog.loaded:
        return None
    return "definitions: " + await sync_to_async(_load_definitions, thread_sensitive=False)()


async def start_engine(*, warm: bool = True) -> list[str]:
    """What a conversation needs in this process, as startup steps 5, 6, 2, 3 and 7 do it; what is
    running already (a service's runtime, a test's providers) is left as it is. Returns notes."""
    from agents_app.catalog import catalog
    from voiceagent.contributions import contributions

    lock = _locks.setdefault(id(asyncio.get_running_loop()), asyncio.Lock())
    notes: list[str] = []
    async with lock:
        runtime = _runtime()
        if not catalog.loaded:
            notes.append(await load_definitions() or "")
        contributions.load_tool_sources()
        if runtime.stt is None or runtime.tts is None:
            notes.append(await runtime.start_speech())
            _started.append("speech")
        if runtime.chat is None:
            notes.append(await runtime.start_chat())
            _started.append("chat")
        if warm and "speech" in _started and "warm" not in _started:
            _started.append("warm")
            notes.append("warmup: " + await runtime.warmup({}))
    return notes


async def stop_engine() -> None:
    """Stop what :func:`start_engine` started; the conversations' history reaches the database."""
    from agents_app.startup import flush_writers

    runtime = _runtime()
    with contextlib.suppress(Exception):
        await flush_writers()
    if "speech" in _started:
        await runtime.stop_stt()
        await runtime.stop_tts()
        runtime.stt = runtime.tts = None
    if "chat" in _started:
        await runtime.stop_chat()
        runtime.chat = None
    _started.clear()


def prepare_session(
    session_id: str,
    scenario: str,
    seed: int | None,
    variables: dict[str, Any],
    transport: str | None = "browser",
) -> dict[str, Any] | None:
    """The session before its conversation: the seeded demo caller made and stored as
    ``POST /api/v1/profiles/generate`` does (the session's caller), the variables in its memory.
    Returns the profile (None without a seed)."""
    if seed is None and not variables:
        return None
    import datetime as dt

    from django.utils import timezone

    from agents_app import sessions
    from agents_app.catalog import catalog
    from agents_app.models import DemoProfile
    from agents_app.profiles import PROFILE_TTL_SECONDS, SCENARIOS, generate_profile, profile_memory

    spec = catalog.scenario(scenario)
    if spec is None:
        raise RuntimeError(f"unknown scenario {scenario!r}")
    state = sessions.create_session(session_id, spec.name, spec.start_agent, transport=transport)
    profile = None
    if seed is not None:
        profile = generate_profile(seed=seed, scenario=scenario if scenario in SCENARIOS else "banking")
        DemoProfile.objects.update_or_create(
            id=profile["id"],
            defaults={
                "scenario": profile.get("scenario", "banking"),
                "seed": profile.get("seed", 0),
                "full_name": profile["full_name"],
                "data": profile,
                "expires_at": timezone.now() + dt.timedelta(seconds=PROFILE_TTL_SECONDS),
                "session_id": session_id,
            },
        )
        state.memory.update(profile_memory(profile))
    state.memory.update(variables)
    sessions.save_state(state)
    return profile


async def speech_16k(text: str) -> bytes:
    """``text`` spoken by the runtime's offline TTS (espeak-ng when it has none), 16 kHz PCM16."""
    import numpy as np

    from voiceagent.conversation.specs import VoiceSpec
    from voiceagent.speech.audio import resample

    tts = _runtime().tts
    own = tts is None or not str(getattr(tts, "name", "")).startswith("offline")
    if own:
        from voiceagent.speech.offline_tts import EspeakTTS

        tts = EspeakTTS(sample_rate=16000, pool_size=1)
    try:
        pcm = b"".join([chunk async for chunk in tts.synthesize(text, VoiceSpec())])
    finally:
        if own:
            await tts.close()
    rate = int(getattr(tts, "sample_rate", 16000))
    if rate == 16000:
        return pcm
    return resample(np.frombuffer(pcm, "<i2"), rate, 16000).astype("<i2").tobytes()


class EngineTarget:
    """One test's conversation on the in-process engine (see the module docstring)."""

    name = "engine"

    def __init__(
        self,
        *,
        turn_timeout_s: float = TURN_TIMEOUT_S,
        quiet_s: float = 0.25,
        realtime: bool = False,
        transport: str | None = "browser",
        session_prefix: str = "eval",
        on_message: Callable[[dict[str, Any]], None] | None = None,
        on_audio: Callable[[bytes, int], None] | None = None,
    ):
        """``on_message`` sees every server message as it happens and ``on_audio`` the agent's
        audio (PCM16, rate) - ``manage.py talk`` prints and plays them; tests leave them unset."""
        self.turn_timeout_s = turn_timeout_s
        self.realtime = realtime
        self.transport = transport
        self.session_prefix = session_prefix
        self.on_message = on_message
        self.on_audio = on_audio
        self.quiet_s = quiet_s  # no event for this long (and audio played): the agent is done
        self.session_id = ""
        self.profile: dict[str, Any] | None = None
        self.conversation: Any = None
        self.recorder = TurnRecorder()
        self._reader: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._state = ""
        self._states = 0  # state changes seen
        self._thinking = 0  # "thinking" states seen
        self._last_event = 0.0
        self._done = False
        self._first_audio: float | None = None
        self._turn_start = time.monotonic()

    async def open(
        self, scenario: str, *, seed: int | None, variables: dict[str, Any], agent: str | None = None
    ) -> str:
        await start_engine()
        self.session_id = f"{self.session_prefix}-{uuid.uuid4().hex[:16]}"
        self.profile = await sync_to_async(prepare_session)(
            self.session_id, scenario, seed, variables, self.transport
        )
        conversation = _runtime().new_conversation(
            self.session_id, scenario, transport=self.transport, agent=agent
        )
        self.conversation = conversation
        self._reader = asyncio.get_running_loop().create_task(self._read(conversation))
        self._begin_turn()
        await conversation.start()
        if conversation.closed:
            raise RuntimeError(f"the conversation closed at once: {conversation.close_reason}")
        return self.session_id

    async def greeting(self) -> TurnObservation:
        return await self._finish_turn(self._states, require_change=False, turn_end=self._turn_start)

    async def turn(self, turn: CallerTurn) -> TurnObservation:
        conversation = self.conversation
        if conversation is None or self._done:
            raise RuntimeError("the conversation has ended")
        states = self._states
        self._begin_turn()
        if turn.dtmf is not None:
            for digit in turn.dtmf.strip():
                conversation.push_dtmf(digit)
            turn_end = time.monotonic()
        elif turn.audio:
            turn_end = await self._speak(await speech_16k(turn.say or ""))
        else:
            turn_end = time.monotonic()
            await conversation.push_text(turn.say or "")
        return await self._finish_turn(states, require_change=True, turn_end=turn_end)

    async def speak(self, pcm16k: bytes) -> TurnObservation:
        """One caller turn of recorded speech (16 kHz PCM16 mono: a WAV file, resampled)."""
        if self.conversation is None or self._done:
            raise RuntimeError("the conversation has ended")
        states = self._states
        self._begin_turn()
        turn_end = await self._speak(pcm16k)
        return await self._finish_turn(states, require_change=True, turn_end=turn_end)

    async def close(self) -> None:
        conversation, self.conversation = self.conversation, None
        if conversation is not None and not conversation.closed:
            await conversation.close("agent test finished")
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(5):
                    await self._reader
            self._reader.cancel()

    # --- internals ----------------------------------------------------------------------------------
    def _begin_turn(self) -> None:
        self.recorder.start()
        self._turn_start = time.monotonic()
        self._first_audio = None

    async def _read(self, conversation: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for event in conversation.events():
                self._last_event = loop.time()
                if event.kind == "Audio":
                    if self._first_audio is None:
                        self._first_audio = time.monotonic()
                    if self.on_audio is not None:
                        self.on_audio(event.pcm, event.sample_rate)
                    continue
                mapped = event_payload(event)
                if mapped is not None:
                    message = envelope(self.session_id, *mapped)
                    self.recorder.add(message)
                    if self.on_message is not None:
                        self.on_message(message)
                if event.kind == "StateChange":
                    self._state = event.state
                    self._states += 1
                    self._thinking += event.state == "thinking"
                self._changed.set()
        finally:
            self._done = True
            self._changed.set()

    def _idle(self, loop: asyncio.AbstractEventLoop) -> float:
        """0 when the agent is done (listening, its audio played, quiet); else how long to wait."""
        now = loop.time()
        if self._state not in ("listening", "paused"):
            return 0.1
        if not self.realtime and self.conversation is not None:
            self.conversation.played_out()  # an instant client: the agent's audio is heard already
        # a margin past the playback clock: the engine commits the agent's words to the history on
        # a timer at playback_end, and the next caller turn must come after them
        playing = self.conversation.playback_end + 0.05 - now if self.conversation is not None else 0.0
        quiet = self.quiet_s - (now - self._last_event)
        return max(playing, quiet, 0.0)

    async def _finish_turn(self, states: int, *, require_change: bool, turn_end: float) -> TurnObservation:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.turn_timeout_s
        while not self._done:
            wait = self._idle(loop)
            if wait <= 0 and (self._states > states or not require_change):
                break
            if loop.time() > deadline:
                raise RuntimeError(f"the agent did not finish its turn within {self.turn_timeout_s:g} s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(max(wait, 0.02), 0.5)):
                    await self._changed.wait()
        obs = self.recorder.observation
        if self._done:
            obs.ended = True
        if self._first_audio is not None:
            obs.first_audio_ms = round(max(0.0, self._first_audio - turn_end) * 1000.0, 1)
        return obs

    async def _speak(self, audio: bytes) -> float:
        """The caller's speech (16 kHz PCM16) as a microphone delivers it; returns when it ended."""
        conversation = self.conversation
        loop = asyncio.get_running_loop()
        start, sent = loop.time(), 0
        silence = bytes(FRAME)

        async def paced(frame: bytes) -> None:
            nonlocal sent
            conversation.push_audio(frame, 16000)
            sent += 1
            if not self.realtime:
                if sent % 25 == 0:
                    await asyncio.sleep(0)  # let the utterance task feed the recogniser
                return
            delay = start + sent * 0.02 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

        for _ in range(10):
            await paced(silence)
        for i in range(0, len(audio), FRAME):
            await paced(audio[i : i + FRAME].ljust(FRAME, b"\0"))
        ended = time.monotonic()
        thinking = self._thinking
        for _ in range(250):  # up to 5 s of silence: the end of turn is the engine's decision
            if self._done or self._thinking > thinking:
                break
            await paced(silence)
        return ended
