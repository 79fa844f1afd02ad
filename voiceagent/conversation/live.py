"""The live (speech-to-speech) engine: one realtime-voice connection instead of STT + LLM + TTS.

:class:`LiveConversation` has the public API and the events of the cascade
:class:`~voiceagent.conversation.engine.Conversation` (``start``, ``push_audio``, ``push_text``,
``push_dtmf``, ``pause``, ``resume``, ``close``, ``events()``), so a transport does not care which
one it drives. Agents, tools and handoffs are the same objects: the active agent's rendered prompt,
voice and tools go to the realtime session with ``session.update``; tool calls run through the
same registry (:func:`~voiceagent.conversation.common.run_tool_round`); a handoff switches the
session to the new agent.

A turn, as data: caller audio (PCM16 at 8/16/24/48 kHz) -> resampled to 24 kHz (cubic when
upsampling, so no frame waits inside the resampler), sent as ``input_audio_buffer.append`` events
of ``append_ms`` (one per 20 ms frame) by a writer task -> the service's VAD
(``silence_duration_ms`` from ``VAD_SILENCE_TIMEOUT`` or the agent's override) -> input
transcription (``Transcript`` interim / final; the user turn is in the history the moment it is
final) -> response audio deltas (``Audio`` at 24 kHz on the playback clock) with their transcript
(``AgentResponse`` deltas, then final) -> the assistant turn is committed when its audio has
played, truncated to what was heard when interrupted.

Tool calls collected during a response run when it is done: each output goes back as a
``function_call_output`` item, then ``response.create``. A handoff also sends ``session.update``
with the new agent's instructions, voice and tools; ``announced`` asks the new agent to say its
greeting (its return greeting when the caller comes back), ``discrete`` lets it answer the
pending request.

Turn-taking (:mod:`~voiceagent.conversation.live_turns`): the service's VAD only reports speech;
speech over the agent stops it after ``min_interruption_ms`` or on a word that is not a
backchannel, and the engine sends ``response.create`` at the end of a real turn. A barge-in
queues ``StopAudio`` synchronously after purging the not-yet-taken audio, sends
``response.cancel`` (late deltas are dropped) and ``conversation.item.truncate`` with what the
caller heard (``audio_end_ms``).

Connection failures (:mod:`~voiceagent.conversation.live_socket`) end the conversation: an
``Error`` (``realtime_unavailable`` / ``realtime_dropped``), then ``StateChange("ended")`` and the
end of the event stream, so the transport ends its session. What this pipeline shares with the
cascade is :class:`~voiceagent.conversation.core.ConversationCore`; the server-event handlers are
in :mod:`~voiceagent.conversation.live_events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Unpack

from voiceagent.conversation.common import error_content, history_lines, run_tool_round
from voiceagent.conversation.context import TurnContext
from voiceagent.conversation.core import ConversationCore, CoreConfig, SessionArgs
from voiceagent.conversation.events import Audio, Error
from voiceagent.conversation.live_events import AssistantItem, LiveResponse, RealtimeEvents
from voiceagent.conversation.live_socket import APPEND_HEAD, RealtimeLink
from voiceagent.conversation.live_turns import HeldSpeech
from voiceagent.conversation.providers import ProviderError, ToolCallRequest
from voiceagent.conversation.session import PERSON, Turn
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.stream_gaps import FRAME_S, StreamGaps
from voiceagent.llm.realtime import SAMPLE_RATE, RealtimeClient, RealtimeConnection, SessionConfig
from voiceagent.speech.audio import DEFAULT_QUALITY, StreamResampler

logger = logging.getLogger("voiceagent.conversation.live")

# APPEND_HEAD: the wire prefix of caller audio, part of this module's face for the relay benchmark
__all__ = ["APPEND_HEAD", "SAY_LINE", "LiveConfig", "LiveConversation"]

SAY_LINE = 'Say exactly the following to the caller, word for word, and nothing else: "{line}"'


@dataclass
class LiveConfig(CoreConfig):
    append_ms: int = 20  # caller audio per input_audio_buffer.append (a 20 ms frame goes out at once)
    # Caller audio is upsampled (8/16 -> 24 kHz) with cubic interpolation ("QQ"): it hands out every
    # frame's samples at once, where the filtered qualities hold them back in ~33 ms blocks (up to
    # 60 ms at 8 kHz). Upsampling cannot alias; its faint images above the caller's band do not
    # matter to the speech model. Downsampling (48 kHz) keeps the anti-aliasing default.
    upsample_quality: str = "QQ"
    input_backlog_ms: int = 2000  # caller audio waiting for the socket; the oldest goes beyond
    connect_timeout_s: float = 5.0  # per attempt (the client's own timeout also applies)
    connect_attempts: int = 3
    connect_backoff_s: float = 0.1  # doubled after each failed attempt
    vad_threshold: float = 0.5
    semantic_vad: bool = False  # the service's semantic turn detector (bounded by ENDPOINTING_MAX_MS)
    prefix_padding_ms: int = 300
    transcription_model: str | None = None
    say_line: str = SAY_LINE


class LiveConversation(RealtimeEvents, RealtimeLink, StreamGaps, ConversationCore):
    """A conversation over a realtime voice API. Create, ``await start()``, then push and read events."""

    log = logger
    config: LiveConfig

    def __init__(
        self,
        session_id: str,
        *,
        client: RealtimeClient,
        config: LiveConfig | None = None,
        **session: Unpack[SessionArgs],
    ):
        config = config or LiveConfig()
        super().__init__(session_id, config, **session)
        self.client = client
        self.late_deltas_dropped = 0  # audio of cancelled responses that arrived after the cancel
        self.responses_requested = 0  # response.create sent, response.created not yet seen
        self.connection: RealtimeConnection | None = None
        self._lost_reported = False
        self._ctx: TurnContext | None = None
        self._sent_session: SessionConfig | None = None
        # caller audio -> the socket
        self._resamplers: dict[int, StreamResampler] = {}
        self._pcm = bytearray()
        # a batch goes out at 90% of append_ms: the resampler's output wobbles by a few samples per
        # frame, and a 20 ms frame must not wait for the next one because it came out 2 samples short
        self._append_bytes = int(SAMPLE_RATE * config.append_ms / 1000 * 0.9) * 2
        self._audio_out: deque[bytes] = deque()
        self._audio_limit = max(1, config.input_backlog_ms // max(1, config.append_ms))
        self._control: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        # the service's side
        self._responses: dict[str, LiveResponse] = {}
        self._current: LiveResponse | None = None
        self._open_items: list[AssistantItem] = []
        self._partials: dict[str, str] = {}
        self._playing_rid = 0
        self._tool_rounds = 0
        self._speech_started_ms: int | None = None  # the server VAD's, for the audio heard
        self._in_speech = False  # the server VAD heard the caller start and not yet stop
        self._hold: HeldSpeech | None = None  # speech over the agent, not yet judged
        self._judging: dict[str, HeldSpeech] = {}  # stopped speech over the agent awaiting its words
        self._waiting_creates: deque[dict[str, Any]] = deque()  # until the open response is done
        self._waiting_by: deque[str | None] = deque()  # their persons (a takeover's lines)
        self._create_by: str | None = None  # the create in flight says a person's line: who
        self._idle_waiters: list[asyncio.Future] = []  # a filler line waits for its response
        self._reader: asyncio.Task | None = None
        self._writer: asyncio.Task | None = None
        self._tool_task: asyncio.Task | None = None
        self._handlers = self._event_handlers()

    # --- the core's hooks ------------------------------------------------------------------------------
    async def _open(self, ctx: TurnContext) -> bool:
        """Connect and configure the realtime session; replay a resumed session's history.

        Never raises for an unreachable service: the failure is an ``Error`` event and the
        conversation ends (the event stream says so).
        """
        self._ctx = ctx
        session = self._session_config(ctx)
        try:
            self.connection = await self._connect(session)
        except ProviderError as exc:
            logger.warning("realtime voice API unavailable: %s", exc)
            await self.emit(
                Error(self.session_id, code="realtime_unavailable", message=str(exc), recoverable=False)
            )
            await self.close("realtime voice API unavailable")
            return False
        if self.closed:  # closed while connecting
            await self.connection.close()
            return False
        self._sent_session = session
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read(), name=f"live-read-{self.session_id}")
        self._writer = loop.create_task(self._write(), name=f"live-write-{self.session_id}")
        if self.history:
            self._replay_history()
        return True

    def _speak(self, line: str, agent: AgentSpec | None = None) -> None:
        """The active agent says ``line`` (word for word) as its own response."""
        self._request_response({"instructions": self.config.say_line.format(line=line)})

    async def _answer_text(self, text: str) -> None:
        self._user_turn(text)
        self._send({"type": "conversation.item.create", "item": _message("user", "input_text", text)})
        if self.taken_over_by is not None:  # a person has the call: stored, not answered
            self._person_spoke_last = False
            return
        self._request_response()
        await self._set_state("thinking")

    def _person_says(self, text: str, by: str) -> None:
        self._request_response({"instructions": self.config.say_line.format(line=text)}, by=by)

    def _answer_history(self) -> None:
        self._request_response()

    def _drop_input(self) -> None:
        self._pcm.clear()
        self._audio_out.clear()
        self._forget_speech()
        self._send({"type": "input_audio_buffer.clear"})

    def _transcribing(self) -> bool:
        return self._sent_session is None or self._sent_session.transcription

    def _pipeline_tasks(self) -> list[asyncio.Task | None]:
        return [self._reader, self._writer, self._tool_task]

    def _commit_heard(self, now: float) -> None:
        for item in list(self._open_items):
            self._commit_item(item, now)

    async def _disconnect(self) -> None:
        self._forget_speech()
        if self.connection is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.config.close_timeout_s):
                    await self.connection.close()

    async def _set_state(self, name: str, agent: str | None = None) -> None:
        if name != self._state_name:
            await super()._set_state(name, agent)

    async def _settle(self) -> None:
        await super()._settle()
        if not self.closed:  # live agent edits apply from the next turn, as in the cascade
            self._spawn(self._refresh_session())

    # --- input ------------------------------------------------------------------------------------------
    def push_audio(self, pcm: bytes, sample_rate: int = 16000) -> bool:
        """Caller audio (PCM16 mono at 8/16/24/48 kHz). Never blocks; beyond the backlog the oldest goes."""
        if self.closed or self.paused or not pcm:
            return False
        if len(pcm) & 1:
            pcm = pcm[:-1]
            if not pcm:
                return False
        if sample_rate != SAMPLE_RATE:
            resampler = self._resamplers.get(sample_rate)
            if resampler is None:
                quality = self.config.upsample_quality if sample_rate < SAMPLE_RATE else DEFAULT_QUALITY
                try:
                    resampler = StreamResampler(sample_rate, SAMPLE_RATE, quality=quality)
                    self._resamplers[sample_rate] = resampler
                except ValueError as exc:
                    logger.warning("caller audio dropped: %s", exc)
                    return False
            pcm = resampler.process(pcm).tobytes()
        if self._loop is not None:
            self._audio_arrived()  # a gap in the audio is the caller's silence (StreamGaps)
        self._send_pcm(pcm)
        return True

    def _send_pcm(self, pcm: bytes) -> None:
        """24 kHz caller audio to the socket, in batches of ``append_ms``."""
        buf = self._pcm
        if not buf and len(pcm) >= self._append_bytes:
            self._queue_audio(pcm)
            return
        buf += pcm
        if len(buf) >= self._append_bytes:
            self._queue_audio(bytes(buf))
            buf.clear()

    def _caller_speaking(self) -> bool:
        """The service's VAD heard the caller start and not yet stop (no re-prompt meanwhile)."""
        return self._in_speech

    def _fill_silence(self, frames: int) -> None:
        """A gap in the client's audio mid-speech (StreamGaps): silence for the service's VAD."""
        self._send_pcm(bytes(round(SAMPLE_RATE * FRAME_S) * 2 * frames))

    def _queue_audio(self, chunk: bytes) -> None:
        if len(self._audio_out) >= self._audio_limit:
            self._drop_oldest(self._audio_out, "audio input is behind")
        self._audio_out.append(chunk)
        self._wake.set()

    # --- tools and handoffs ----------------------------------------------------------------------------
    async def _run_calls(self, response: LiveResponse) -> None:
        assert self.state is not None
        calls = list(response.calls.values())
        unanswered = {c.id for c in calls}

        def reply(call: ToolCallRequest, content: str) -> None:
            unanswered.discard(call.id)
            self._send_output(call.id, content)

        try:
            self._tool_rounds += 1
            if self._tool_rounds > self.config.max_tool_rounds:
                for call in calls:
                    reply(call, error_content("tool_rounds_exceeded", "too many tool rounds in a row"))
                await self._too_many_tool_rounds()
                await self._settle()
                return
            ctx = self._ctx = await self.directory.context(self.state)
            outcome = await run_tool_round(self, ctx, calls, reply, self._say_filler)
        except asyncio.CancelledError:
            for call_id in unanswered:
                self._send_output(call_id, error_content("interrupted", "the caller interrupted"))
            raise
        if outcome is None:
            self._request_response()
            return
        self._ctx = outcome.context
        self._update_session(outcome.context)
        if not outcome.announced:
            self._request_response()  # the new agent answers the pending request
        elif outcome.line:
            self._speak(outcome.line, outcome.context.agent)
        else:
            await self._settle()

    def _send_output(self, call_id: str, content: str) -> None:
        self._send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": content},
            }
        )

    # --- the session ------------------------------------------------------------------------------------
    def _session_config(self, ctx: TurnContext) -> SessionConfig:
        agent = ctx.agent
        temperature = agent.temperature if agent.temperature is not None else None
        if temperature is not None and not 0.6 <= temperature <= 1.2:  # the realtime models' range
            temperature = None
        turns = self.turn_taking_for(agent)
        return SessionConfig(
            instructions=ctx.system_prompt,
            voice=self.voice_for(agent).name,
            tools=tuple(t.to_realtime() for t in ctx.tools),
            silence_duration_ms=turns.endpointing_min_ms,
            endpointing_max_ms=turns.endpointing_max_ms,
            semantic_vad=self.config.semantic_vad,
            vad_threshold=self.config.vad_threshold,
            prefix_padding_ms=self.config.prefix_padding_ms,
            transcription_model=self.config.transcription_model,
            language=self.config.language,
            temperature=temperature,
        )

    def _update_session(self, ctx: TurnContext) -> None:
        session = self._session_config(ctx)
        if self.connection is not None and session != self._sent_session:
            self._sent_session = session
            self._send(self.connection.session_event(session))

    async def _refresh_session(self) -> None:
        """Live agent edits apply from the next turn, as in the cascade engine."""
        if self.state is None or self.closed:
            return
        try:
            ctx = await self.directory.context(self.state)
        except Exception as exc:
            logger.warning("agent lookup failed: %s", exc)
            return
        self._ctx = ctx
        self._update_session(ctx)

    def _replay_history(self) -> None:
        """A resumed session: the model gets the earlier conversation as items."""
        for role, text in history_lines(self.history[-self.config.history_turns :]):
            item = _message(role, "text" if role == "assistant" else "input_text", text)
            self._send({"type": "conversation.item.create", "item": item})

    # --- history and barge-in ----------------------------------------------------------------------------
    def _user_turn(self, text: str) -> None:
        self._tool_rounds = 0
        self._add_turn(Turn(role="user", content=text, agent=self._agent_name()))

    def _commit_played(self, items: list[AssistantItem]) -> None:
        pending = [i for i in items if not i.committed]
        for item in pending:
            if item.end > self.loop_time():  # still to play: the caller has it, the store too
                who, person = (item.by, PERSON) if item.by else (item.agent, None)
                self._write_sent(item.id, item.transcript(), who, person)
        if pending:
            self._commit_when_played(max(i.end for i in pending), self._commit_items, pending)

    def _commit_items(self, items: list[AssistantItem]) -> None:
        for item in items:
            self._commit_item(item, None)

    def _commit_item(self, item: AssistantItem, now: float | None) -> None:
        """The assistant turn of one item: all of it, or (``now`` given) what was heard by then."""
        if item.committed:
            return
        item.committed = True
        with contextlib.suppress(ValueError):
            self._open_items.remove(item)
        text = item.heard(now)
        if text:
            if item.timing is not None:
                item.timing.add("realtime_audio_out_s", item.total_ms / 1000.0)
            cut = now is not None and text != item.transcript()
            self._add_assistant_turn(text, item.agent, item.timing, cut, sent_key=item.id, by=item.by)
        else:
            self._withdraw_sent(item.id)

    def _agent_busy(self) -> bool:
        working = self._tool_task is not None and not self._tool_task.done()
        return self._current is not None or working or self.loop_time() < self.playback_end

    def _interrupt(self, now: float) -> tuple[int, bool, str | None]:
        """Stop playback, the response and tools; truncate what was not heard (``audio_end_ms``)."""
        playing = now < self.playback_end
        response = self._current
        rid = self._playing_rid if playing else (response.rid if response is not None else 0)
        working = self._tool_task is not None and not self._tool_task.done()
        interrupted = playing or working or (response is not None and not response.cancelled)
        purged = bool(self.channel.purge(lambda e: isinstance(e, Audio)))
        if response is not None and not response.cancelled:
            response.cancelled = True
            self._send({"type": "response.cancel"})
        for item in list(self._open_items):
            if item.audio_bytes:
                played = item.played_ms(now)
                if played < item.total_ms:
                    self._send(
                        {
                            "type": "conversation.item.truncate",
                            "item_id": item.id,
                            "content_index": 0,
                            "audio_end_ms": int(played),
                        }
                    )
            self._commit_item(item, now)
        if self._tool_task is not None and working:
            self._tool_task.cancel()
        return rid, playing or purged, "" if interrupted or purged else None


def _message(role: str, content_type: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": content_type, "text": text}]}
