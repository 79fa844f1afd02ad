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

Barge-in (``input_audio_buffer.speech_started`` while the agent speaks or works): ``StopAudio``
is queued synchronously after purging the not-yet-taken audio, ``response.cancel`` goes out,
late deltas of the cancelled response are dropped, and ``conversation.item.truncate`` tells the
service how much (``audio_end_ms``) the caller actually heard.

Connection failures end the conversation: ``Error(code="realtime_unavailable")`` when the
initial connect fails (retried with backoff a bounded number of times: nothing was said yet, so a
retry is safe), ``Error(code="realtime_dropped")`` when the socket drops mid-conversation (never
retried: the service's conversation state died with it). Both are followed by
``StateChange("ended")`` and the end of the event stream, so the transport ends its session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from voiceagent.conversation.common import (
    agent_voice,
    cancel_other_tasks,
    drop_oldest_input,
    end_session,
    handoff_line,
    open_session,
    run_tool_round,
)
from voiceagent.conversation.engine import DTMF_DIGITS, ENDED_BY_AGENT, AgentDirectory, TurnContext
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
from voiceagent.conversation.providers import ProviderError, ToolCallRequest
from voiceagent.conversation.session import SessionState, SessionStore, Turn
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.conversation.tools import REGISTRY, ToolRegistry
from voiceagent.llm.realtime import (
    SAMPLE_RATE,
    RealtimeClient,
    RealtimeConnection,
    RealtimeError,
    SessionConfig,
)
from voiceagent.logging import session_id_var
from voiceagent.speech.audio import DEFAULT_QUALITY, StreamResampler

logger = logging.getLogger("voiceagent.conversation.live")

__all__ = ["SAY_LINE", "LiveConfig", "LiveConversation"]

SAY_LINE = 'Say exactly the following to the caller, word for word, and nothing else: "{line}"'
AUDIO_DELTA = "response.audio.delta"
APPEND_HEAD = '{"type": "input_audio_buffer.append", "audio": "'


def _append_event(chunk: bytes) -> str:
    """``input_audio_buffer.append`` as JSON text (base64 needs no escaping, so no json.dumps)."""
    return APPEND_HEAD + base64.b64encode(chunk).decode() + '"}'


# Answers that only mean a race we already handle (the response ended before our cancel arrived,
# or the service started a response itself before our response.create).
BENIGN_ERRORS = frozenset({"response_cancel_not_active", "conversation_already_has_active_response"})


@dataclass
class LiveConfig:
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
    close_timeout_s: float = 2.0
    history_turns: int = 40
    event_queue_size: int = 1024
    dtmf_flush_s: float = 1.5
    max_tool_rounds: int = 5  # tool rounds in a row without the caller speaking
    language: str = "en-US"
    vad_threshold: float = 0.5
    prefix_padding_ms: int = 300
    transcription_model: str | None = None
    say_line: str = SAY_LINE
    silence_timeout_ms: Callable[[], int] = lambda: 500
    default_voice: Callable[[], VoiceSpec] = VoiceSpec


@dataclass
class _Item:
    """One assistant message item of a response: its audio on the playback clock and its transcript."""

    id: str
    rid: int
    agent: str
    start: float | None = None  # when its first audio plays (loop time)
    audio_bytes: int = 0
    parts: list[str] = field(default_factory=list)
    text: str | None = None  # the final transcript
    committed: bool = False

    @property
    def total_ms(self) -> float:
        return self.audio_bytes / 2 / SAMPLE_RATE * 1000.0

    @property
    def end(self) -> float:
        return (self.start or 0.0) + self.total_ms / 1000.0

    def played_ms(self, now: float) -> float:
        if self.start is None:
            return 0.0
        return min(self.total_ms, max(0.0, (now - self.start) * 1000.0))

    def transcript(self) -> str:
        return (self.text if self.text is not None else "".join(self.parts)).strip()


@dataclass
class _Response:
    id: str
    rid: int
    agent: str
    calls: dict[str, ToolCallRequest] = field(default_factory=dict)
    items: dict[str, _Item] = field(default_factory=dict)
    cancelled: bool = False


class LiveConversation:
    """A conversation over a realtime voice API. Create, ``await start()``, then push and read events."""

    def __init__(
        self,
        session_id: str,
        *,
        scenario: str,
        directory: AgentDirectory,
        store: SessionStore,
        client: RealtimeClient,
        registry: ToolRegistry = REGISTRY,
        config: LiveConfig | None = None,
        transport: str | None = None,
        agent: str | None = None,
    ):
        self.session_id = session_id
        self.scenario_name = scenario
        self.requested_agent = agent
        self.directory = directory
        self.store = store
        self.client = client
        self.registry = registry
        self.config = config or LiveConfig()
        self.transport = transport
        self.channel = EventChannel(self.config.event_queue_size)
        self.state: SessionState | None = None
        self.history: list[Turn] = []
        self.active_rid: int | None = None
        self.playback_end = 0.0
        self.paused = False
        self.closed = False
        self.close_reason: str | None = None
        self.dropped_frames = 0
        self.late_deltas_dropped = 0  # audio of cancelled responses that arrived after the cancel
        self.responses_requested = 0  # response.create sent, response.created not yet seen
        self.turn_ended_at: float | None = None
        self.connection: RealtimeConnection | None = None
        self._lost_reported = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ctx: TurnContext | None = None
        self._sent_session: SessionConfig | None = None
        self._state_name: str | None = None
        self._rids = itertools.count(1)
        self._seq = itertools.count(1)
        # caller audio -> the socket
        self._resamplers: dict[int, StreamResampler] = {}
        self._pcm = bytearray()
        # a batch goes out at 90% of append_ms: the resampler's output wobbles by a few samples per
        # frame, and a 20 ms frame must not wait for the next one because it came out 2 samples short
        self._append_bytes = int(SAMPLE_RATE * self.config.append_ms / 1000 * 0.9) * 2
        self._audio_out: deque[bytes] = deque()
        self._audio_limit = max(1, self.config.input_backlog_ms // max(1, self.config.append_ms))
        self._control: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        # the service's side
        self._responses: dict[str, _Response] = {}
        self._current: _Response | None = None
        self._open_items: list[_Item] = []
        self._partials: dict[str, str] = {}
        self._playing_rid = 0
        self._tool_rounds = 0
        # tasks
        self._reader: asyncio.Task | None = None
        self._writer: asyncio.Task | None = None
        self._tool_task: asyncio.Task | None = None
        self._dtmf: list[str] = []
        self._dtmf_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._persist_tail: asyncio.Task | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "error": self._on_error,
            "input_audio_buffer.speech_started": self._on_speech_started,
            "input_audio_buffer.speech_stopped": self._on_speech_stopped,
            "conversation.item.input_audio_transcription.delta": self._on_transcription_delta,
            "conversation.item.input_audio_transcription.completed": self._on_transcription_completed,
            "conversation.item.input_audio_transcription.failed": self._on_transcription_failed,
            "response.created": self._on_response_created,
            "response.output_item.added": self._on_output_item,
            "response.output_item.done": self._on_output_item,
            "response.audio_transcript.delta": self._on_transcript_delta,
            "response.audio_transcript.done": self._on_transcript_done,
            "response.function_call_arguments.done": self._on_arguments_done,
            "response.done": self._on_response_done,
        }

    # --- lifecycle ------------------------------------------------------------------------------------
    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def start(self) -> None:
        """Load the session, connect and configure the realtime session, speak the greeting.

        Never raises for an unreachable service: the failure is an ``Error`` event and the
        conversation ends (the event stream says so).
        """
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
            return
        if self.closed:  # closed while connecting
            await self.connection.close()
            return
        self._sent_session = session
        self._reader = self._loop.create_task(self._read(), name=f"live-read-{self.session_id}")
        self._writer = self._loop.create_task(self._write(), name=f"live-write-{self.session_id}")
        if self.history:
            self._replay_history()
        await self._set_state("listening")
        if ctx.agent.greeting and not self.history:
            self._say_line(ctx.agent.greeting)

    async def _connect(self, session: SessionConfig) -> RealtimeConnection:
        """Connect with bounded retries (safe: nothing has been said on this connection yet)."""
        attempts = max(1, self.config.connect_attempts)
        delay = self.config.connect_backoff_s
        last: ProviderError | None = None
        for attempt in range(1, attempts + 1):
            try:
                async with asyncio.timeout(self.config.connect_timeout_s):
                    return await self.client.connect(session)
            except TimeoutError:
                last = RealtimeError(
                    f"realtime API did not accept the connection within {self.config.connect_timeout_s:g}s"
                )
            except ProviderError as exc:
                last = exc
            except Exception as exc:  # a misconfigured client: not worth retrying
                raise RealtimeError(
                    f"realtime client failed: {type(exc).__name__}", retryable=False
                ) from None
            if not getattr(last, "retryable", True) or attempt == attempts or self.closed:
                break
            logger.info("realtime connect attempt %d/%d failed (%s); retrying", attempt, attempts, last)
            await asyncio.sleep(delay)
            delay *= 2
        assert last is not None
        raise last

    async def close(self, reason: str = "closed") -> None:
        """Stop everything; commit what was heard; the event stream ends."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if self._loop is not None:
            now = self.loop_time()
            for item in list(self._open_items):
                self._commit_item(item, now)
        cancel_other_tasks([self._reader, self._writer, self._tool_task, self._dtmf_task, *self._tasks])
        if self.connection is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.config.close_timeout_s):
                    await self.connection.close()
        if self._persist_tail is not None:
            await asyncio.wait([self._persist_tail], timeout=self.config.close_timeout_s)
        await end_session(self)
        logger.info("live conversation closed: %s", reason)

    def events(self) -> AsyncIterator[Event]:
        """The event stream; ends when the conversation closes."""
        return self.channel.stream()

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
        buf = self._pcm
        if not buf and len(pcm) >= self._append_bytes:
            self._queue_audio(pcm)
            return True
        buf += pcm
        if len(buf) >= self._append_bytes:
            self._queue_audio(bytes(buf))
            buf.clear()
        return True

    def _queue_audio(self, chunk: bytes) -> None:
        if len(self._audio_out) >= self._audio_limit:
            drop_oldest_input(self, self._audio_out, "audio input is behind")
        self._audio_out.append(chunk)
        self._wake.set()

    async def push_text(self, text: str) -> None:
        """Typed input: a user message, then a response."""
        text = text.strip()
        if not text or self.closed:
            return
        self._barge_in("text")
        await self.emit(Transcript(self.session_id, text=text, final=True))
        self._user_turn(text)
        self._send(
            {
                "type": "conversation.item.create",
                "item": _message("user", "input_text", text),
            }
        )
        self._send({"type": "response.create"})
        await self._set_state("thinking")

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
        self._pcm.clear()
        self._audio_out.clear()
        self._send({"type": "input_audio_buffer.clear"})
        await self._set_state("paused")

    async def resume(self) -> None:
        self.paused = False
        await self._set_state("listening")

    # --- the socket ---------------------------------------------------------------------------------------
    def _send(self, event: dict[str, Any]) -> None:
        """Queue a client event (control events go before waiting caller audio)."""
        if not self.closed:
            if event["type"] == "response.create":
                self.responses_requested += 1
            self._control.append(event)
            self._wake.set()

    async def _write(self) -> None:
        conn = self.connection
        assert conn is not None
        control, audio, wake = self._control, self._audio_out, self._wake
        try:
            while True:
                if control:
                    await conn.send(control.popleft())
                elif audio:
                    await conn.send_json(_append_event(audio.popleft()))
                else:
                    wake.clear()
                    await wake.wait()
        except ProviderError as exc:
            await self._lost(exc)

    async def _read(self) -> None:
        conn = self.connection
        assert conn is not None
        handlers = self._handlers
        try:
            async for event in conn:
                kind = event["type"]
                if kind == AUDIO_DELTA:
                    self._on_audio_delta(event)
                    continue
                handler = handlers.get(kind)
                if handler is None:
                    continue
                try:
                    await handler(event)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug or a malformed event must not end the conversation
                    logger.exception("handling the realtime event %s failed", kind)
            raise RealtimeError("the realtime API closed the connection")
        except ProviderError as exc:
            await self._lost(exc)

    async def _lost(self, exc: BaseException) -> None:
        if self.closed or self._lost_reported:
            return
        self._lost_reported = True
        logger.warning("realtime connection lost: %s", exc)
        await self.emit(Error(self.session_id, code="realtime_dropped", message=str(exc), recoverable=False))
        await self.close("realtime connection dropped")

    # --- server events ------------------------------------------------------------------------------------
    async def _on_error(self, event: dict[str, Any]) -> None:
        error = event.get("error") or {}
        code = str(error.get("code") or error.get("type") or "error")
        message = str(error.get("message") or "")[:300]
        if code in BENIGN_ERRORS:
            logger.debug("realtime API: %s (%s)", code, message)
            return
        logger.warning("realtime API error %s: %s", code, message)
        await self.emit(Error(self.session_id, code="realtime_error", message=f"{code}: {message}"))

    async def _on_speech_started(self, event: dict[str, Any]) -> None:
        self._barge_in("speech")

    async def _on_speech_stopped(self, event: dict[str, Any]) -> None:
        self.turn_ended_at = self.loop_time()

    async def _on_transcription_delta(self, event: dict[str, Any]) -> None:
        item = str(event.get("item_id") or "")
        text = self._partials.get(item, "") + str(event.get("delta") or "")
        self._partials[item] = text
        if text.strip():
            await self.emit(Transcript(self.session_id, text=text.strip(), final=False))

    async def _on_transcription_completed(self, event: dict[str, Any]) -> None:
        self._partials.pop(str(event.get("item_id") or ""), None)
        text = str(event.get("transcript") or "").strip()
        if not text:
            return
        await self.emit(Transcript(self.session_id, text=text, final=True))
        self._user_turn(text)
        if self._state_name == "listening":
            await self._set_state("thinking")

    async def _on_transcription_failed(self, event: dict[str, Any]) -> None:
        self._partials.pop(str(event.get("item_id") or ""), None)
        error = event.get("error") or {}
        await self.emit(
            Error(
                self.session_id, code="stt_error", message=f"transcription failed: {error.get('message', '')}"
            )
        )

    async def _on_response_created(self, event: dict[str, Any]) -> None:
        body = event.get("response") or {}
        self.responses_requested = max(0, self.responses_requested - 1)
        rid = next(self._rids)
        response = _Response(id=str(body.get("id") or f"local-{rid}"), rid=rid, agent=self._agent_name())
        self._responses[response.id] = response
        self._current = response
        self.active_rid = rid

    def _response_for(self, response_id: Any) -> _Response | None:
        if response_id:
            return self._responses.get(response_id)
        return self._current

    def _item_of(self, response: _Response, item_id: Any) -> _Item:
        key = str(item_id or f"{response.id}-item")
        item = response.items.get(key)
        if item is None:
            item = response.items[key] = _Item(id=key, rid=response.rid, agent=response.agent)
            self._open_items.append(item)
        return item

    async def _on_output_item(self, event: dict[str, Any]) -> None:
        item = event.get("item") or {}
        response = self._response_for(event.get("response_id"))
        if response is None or item.get("type") != "function_call" or not item.get("call_id"):
            return
        self._note_call(response, item)

    @staticmethod
    def _note_call(response: _Response, item: dict[str, Any]) -> None:
        call_id = str(item["call_id"])
        known = response.calls.get(call_id)
        name = str(item.get("name") or (known.name if known else ""))
        arguments = str(item.get("arguments") or (known.arguments if known else ""))
        response.calls[call_id] = ToolCallRequest(id=call_id, name=name, arguments=arguments)

    def _on_audio_delta(self, event: dict[str, Any]) -> None:
        """The hot path: one agent audio chunk onto the playback clock and into the channel."""
        response = self._response_for(event.get("response_id"))
        if response is None or response.cancelled or self.closed:
            self.late_deltas_dropped += 1
            return
        pcm = base64.b64decode(event.get("delta") or "")
        if not pcm:
            return
        item = self._item_of(response, event.get("item_id"))
        now = self.loop_time()
        start = self.playback_end if self.playback_end > now else now
        if item.start is None:
            item.start = start
        item.audio_bytes += len(pcm)
        self.playback_end = start + len(pcm) / 2 / SAMPLE_RATE
        self._playing_rid = response.rid
        if self._state_name != "speaking":
            self._state_name = "speaking"
            self.channel.put_nowait(StateChange(self.session_id, state="speaking", agent=response.agent))
        self.channel.put_nowait(
            Audio(
                self.session_id,
                pcm=pcm,
                sample_rate=SAMPLE_RATE,
                seq=next(self._seq),
                response_id=response.rid,
            )
        )

    async def _on_transcript_delta(self, event: dict[str, Any]) -> None:
        response = self._response_for(event.get("response_id"))
        delta = str(event.get("delta") or "")
        if response is None or response.cancelled or not delta:
            return
        self._item_of(response, event.get("item_id")).parts.append(delta)
        await self.emit(
            AgentResponse(
                self.session_id, text=delta, agent=response.agent, final=False, response_id=response.rid
            )
        )

    async def _on_transcript_done(self, event: dict[str, Any]) -> None:
        response = self._response_for(event.get("response_id"))
        if response is None or response.cancelled:
            return
        item = self._item_of(response, event.get("item_id"))
        item.text = str(event.get("transcript") or "")
        if item.text.strip():
            await self.emit(
                AgentResponse(
                    self.session_id,
                    text=item.text.strip(),
                    agent=response.agent,
                    final=True,
                    response_id=response.rid,
                )
            )

    async def _on_arguments_done(self, event: dict[str, Any]) -> None:
        response = self._response_for(event.get("response_id"))
        if response is not None and event.get("call_id"):
            self._note_call(response, event)

    async def _on_response_done(self, event: dict[str, Any]) -> None:
        body = event.get("response") or {}
        response = self._responses.pop(str(body.get("id") or ""), None)
        if response is None and self._current is not None and not body.get("id"):
            response = self._current
        if response is None:
            return
        if self._current is response:
            self._current = None
        for output in body.get("output") or ():
            if not (
                isinstance(output, dict) and output.get("type") == "function_call" and output.get("call_id")
            ):
                continue
            known = response.calls.get(str(output["call_id"]))
            if known is None or not known.arguments:
                self._note_call(response, output)
        status = body.get("status")
        if response.cancelled or status == "cancelled":
            for call in response.calls.values():  # every call item gets an output, even unanswered
                self._send_output(call.id, _error_json("cancelled", "the response was interrupted"))
            self._commit_when_played(list(response.items.values()))  # cancelled by the service: plays out
            if self._state_name == "speaking":
                await self._set_state("listening")
            return
        self._commit_when_played(list(response.items.values()))
        if status == "failed":
            details = body.get("status_details") or {}
            error = details.get("error") or {}
            message = error.get("message") or error.get("code") or details.get("reason") or "unknown"
            await self.emit(
                Error(self.session_id, code="realtime_error", message=f"response failed: {message}")
            )
            await self._settle()
            return
        if response.calls:
            self._tool_task = asyncio.get_running_loop().create_task(self._run_calls(response))
            return
        await self._settle()

    # --- tools and handoffs ----------------------------------------------------------------------------
    async def _run_calls(self, response: _Response) -> None:
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
                    reply(call, _error_json("tool_rounds_exceeded", "too many tool rounds in a row"))
                await self.emit(
                    Error(
                        self.session_id,
                        code="tool_rounds_exceeded",
                        message=f"stopped after {self.config.max_tool_rounds} tool rounds",
                    )
                )
                await self._settle()
                return
            ctx = self._ctx = await self.directory.context(self.state)
            outcome = await run_tool_round(self, ctx, calls, reply)
        except asyncio.CancelledError:
            for call_id in unanswered:
                self._send_output(call_id, _error_json("interrupted", "the caller interrupted"))
            raise
        if outcome is None:
            self._send({"type": "response.create"})
            return
        self._ctx = outcome.context
        self._update_session(outcome.context)
        if outcome.announced:
            line = handoff_line(outcome.context.agent, outcome.returning)
            if line:
                self._say_line(line)
            else:
                await self._settle()
        else:
            self._send({"type": "response.create"})  # the new agent answers the pending request

    def _send_output(self, call_id: str, content: str) -> None:
        self._send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": content},
            }
        )

    async def add_turn(self, turn: Turn) -> None:
        """History turn (the ToolHost side of :func:`run_tool_round`)."""
        self._add_turn(turn)

    async def emit(self, event: Event) -> None:
        if not self.closed:
            await self.channel.put(event)

    # --- the session ------------------------------------------------------------------------------------
    def _session_config(self, ctx: TurnContext) -> SessionConfig:
        agent = ctx.agent
        temperature = agent.temperature if agent.temperature is not None else None
        if temperature is not None and not 0.6 <= temperature <= 1.2:  # the realtime models' range
            temperature = None
        return SessionConfig(
            instructions=ctx.system_prompt,
            voice=agent_voice(agent, self.config.default_voice()).name,
            tools=tuple(t.to_realtime() for t in ctx.tools),
            silence_duration_ms=int(agent.vad_silence_timeout_ms or self.config.silence_timeout_ms()),
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

    def _say_line(self, line: str) -> None:
        self._send(
            {"type": "response.create", "response": {"instructions": self.config.say_line.format(line=line)}}
        )

    def _replay_history(self) -> None:
        """A resumed session: the model gets the earlier conversation as items."""
        for turn in self.history[-self.config.history_turns :]:
            if turn.role == "user":
                item = _message("user", "input_text", turn.content)
            elif turn.role == "assistant":
                item = _message("assistant", "text", turn.content)
            elif turn.role == "tool":
                note = f"Earlier, tool {turn.tool_name} returned: {turn.content}"
                item = _message("system", "input_text", note)
            else:
                continue
            self._send({"type": "conversation.item.create", "item": item})

    # --- state, history, playback --------------------------------------------------------------------------
    async def _set_state(self, name: str) -> None:
        if name != self._state_name:
            self._state_name = name
            await self.emit(StateChange(self.session_id, state=name, agent=self._agent_name()))

    async def _settle(self) -> None:
        """After a response: back to listening, or the end when the agent ended the conversation."""
        if self.state is not None and self.state.memory.get("conversation_ended"):
            wait = self.playback_end - self.loop_time()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.close(ENDED_BY_AGENT)
            return
        await self._set_state("listening")
        self._spawn(self._refresh_session())

    def _agent_name(self) -> str:
        return self.state.active_agent if self.state is not None else ""

    def _user_turn(self, text: str) -> None:
        self._tool_rounds = 0
        self._add_turn(Turn(role="user", content=text, agent=self._agent_name()))

    def _add_turn(self, turn: Turn) -> None:
        """In memory now; in the store in order (one write after the other, off the event path)."""
        self.history.append(turn)
        if self.state is not None:
            self._persist_tail = asyncio.get_running_loop().create_task(
                self._persist(self._persist_tail, turn)
            )

    async def _persist(self, previous: asyncio.Task | None, turn: Turn) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        assert self.state is not None
        try:
            await self.store.append_turn(self.state, turn)
        except Exception as exc:
            logger.warning("saving a %s turn failed: %s", turn.role, exc)

    def _commit_when_played(self, items: list[_Item]) -> None:
        pending = [i for i in items if not i.committed]
        if not pending:
            return
        delay = max(0.0, max(i.end for i in pending) - self.loop_time())
        if delay == 0.0:
            for item in pending:
                self._commit_item(item, None)
        else:
            self._spawn(self._commit_later(pending, delay))

    async def _commit_later(self, items: list[_Item], delay: float) -> None:
        await asyncio.sleep(delay)
        for item in items:
            self._commit_item(item, None)

    def _commit_item(self, item: _Item, now: float | None) -> None:
        """The assistant turn of one item: all of it, or (``now`` given) what was heard by then."""
        if item.committed:
            return
        item.committed = True
        with contextlib.suppress(ValueError):
            self._open_items.remove(item)
        text = item.transcript()
        if now is not None and item.audio_bytes:
            played, total = item.played_ms(now), item.total_ms
            if played < total - 1.0:
                words = text.split()
                heard = words[: int(len(words) * played / total)]
                text = " ".join(heard) + " …" if heard else ""
        elif now is not None and not item.audio_bytes:
            text = ""  # nothing of it was played
        if text:
            self._add_turn(Turn(role="assistant", content=text, agent=item.agent))

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- barge-in -------------------------------------------------------------------------------------------
    def _agent_busy(self) -> bool:
        working = self._tool_task is not None and not self._tool_task.done()
        return self._current is not None or working or self.loop_time() < self.playback_end

    def _barge_in(self, cause: str) -> None:
        """Stop the agent NOW (synchronously): playback, response, tools; truncate what was not heard."""
        if self._loop is None or not self._agent_busy():
            return
        now = self.loop_time()
        playing = now < self.playback_end
        response = self._current
        rid = self._playing_rid if playing else (response.rid if response is not None else 0)
        working = self._tool_task is not None and not self._tool_task.done()
        interrupted = playing or working or (response is not None and not response.cancelled)
        purged = self.channel.purge(lambda e: isinstance(e, Audio))
        if playing or purged:
            self.channel._append(StopAudio(self.session_id, reason="barge_in", response_id=rid))
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
        self.playback_end = now
        self.active_rid = None
        if self._tool_task is not None and not self._tool_task.done():
            self._tool_task.cancel()
        if interrupted or purged:  # per turn at most: DEBUG, the event stream tells clients anyway
            logger.debug("barge-in (%s): response %s stopped", cause, rid)


def _message(role: str, content_type: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": content_type, "text": text}]}


def _error_json(kind: str, message: str) -> str:
    return json.dumps({"error": {"type": kind, "message": message}})
