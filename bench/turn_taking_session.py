"""One labelled case of bench/bench_turn_taking.py played against the real cascade engine.

The engine (:class:`~voiceagent.conversation.engine.Conversation`) runs with the real offline
recogniser and TTS and the VAD under test; the chat is scripted. The caller's audio is played in
real time, 20 ms frames paced by the loop clock, with the agent's own audio mixed back in as phone
echo when the case says so (delayed, attenuated, through the phone band too). Everything is read
from the engine's public surface: its events (``Audio``/``StopAudio`` response ids,
``StateChange``, final ``Transcript``), ``turn_ended_at`` (the end-of-turn decision), and the
playback clock (``emit_audio``'s start times and durations), recorded by wrapping ``emit_audio``,
and its ``Duck`` events (the gain every transport applies to what it has not sent yet; the echo
mixed back is ducked with it).
"""

from __future__ import annotations

import asyncio
import bisect
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr
from turn_taking_corpus import RATE, Case, PhoneBand, floor_noise, speech_bounds

from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.providers import ChatChunk, ChatRequest
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec
from voiceagent.conversation.testing import ScriptedChat, StaticDirectory
from voiceagent.conversation.tools import ToolRegistry
from voiceagent.conversation.turn_taking import TurnTaking

FRAME = RATE // 50  # 20 ms
LEAD_S = 0.3  # silence before the caller speaks
IDLE_S = 1.5  # agent idle, caller silent and nothing being recognised this long: the case is over
CAP_S = 35.0  # no case runs longer (an agent answering its own echo would talk forever)
ANSWER_WAIT_S = 30.0  # the trigger's answer must begin within this after the caller stops

LONG_ANSWER = (
    "Sure. We have three kinds of accounts. The everyday account has no monthly fee and comes with "
    "a debit card. The savings account pays interest every month, and the premium account adds "
    "travel insurance and a personal advisor."
)
SHORT_REPLY = "Sure, I can help with that."
TOOL_ANSWER = "Your savings balance is two thousand four hundred and twelve dollars."


def make_registry() -> ToolRegistry:
    """The slow tool of the dead-air case (its delay comes with the call)."""
    registry = ToolRegistry()

    @registry.tool()
    async def check_balance(account: str, delay_s: float = 3.5) -> dict:
        """Look up an account's balance (slow: a core banking call).

        Args:
            account: which account
            delay_s: how long the lookup takes
        """
        await asyncio.sleep(delay_s)
        return {"account": account, "balance": 2412.0}

    return registry


class RecordingChat(ScriptedChat):
    """The scripted chat, noting when each request came and its last user message: a request
    with a new caller message is a new turn the engine took."""

    def __init__(self, script: list, default: str):
        super().__init__(script, default)
        self.calls: list[tuple[float, str]] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        users = [m.get("content") or "" for m in request.messages if m.get("role") == "user"]
        self.calls.append((asyncio.get_running_loop().time(), users[-1] if users else ""))
        async for chunk in super().stream(request):
            yield chunk


class _CountedStream:
    def __init__(self, owner: CountingSTT, stream: Any):
        self.owner, self.stream, self.done = owner, stream, False

    async def push(self, pcm16: bytes) -> None:
        await self.stream.push(pcm16)

    async def finish(self) -> str:
        began = time.perf_counter()
        try:
            return await self.stream.finish()
        finally:
            self.owner.finish_s.append(time.perf_counter() - began)
            self._close()

    async def finish_at_pause(self) -> str:
        """The last pause's decode as the final (the engine's choice when the turn ended with that
        decode still on its way): counted and closed like :meth:`finish`. Left to ``__getattr__``,
        the stream stayed open here, so no case was ever over: each ran to CAP_S and heard the
        agent's re-prompts, counted as silence in its answer (a slow machine ends most turns so)."""
        began = time.perf_counter()
        try:
            return await (getattr(self.stream, "finish_at_pause", None) or self.stream.finish)()
        finally:
            self.owner.finish_s.append(time.perf_counter() - began)
            self._close()

    async def cancel(self) -> None:
        try:
            await self.stream.cancel()
        finally:
            self._close()

    def _close(self) -> None:
        if not self.done:
            self.done = True
            self.owner.open_streams -= 1

    def hint_pause(self, on_text: Any) -> bool:
        """The recogniser's pause hypothesis, its latency counted (ask -> answer)."""
        hint = getattr(self.stream, "hint_pause", None)
        if hint is None:
            return False
        began = time.perf_counter()

        def answered(*args: Any) -> None:
            self.owner.hint_s.append(time.perf_counter() - began)
            on_text(*args)

        return hint(answered)

    def __getattr__(self, name: str) -> Any:  # the stream's other optional abilities
        return getattr(self.stream, name)


