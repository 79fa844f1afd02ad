"""The cascade conversation engine: VAD + streaming STT -> LLM with tools -> clause-streamed TTS.

One :class:`Conversation` per session, transport-agnostic (architecture rule 1): a transport
pushes audio/text/DTMF in and renders the typed events of :mod:`voiceagent.conversation.events`.

A turn, as code: frames -> ``_on_frame`` (VAD, barge-in, utterance start/end) -> the utterance
task feeds the STT stream -> at ``VAD_SILENCE_TIMEOUT`` of silence the final text starts a
response task -> ``_respond`` streams the LLM with the active agent's rendered prompt, history and
tools, runs tool calls through the registry (several per round, bounded rounds), switches agents
on handoff tools, and hands finished clauses to a :class:`_Speaker` that synthesises them while
the LLM is still streaming.

Barge-in: a speech frame while the agent is responding or its audio is still playing cancels the
response task (LLM and TTS), purges its not-yet-taken audio, emits ``StopAudio`` synchronously,
and records in the history only what was played up to that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from voiceagent.conversation.common import (
    agent_voice,
    cancel_other_tasks,
    drop_oldest_input,
    end_session,
    handoff_line,
    open_session,
    persist,
    run_tool_round,
)
from voiceagent.conversation.events import (
    AgentResponse,
    Audio,
    Error,
    Event,
    EventChannel,
    StateChange,
    StopAudio,
    Transcript,
)
from voiceagent.conversation.providers import (
    ChatProvider,
    ChatRequest,
    ProviderError,
    STTProvider,
    STTStream,
    ToolCallRequest,
    TTSProvider,
)
from voiceagent.conversation.session import SessionState, SessionStore, Turn
from voiceagent.conversation.specs import AgentSpec, HandoffMap, ScenarioSpec, VoiceSpec
from voiceagent.conversation.text import ClauseSplitter
from voiceagent.conversation.tools import (
    REGISTRY,
    ToolRegistry,
    ToolSpec,
    handoff_tool_specs,
)
from voiceagent.logging import session_id_var

logger = logging.getLogger("voiceagent.conversation")

FALLBACK_LINE = "I'm sorry, I'm having trouble answering right now. Could you say that again?"
DTMF_DIGITS = frozenset("0123456789*#ABCD")
ENDED_BY_AGENT = "conversation ended by the agent"


# --- what the engine needs from the outside -------------------------------------------------------
@dataclass
class TurnContext:
    """The active agent as of this turn: re-resolved every turn, so live edits apply next turn."""

    agent: AgentSpec
    scenario: ScenarioSpec
    handoff_map: HandoffMap
    system_prompt: str
    tools: list[ToolSpec]


class AgentDirectory(Protocol):
    """Resolves agents and scenarios for a session (implemented by agents_app over the catalog)."""

    async def context(self, state: SessionState, agent_name: str | None = None) -> TurnContext: ...


def resolve_tools(
    agent: AgentSpec, handoff_map: HandoffMap, registry: ToolRegistry, agents: dict[str, AgentSpec]
) -> list[ToolSpec]:
    """The tools an agent may call: registered ones (a bare MCP server name brings all its tools),
    plus handoff tools derived from the scenario. Resolved every turn, so a removed server's tools
    stop being offered from the next turn."""
    names = registry.expand_names(agent.tools)
    specs = registry.specs_for(names)
    have = {s.name for s in specs}
    missing = [n for n in names if n not in have and handoff_map.is_handoff_tool(n)]
    if missing:
        derived = {s.name: s for s in handoff_tool_specs(agents)}
        specs += [derived[n] for n in missing if n in derived]
    return specs


@dataclass
class EngineConfig:
    frame_ms: int = 20
    sample_rate: int = 16000  # what VAD and STT work at
    max_tool_rounds: int = 5
    llm_timeout_s: float = 15.0
    history_turns: int = 40
    input_queue_frames: int = 500  # audio kept from before start() (10 s of 20 ms frames); oldest dropped
    event_queue_size: int = 1024
    preroll_frames: int = 15  # audio kept from before speech started (300 ms)
    max_utterance_frames: int = 3000  # 60 s
    dtmf_flush_s: float = 1.5
    language: str = "en-US"
    fallback_line: str = FALLBACK_LINE
    silence_timeout_ms: Callable[[], int] = lambda: 500
    default_voice: Callable[[], VoiceSpec] = VoiceSpec


class VADLike(Protocol):
    def is_speech(self, frame: bytes) -> bool: ...


# --- the speaking side --------------------------------------------------------------------------
@dataclass
class _Spoken:
    text: str
    start: float
    end: float


class _Speaker:
    """Synthesises clauses in order for one response; tracks what is played when (playback clock)."""

    def __init__(self, conv: Conversation, rid: int):
        self.conv = conv
        self.rid = rid
        self.queue: asyncio.Queue[tuple[str, AgentSpec] | None] = asyncio.Queue(maxsize=32)
        self.spoken: list[_Spoken] = []
        self.failed = False
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"tts-{rid}")

    async def say(self, text: str, agent: AgentSpec) -> None:
        await self.queue.put((text, agent))

    async def finish(self) -> None:
        await self.queue.put(None)
        await self.task

    def cancel(self) -> None:
        self.task.cancel()

    def spoken_until(self, now: float) -> str:
        """The words actually played by ``now``: whole clauses, plus the played share of the current one."""
        words: list[str] = []
        for item in self.spoken:
            if item.end <= now:
                words.extend(item.text.split())
            elif item.start < now:
                share = (now - item.start) / max(item.end - item.start, 1e-6)
                part = item.text.split()
                words.extend(part[: int(len(part) * share)])
        return " ".join(words)

    async def _run(self) -> None:
        conv = self.conv
        while True:
            item = await self.queue.get()
            if item is None:
                return
            text, agent = item
            if self.failed:
                continue
            voice = conv.voice_for(agent)
            start: float | None = None
            try:
                async for pcm in conv.tts.synthesize(text, voice):
                    if conv.active_rid != self.rid or not pcm:
                        continue
                    began = conv.emit_audio(pcm, conv.tts.sample_rate, self.rid)
                    start = began if start is None else start
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # TTS failure: the text still goes out, audio stops
                self.failed = True
                await conv.emit(
                    Error(conv.session_id, code="tts_error", message=f"speech synthesis failed: {exc}")
                )
                logger.warning("tts failed: %s", exc)
                continue
            if start is not None:
                self.spoken.append(_Spoken(text, start, conv.playback_end))
            elif not self.failed:
                self.spoken.append(_Spoken(text, conv.loop_time(), conv.loop_time()))


@dataclass
class _Utterance:
    frames: asyncio.Queue = field(default_factory=lambda: asyncio.Queue())
    task: asyncio.Task | None = None
    frames_in: int = 0


# --- the conversation ----------------------------------------------------------------------------
class Conversation:
    """A voice conversation on one session. Create, ``await start()``, then push and read events."""

    def __init__(
        self,
        session_id: str,
        *,
        scenario: str,
        directory: AgentDirectory,
        store: SessionStore,
        stt: STTProvider,
        tts: TTSProvider,
        chat: ChatProvider,
        vad: VADLike,
        registry: ToolRegistry = REGISTRY,
        config: EngineConfig | None = None,
        transport: str | None = None,
        agent: str | None = None,
    ):
        self.session_id = session_id
        self.scenario_name = scenario
        self.requested_agent = agent
        self.directory = directory
        self.store = store
        self.stt, self.tts, self.chat, self.vad = stt, tts, chat, vad
        self.registry = registry
        self.config = config or EngineConfig()
        self.transport = transport
        self.channel = EventChannel(self.config.event_queue_size)
        self.state: SessionState | None = None
        self.history: list[Turn] = []
        self.active_rid: int | None = None
        self.playback_end = 0.0
        self.paused = False
        self.closed = False
        self.dropped_frames = 0
        self._rids = itertools.count(1)
        self._seq = itertools.count(1)
        self._early: deque[tuple[bytes, int]] = deque()  # audio pushed before start(), processed there
        self._listening = False
        self._response_task: asyncio.Task | None = None
        self._speaker: _Speaker | None = None
        self._pending: tuple[int, str, list[_Spoken], _Speaker] | None = None  # assistant speech to commit
        self._commit_task: asyncio.Task | None = None
        self._utterance: _Utterance | None = None
        self._preroll: deque[bytes] = deque(maxlen=self.config.preroll_frames)
        self._silence_ms = 0
        self._frame_bytes = self.config.sample_rate * self.config.frame_ms // 1000 * 2
        self._resamplers: dict[int, Any] = {}
        self._chunk = bytearray()
        self._dtmf: list[str] = []
        self._dtmf_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._current_agent: AgentSpec | None = None
        self.turn_ended_at: float | None = None
        self.close_reason: str | None = None

    # --- lifecycle --------------------------------------------------------------------------------
    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def start(self) -> None:
        """Load (or create) the session state, start listening, speak the greeting."""
        self._loop = asyncio.get_running_loop()
        session_id_var.set(self.session_id)
        self.state, self.history, ctx = await open_session(
            self.store,
            self.directory,
            self.session_id,
            scenario=self.scenario_name,
            transport=self.transport,
            agent=self.requested_agent,
            history_turns=self.config.history_turns,
        )
        early, self._early = self._early, deque()
        self._listening = True
        for pcm, rate in early:
            self._feed(pcm, rate)
        await self.emit(StateChange(self.session_id, state="listening", agent=ctx.agent.name))
        if ctx.agent.greeting and not self.history:
            self._begin_response(self._speak_line(ctx.agent.greeting, ctx.agent))

    async def close(self, reason: str = "closed") -> None:
        """Stop everything; commit what was said; the event stream ends."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if self._pending is not None:
            await self._commit(self._take_pending(), self.loop_time())
        utterance_task = self._utterance.task if self._utterance is not None else None
        cancel_other_tasks(
            [
                self._response_task,
                self._dtmf_task,
                self._commit_task,
                utterance_task,
                *self._tasks,
            ]
        )
        await end_session(self)
        logger.info("conversation closed: %s", reason)

    def events(self) -> AsyncIterator[Event]:
        """The event stream; ends when the conversation closes."""
        return self.channel.stream()

    # --- input ----------------------------------------------------------------------------------
    def push_audio(self, pcm: bytes, sample_rate: int = 16000) -> bool:
        """Caller audio (PCM16 mono), processed at once: resampled, framed, VAD, handed to the
        utterance. Synchronous and cheap (no task hop per frame: at hundreds of conversations a
        queue and a task wake-up per 20 ms frame cost more loop time than the VAD itself). Audio
        pushed before ``start()`` is kept (at most ``input_queue_frames`` chunks, oldest dropped)
        and processed when listening begins."""
        if self.closed or self.paused or not pcm:
            return False
        if not self._listening:
            if len(self._early) >= self.config.input_queue_frames:
                drop_oldest_input(self, self._early, "audio before the start is too long")
            self._early.append((pcm, sample_rate))
            return True
        try:
            self._feed(pcm, sample_rate)
        except Exception:  # a bug here must not reach the transport nor deafen the session silently
            logger.exception("caller audio could not be processed")
            return False
        return True

    async def push_text(self, text: str) -> None:
        """Typed input: the same path as a final transcript."""
        text = text.strip()
        if not text or self.closed:
            return
        self._barge_in("text")
        await self.emit(Transcript(self.session_id, text=text, final=True))
        self._start_turn(text)

    def push_dtmf(self, digit: str) -> None:
        """A keypad digit; digits are gathered until ``#`` or a short pause, then become a turn."""
        if self.closed or digit not in DTMF_DIGITS:
            return
        if digit != "#":
            self._dtmf.append(digit)
        if self._dtmf_task is not None:
            self._dtmf_task.cancel()
        delay = 0.0 if digit == "#" else self.config.dtmf_flush_s
        self._dtmf_task = asyncio.get_running_loop().create_task(self._flush_dtmf(delay))

    async def _flush_dtmf(self, delay: float) -> None:
        await asyncio.sleep(delay)
        digits, self._dtmf = "".join(self._dtmf), []
        if digits:
            await self.push_text(f"Keypad entry: {digits}")

    async def pause(self) -> None:
        self.paused = True
        self._cancel_utterance()
        await self.emit(StateChange(self.session_id, state="paused", agent=self._agent_name()))

    async def resume(self) -> None:
        self.paused = False
        await self.emit(StateChange(self.session_id, state="listening", agent=self._agent_name()))

    def _feed(self, pcm: bytes, rate: int) -> None:
        if rate != self.config.sample_rate:
            resampler = self._resamplers.get(rate)
            if resampler is None:
                from voiceagent.speech.audio import StreamResampler

                resampler = self._resamplers[rate] = StreamResampler(rate, self.config.sample_rate)
            pcm = resampler.process(pcm).tobytes()
        size = self._frame_bytes
        if not self._chunk and len(pcm) == size:  # the usual case: one whole frame, no copy
            self._on_frame(pcm)
            return
        self._chunk += pcm
        while len(self._chunk) >= size:
            frame = bytes(self._chunk[:size])
            del self._chunk[:size]
            self._on_frame(frame)

    def _on_frame(self, frame: bytes) -> None:
        if self.paused:
            return
        speech = self.vad.is_speech(frame)
        if speech and self._agent_busy():
            self._barge_in("speech")
        utterance = self._utterance
        if utterance is None:
            if not speech:
                self._preroll.append(frame)
                return
            utterance = self._utterance = _Utterance()
            for old in self._preroll:
                utterance.frames.put_nowait(old)
            self._preroll.clear()
            utterance.task = asyncio.get_running_loop().create_task(self._run_utterance(utterance))
            self._silence_ms = 0
        if utterance.frames_in < self.config.max_utterance_frames:
            utterance.frames.put_nowait(frame)
            utterance.frames_in += 1
        self._silence_ms = 0 if speech else self._silence_ms + self.config.frame_ms
        if (
            self._silence_ms >= self._silence_timeout()
            or utterance.frames_in >= self.config.max_utterance_frames
        ):
            self.turn_ended_at = self.loop_time()  # the end-of-turn decision (latency metrics start here)
            utterance.frames.put_nowait(None)  # end of turn
            self._utterance = None
            self._silence_ms = 0

    def _silence_timeout(self) -> int:
        agent = self._current_agent
        if agent is not None and agent.vad_silence_timeout_ms:
            return agent.vad_silence_timeout_ms
        return self.config.silence_timeout_ms()

    async def _run_utterance(self, utterance: _Utterance) -> None:
        stream: STTStream | None = None
        try:
            stream = await self.stt.open(self.config.language, self._on_interim)
            while True:
                frame = await utterance.frames.get()
                if frame is None:
                    break
                await stream.push(frame)
            text = (await stream.finish()).strip()
            stream = None
        except asyncio.CancelledError:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.cancel()
            raise
        except Exception as exc:  # STT failure: report; the next utterance opens a fresh stream
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.cancel()
            await self.emit(
                Error(self.session_id, code="stt_error", message=f"speech recognition failed: {exc}")
            )
            logger.warning("stt failed: %s", exc)
            return
        if text:
            await self.emit(Transcript(self.session_id, text=text, final=True))
            self._start_turn(text)

    def _on_interim(self, text: str) -> None:
        if text and not self.closed:
            self.channel.put_nowait(Transcript(self.session_id, text=text, final=False))

    def _cancel_utterance(self) -> None:
        if self._utterance is not None and self._utterance.task is not None:
            self._utterance.task.cancel()
        self._utterance = None
        self._silence_ms = 0

    # --- output helpers -----------------------------------------------------------------------------
    async def emit(self, event: Event) -> None:
        if not self.closed:
            await self.channel.put(event)

    def emit_audio(self, pcm: bytes, sample_rate: int, rid: int) -> float:
        """Queue an audio chunk on the playback clock; returns when it starts playing."""
        now = self.loop_time()
        start = max(now, self.playback_end)
        self.playback_end = start + len(pcm) / 2 / sample_rate
        self.channel.put_nowait(
            Audio(self.session_id, pcm=pcm, sample_rate=sample_rate, seq=next(self._seq), response_id=rid)
        )
        return start

    def voice_for(self, agent: AgentSpec) -> VoiceSpec:
        return agent_voice(agent, self.config.default_voice())

    def _agent_name(self) -> str:
        return self.state.active_agent if self.state is not None else ""

    def _agent_busy(self) -> bool:
        responding = self._response_task is not None and not self._response_task.done()
        return responding or self.loop_time() < self.playback_end

    # --- barge-in ---------------------------------------------------------------------------------
    def _barge_in(self, cause: str) -> None:
        """Cancel the response and its audio NOW (synchronously, within the current frame)."""
        if not self._agent_busy():
            return
        now = self.loop_time()
        rid = self.active_rid
        audio_out = now < self.playback_end or (self._speaker is not None and bool(self._speaker.spoken))
        self.active_rid = None
        if rid is not None:
            self.channel.purge(lambda e: isinstance(e, Audio) and e.response_id == rid)
        if audio_out:
            self.channel._append(StopAudio(self.session_id, reason="barge_in", response_id=rid or 0))
        self.playback_end = now
        if self._response_task is not None and not self._response_task.done():
            self._response_task.cancel()
        speaker, self._speaker = self._speaker, None  # handled: a second call (new turn) finds nothing
        if speaker is not None:
            speaker.cancel()
        pending = self._take_pending()
        if pending is not None:
            self._spawn(self._commit(pending, now))
        if speaker is not None and speaker.spoken and (pending is None or pending[3] is not speaker):
            # interrupted while still streaming: what was played so far is what the caller heard
            self._spawn(self._commit((rid or 0, self._agent_name(), speaker.spoken, speaker), now))
        if rid is not None or audio_out:  # else only a task that had not begun a response was dropped
            how = "audio stopped" if audio_out else "before any audio"
            logger.debug("barge-in (%s): response %s stopped, %s", cause, rid, how)

    # --- responses --------------------------------------------------------------------------------
    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _begin_response(self, coro) -> None:
        if self._response_task is not None and not self._response_task.done():
            self._response_task.cancel()
        self._response_task = asyncio.get_running_loop().create_task(coro)

    def _start_turn(self, text: str) -> None:
        if self.closed:
            return
        self._barge_in("new turn")
        self._begin_response(self._respond(text))

    async def _speak_line(self, text: str, agent: AgentSpec) -> None:
        """Say a fixed line (greeting, fallback) as its own response."""
        rid = self._new_response()
        speaker = self._speaker = _Speaker(self, rid)
        try:
            await self.emit(StateChange(self.session_id, state="speaking", agent=agent.name))
            await self.emit(
                AgentResponse(self.session_id, text=text, agent=agent.name, final=True, response_id=rid)
            )
            await speaker.say(text, agent)
            await speaker.finish()
            self._hold_for_commit(rid, agent.name, speaker)
        finally:
            if self.active_rid == rid:
                await self._settle()

    def _new_response(self) -> int:
        rid = next(self._rids)
        self.active_rid = rid
        return rid

    async def _settle(self) -> None:
        """After a response: back to listening (or ended)."""
        ended = bool(self.state and self.state.memory.get("conversation_ended"))
        if ended:
            wait = self.playback_end - self.loop_time()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.close(ENDED_BY_AGENT)
            return
        await self.emit(StateChange(self.session_id, state="listening", agent=self._agent_name()))

    def _hold_for_commit(self, rid: int, agent: str, speaker: _Speaker) -> None:
        """Record the assistant's words once they have played (or when interrupted)."""
        previous = self._take_pending()
        if previous is not None:
            self._spawn(self._commit(previous, self.loop_time()))
        self._pending = (rid, agent, speaker.spoken, speaker)
        delay = max(0.0, self.playback_end - self.loop_time())
        self._commit_task = self._spawn(self._commit_later(rid, delay))

    async def _commit_later(self, rid: int, delay: float) -> None:
        await asyncio.sleep(delay)
        if self._pending is not None and self._pending[0] == rid:
            await self._commit(self._take_pending(), float("inf"))

    def _take_pending(self) -> tuple[int, str, list[_Spoken], _Speaker] | None:
        pending, self._pending = self._pending, None
        return pending

    async def _commit(self, pending: tuple[int, str, list[_Spoken], _Speaker] | None, now: float) -> None:
        if pending is None or self.state is None:
            return
        _, agent, _, speaker = pending
        text = speaker.spoken_until(now)
        if not text:
            return
        if now != float("inf") and text != " ".join(s.text for s in speaker.spoken):
            text += " …"  # interrupted here
        turn = Turn(role="assistant", content=text, agent=agent)
        self.history.append(turn)
        await persist(self.store.append_turn(self.state, turn), "saving an assistant turn", self.session_id)

    async def _respond(self, user_text: str) -> None:
        """One user turn: history, LLM rounds with tools and handoffs, streamed speech."""
        assert self.state is not None
        state = self.state
        rid = self._new_response()
        user_turn = Turn(role="user", content=user_text, agent=state.active_agent)
        self.history.append(user_turn)
        # saved the moment it is final
        await persist(self.store.append_turn(state, user_turn), "saving a user turn", self.session_id)
        await self.emit(StateChange(self.session_id, state="thinking", agent=state.active_agent))
        speaker = self._speaker = _Speaker(self, rid)
        ctx = await self.directory.context(state)
        self._current_agent = ctx.agent
        messages = self._messages(ctx)
        try:
            for _round in range(self.config.max_tool_rounds):
                text, calls, failed = await self._llm_round(ctx, messages, speaker, rid)
                if failed:
                    await self.emit(
                        AgentResponse(
                            self.session_id,
                            text=self.config.fallback_line,
                            agent=ctx.agent.name,
                            final=True,
                            response_id=rid,
                        )
                    )
                    await speaker.say(self.config.fallback_line, ctx.agent)
                    break
                if not calls:
                    break
                messages.append(
                    {
                        "role": "assistant",
                        "content": text or None,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            }
                            for c in calls
                        ],
                    }
                )
                next_ctx, announced = await self._run_tools(ctx, calls, messages, speaker, rid)
                if announced:
                    break
                if next_ctx is not ctx:  # discrete handoff: the new agent continues this turn
                    ctx = next_ctx
                    self._current_agent = ctx.agent
                    messages[0] = {"role": "system", "content": ctx.system_prompt}
            else:
                await self.emit(
                    Error(
                        self.session_id,
                        code="tool_rounds_exceeded",
                        message=f"stopped after {self.config.max_tool_rounds} tool rounds",
                    )
                )
            await speaker.finish()
            self._hold_for_commit(rid, state.active_agent, speaker)
        except asyncio.CancelledError:
            speaker.cancel()
            raise
        finally:
            await persist(self.store.save(state), "saving the session state", self.session_id)
        if self.active_rid == rid:
            await self._settle()

    def _messages(self, ctx: TurnContext) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": ctx.system_prompt}]
        for turn in self.history[-self.config.history_turns :]:
            if turn.role in ("user", "assistant"):
                messages.append({"role": turn.role, "content": turn.content})
            elif turn.role == "tool":
                messages.append(
                    {"role": "system", "content": f"Earlier, tool {turn.tool_name} returned: {turn.content}"}
                )
        return messages

    async def _llm_round(
        self, ctx: TurnContext, messages: list[dict[str, Any]], speaker: _Speaker, rid: int
    ) -> tuple[str, list[ToolCallRequest], bool]:
        """Stream one model round; clauses go to TTS as they complete. Returns (text, tool calls, failed)."""
        assert self.state is not None
        agent = ctx.agent
        request = ChatRequest(
            messages=messages,
            tools=[t.to_openai() for t in ctx.tools],
            model=agent.model,
            temperature=agent.temperature,
            top_p=agent.top_p,
            max_tokens=agent.max_tokens,
            agent=agent.name,
            scenario=ctx.scenario.name,
            memory=self.state.memory,
        )
        splitter = ClauseSplitter()
        parts: list[str] = []
        calls: list[ToolCallRequest] = []
        first = True
        try:
            async with asyncio.timeout(self.config.llm_timeout_s):
                async for chunk in self.chat.stream(request):
                    if chunk.text:
                        if first:
                            first = False
                            await self.emit(StateChange(self.session_id, state="speaking", agent=agent.name))
                        parts.append(chunk.text)
                        await self.emit(
                            AgentResponse(
                                self.session_id,
                                text=chunk.text,
                                agent=agent.name,
                                final=False,
                                response_id=rid,
                            )
                        )
                        for clause in splitter.push(chunk.text):
                            await speaker.say(clause, agent)
                    if chunk.tool_calls:
                        calls.extend(chunk.tool_calls)
        except asyncio.CancelledError:
            raise
        except (ProviderError, TimeoutError, Exception) as exc:  # the conversation goes on
            kind = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc}"
            await self.emit(Error(self.session_id, code="llm_error", message=f"language model {kind}"))
            logger.warning("llm %s", kind)
            return "".join(parts), [], True
        for clause in splitter.flush():
            await speaker.say(clause, agent)
        text = "".join(parts)
        if text:
            await self.emit(
                AgentResponse(self.session_id, text=text, agent=agent.name, final=True, response_id=rid)
            )
        return text, calls, False

    async def _run_tools(
        self,
        ctx: TurnContext,
        calls: list[ToolCallRequest],
        messages: list[dict[str, Any]],
        speaker: _Speaker,
        rid: int,
    ) -> tuple[TurnContext, bool]:
        """Execute a round's tool calls (handoffs last). Returns (context to continue with, announced?)."""
        handoff = await run_tool_round(
            self,
            ctx,
            calls,
            lambda call, content: messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": content}
            ),
        )
        if handoff is None:
            return ctx, False
        new_ctx = handoff.context
        if handoff.announced:
            target = new_ctx.agent
            line = handoff_line(target, handoff.returning)
            if line:
                await self.emit(StateChange(self.session_id, state="speaking", agent=target.name))
                await self.emit(
                    AgentResponse(self.session_id, text=line, agent=target.name, final=True, response_id=rid)
                )
                await speaker.say(line, target)
            self._current_agent = target
            return new_ctx, True
        return new_ctx, False

    async def add_turn(self, turn: Turn) -> None:
        """Append to the history, in memory and in the store."""
        assert self.state is not None
        self.history.append(turn)
        await persist(self.store.append_turn(self.state, turn), f"saving a {turn.role} turn", self.session_id)