class CountingSTT:
    """One conversation's view of the shared recogniser: how many of its utterances are still
    being recognised (a case is not over while one is), and how long each final decode took."""

    def __init__(self, stt: Any):
        self.stt = stt
        self.open_streams = 0
        self.finish_s: list[float] = []
        self.hint_s: list[float] = []  # pause hypotheses: ask -> answer

    async def open(self, language: str, on_interim: Any) -> _CountedStream:
        stream = await self.stt.open(language, on_interim)
        self.open_streams += 1
        return _CountedStream(self, stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stt, name)


class RecordingTurnModel:
    """One conversation's view of the shared turn model: the probabilities it answered, with the
    loop time of each answer (the details file shows them next to the decisions)."""

    def __init__(self, model: Any, answers: list[tuple[float, float | None]]):
        self.model, self.answers = model, answers
        self.name = model.name

    def predict(self, pcm16: bytes, on_result: Any, wanted: Any = None) -> bool:
        loop = asyncio.get_running_loop()

        def answered(probability: float | None) -> None:
            self.answers.append((loop.time(), probability))
            on_result(probability)

        return self.model.predict(pcm16, answered, wanted)


class TimedVAD:
    """The VAD under test, its time per frame counted (everything else passes through)."""

    def __init__(self, vad: Any):
        self.vad = vad
        self.ns = 0
        self.frames = 0

    def is_speech(self, frame: bytes) -> bool:
        began = time.perf_counter_ns()
        result = self.vad.is_speech(frame)
        self.ns += time.perf_counter_ns() - began
        self.frames += 1
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.vad, name)


@dataclass
class Played:
    start: float
    end: float
    rid: int
    pcm: np.ndarray | None  # float32 at 16 kHz, kept only when the case has echo
    crc: int = 0  # of the chunk's bytes: the same audio said twice has the same


@dataclass
class Record:
    """What happened in one case, in loop time."""

    t0: float = 0.0
    audio: list[Played] = field(default_factory=list)
    stops: list[tuple[float, int]] = field(default_factory=list)
    ducks: list[tuple[float, float]] = field(default_factory=list)  # (loop time, gain dB) from Duck events
    finals: list[tuple[float, str]] = field(default_factory=list)
    states: list[tuple[float, str]] = field(default_factory=list)
    decisions: list[float] = field(default_factory=list)  # turn_ended_at values, as they change
    trigger_start: float = 0.0
    trigger_speech: tuple[float, float] = (0.0, 0.0)
    answer_start: float | None = None
    stim_start: float | None = None
    stim_speech: tuple[float, float] | None = None
    end: float = 0.0
    lag_ms: list[float] = field(default_factory=list)
    harness_s: float = 0.0
    invalid: str | None = None
    capped: bool = False
    pushes: list[tuple[float, float]] = field(default_factory=list)  # (loop time pushed, frame's end)
    chat_calls: list[tuple[float, str]] = field(default_factory=list)
    stt_finish_s: list[float] = field(default_factory=list)
    turn_model_answers: list[tuple[float, float | None]] = field(default_factory=list)  # (loop time, p)
    hint_s: list[float] = field(default_factory=list)  # the recogniser's pause hypotheses: ask -> answer

    def caller_time(self, t: float) -> float:
        """Loop time ``t`` on the caller's clock (the frames' schedule): when the loop runs late,
        frames are pushed after their time and what the engine decides on a frame belongs to it."""
        i = bisect.bisect_right(self.pushes, (t, float("inf"))) - 1
        if i < 0:
            return t
        pushed, frame_end = self.pushes[i]
        return frame_end + min(t - pushed, FRAME / RATE)

    def audio_end(self) -> float:
        return max((p.end for p in self.audio), default=0.0)

    def gain_db(self, t: float) -> float:
        """The agent's gain on the wire at ``t`` (0 unless a ``Duck`` event lowered it)."""
        gain = 0.0
        for at, db in self.ducks:
            if at > t:
                break
            gain = db
        return gain

    def cut(self, at: float) -> None:
        """A StopAudio at ``at``: the transport flushes what had not played."""
        for p in self.audio:
            if p.end > at:
                p.end = max(p.start, at)

    def echo(self, start: float, n: int) -> np.ndarray:
        """The agent audio that played from ``start`` for ``n`` samples (float32, 16 kHz)."""
        out = np.zeros(n, np.float32)
        stop = start + n / RATE
        for p in self.audio:
            if p.pcm is None or p.end <= start or p.start >= stop:
                continue
            a = max(0, round((start - p.start) * RATE))  # into p
            b = max(0, round((p.start - start) * RATE))  # into out
            limit = min(len(p.pcm), round((p.end - p.start) * RATE))
            part = p.pcm[a:limit][: n - b]
            out[b : b + len(part)] += part
        if self.ducks and (db := self.gain_db(start)):  # what the wire carried (ducked) comes back
            out *= 10 ** (db / 20)
        return out


def settings_config(turn_taking: TurnTaking, silence_ms: int) -> EngineConfig:
    """The engine as served, but without the answer begun in a pause (REPLY_HEAD_START): this
    bench reads the chat's requests as the turns the engine took (a request before the caller's
    speech ended is a premature end; the first and second time a tool's wait), and a head start
    asks the model in a pause that may not end the turn. With the scripted chat it could change
    no latency here; bench_head_start.py measures it."""
    return EngineConfig(
        silence_timeout_ms=lambda: silence_ms, turn_taking=lambda: turn_taking, head_start=lambda: False
    )


def script_for(case: Case) -> list:
    if case.category in ("over_agent", "interruption"):
        return [LONG_ANSWER]
    if case.category == "tool":
        return [[("check_balance", {"account": "savings", "delay_s": case.tool_delay_s})], TOOL_ANSWER]
    return []


async def run_case(
    case: Case,
    *,
    stt: Any,
    tts: Any,
    vad: TimedVAD,
    registry: ToolRegistry,
    config: EngineConfig,
    turn_model: Any = None,
) -> Record:
    """Play ``case`` against a new conversation in real time; return what happened."""
    loop = asyncio.get_running_loop()
    agent = AgentSpec(name="agent", prompt_template="You are a bank's assistant.", tools=("check_balance",))
    scenario = ScenarioSpec(name="bench", start_agent="agent", agents=("agent",))
    chat = RecordingChat(script_for(case), SHORT_REPLY)
    counting = CountingSTT(stt)
    answers: list[tuple[float, float | None]] = []
    conv = Conversation(
        f"tt-{case.id}-{case.sample_rate}",
        scenario="bench",
        directory=StaticDirectory([agent], scenario, registry),
        store=InMemorySessionStore(),
        stt=counting,
        tts=tts,
        chat=chat,
        vad=vad,
        registry=registry,
        config=config,
        turn_model=None if turn_model is None else RecordingTurnModel(turn_model, answers),
    )
    rec = Record()
    rec.turn_model_answers = answers
    keep_pcm = case.echo is not None
    emit = conv.emit_audio

    def emit_audio(pcm: bytes, sample_rate: int, rid: int) -> float:
        start = emit(pcm, sample_rate, rid)
        data = None
        if keep_pcm:
            x = np.frombuffer(pcm, "<i2").astype(np.float32)
            data = x if sample_rate == RATE else soxr.resample(x, sample_rate, RATE).astype(np.float32)
        rec.audio.append(Played(start, start + len(pcm) / 2 / sample_rate, rid, data, zlib.crc32(pcm)))
        return start

    conv.emit_audio = emit_audio  # type: ignore[method-assign]
    offset = loop.time() - time.time()  # event ts (wall) -> loop time

    async def read() -> None:
        async for event in conv.events():
            at = event.ts + offset
            if event.kind == "StopAudio":
                rec.stops.append((at, event.response_id))
                rec.cut(at)
                if rec.ducks:
                    rec.ducks.append((at, 0.0))  # a stop ends a duck on every wire
            elif event.kind == "Duck":
                rec.ducks.append((at, event.gain_db))
            elif event.kind == "Transcript" and event.final and event.speaker == "user":
                rec.finals.append((at, event.text))
            elif event.kind == "StateChange":
                rec.states.append((at, event.state))

    await conv.start()
    reader = loop.create_task(read())
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    phone = PhoneBand() if case.sample_rate == 8000 else None
    rec.t0 = loop.time()
    rec.trigger_start = rec.t0 + LEAD_S
    a, b = speech_bounds(case.trigger)
    rec.trigger_speech = (rec.trigger_start + a, rec.trigger_start + b)
    segments: list[tuple[float, np.ndarray]] = [(rec.trigger_start, case.trigger)]
    caller_end = rec.trigger_start + len(case.trigger) / RATE
    delay, gain = (case.echo[0], 10 ** (-case.echo[1] / 20)) if case.echo else (0.0, 0.0)
    last_decision = conv.turn_ended_at
    next_at = rec.t0
    quiet_since: float | None = None
    try:
        while True:
            next_at += FRAME / RATE
            wait = next_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            else:
                rec.lag_ms.append(-wait * 1000)
            began = time.thread_time()
            start = next_at - FRAME / RATE
            x = floor_noise(FRAME, rng)
            for at, clip in segments:
                i = round((start - at) * RATE)
                if -FRAME < i < len(clip):
                    part = clip[max(0, i) : i + FRAME]
                    x[max(0, -i) : max(0, -i) + len(part)] += part
            if gain:
                x += rec.echo(start - delay, FRAME) * gain
            pcm = phone(x) if phone is not None else np.clip(x, -32768, 32767).astype("<i2").tobytes()
            rec.harness_s += time.thread_time() - began
            rec.pushes.append((loop.time(), next_at))
            conv.push_audio(pcm, case.sample_rate)
            now = loop.time()
            if conv.turn_ended_at != last_decision and conv.turn_ended_at is not None:
                last_decision = conv.turn_ended_at
                # when it was decided, in caller time: on this frame (its end) with an inline VAD,
                # a few ms after the previous one's with a VAD judging on its own thread
                rec.decisions.append(rec.caller_time(conv.turn_ended_at))
            if rec.answer_start is None and rec.audio:
                rec.answer_start = rec.audio[0].start
                if case.stimulus is not None:
                    rec.stim_start = rec.answer_start + case.stimulus_at
                    sa, sb = speech_bounds(case.stimulus)
                    rec.stim_speech = (rec.stim_start + sa, rec.stim_start + sb)
                    segments.append((rec.stim_start, case.stimulus))
                    caller_end = max(caller_end, rec.stim_start + len(case.stimulus) / RATE)
            if rec.answer_start is None and now > caller_end + ANSWER_WAIT_S:
                rec.invalid = "the agent never answered"
                break
            if case.echo and rec.answer_start is not None:
                caller_end = max(caller_end, rec.answer_start + 1.0)
            state = rec.states[-1][1] if rec.states else "listening"
            idle = (
                now > caller_end
                and now > rec.audio_end()
                and state in ("listening", "ended")
                and not counting.open_streams
            )
            if rec.answer_start is None and case.category in ("over_agent", "interruption", "tool"):
                idle = False  # the answer the stimulus goes over has not begun
            quiet_since = (quiet_since or now) if idle else None
            if quiet_since is not None and now - quiet_since >= IDLE_S:
                break
            if now - rec.t0 > CAP_S:
                rec.capped = True
                break
    finally:
        rec.end = loop.time()
        rec.chat_calls = list(chat.calls)
        rec.stt_finish_s = list(counting.finish_s)
        rec.hint_s = list(counting.hint_s)
        await conv.close()
        await reader
    return rec
