"""The live pipeline's realtime server events: responses, their items, and what they become.

A mixin of :class:`~voiceagent.conversation.live.LiveConversation`. Each handler turns one
server event into conversation events and bookkeeping: input transcription (``Transcript``
interim / final; the user turn is in the history the moment it is final), responses and their
assistant items (audio deltas on the playback clock as ``Audio`` at 24 kHz, their transcript as
``AgentResponse`` deltas then final), tool calls collected per response and run when it is done.
Late deltas of a cancelled response are dropped.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.common import error_content
from voiceagent.conversation.core import words_heard
from voiceagent.conversation.events import AgentResponse, Audio, Error, EventChannel, StateChange
from voiceagent.conversation.live_turns import CallerTurns
from voiceagent.conversation.providers import ToolCallRequest
from voiceagent.conversation.timing import TurnClock, TurnTiming
from voiceagent.llm.realtime import SAMPLE_RATE

logger = logging.getLogger("voiceagent.conversation.live")

# Answers that only mean a race we already handle (the response ended before our cancel arrived,
# or the service started a response itself before our response.create).
BENIGN_ERRORS = frozenset({"response_cancel_not_active", "conversation_already_has_active_response"})


@dataclass
class AssistantItem:
    """One assistant message item of a response: its audio on the playback clock and its transcript."""

    id: str
    rid: int
    agent: str
    start: float | None = None  # when its first audio plays (loop time)
    audio_bytes: int = 0
    parts: list[str] = field(default_factory=list)
    text: str | None = None  # the final transcript
    committed: bool = False
    timing: TurnTiming | None = None  # the turn it answers (its response's)
    by: str | None = None  # a person's line said in the agent's voice (a takeover): who

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

    def heard(self, now: float | None) -> str:
        """Its assistant turn: the whole transcript, or (``now`` given) what was heard by then."""
        text = self.transcript()
        if now is None:
            return text
        words = text.split()
        heard = words_heard(words, self.start or 0.0, self.end, now, slack=0.001) if self.audio_bytes else []
        if heard and len(heard) == len(words):
            return text
        if heard:
            return " ".join(heard) + " …"  # interrupted here
        # Cut before its first whole word, or before its transcript (which trails the audio) came:
        # the caller heard it begin, so the history keeps the turn.
        return "…" if self.played_ms(now) > 0.0 else ""


@dataclass
class LiveResponse:
    id: str
    rid: int
    agent: str
    calls: dict[str, ToolCallRequest] = field(default_factory=dict)
    items: dict[str, AssistantItem] = field(default_factory=dict)
    cancelled: bool = False
    timing: TurnTiming | None = None
    by: str | None = None  # the response says a person's line (a takeover): who


class RealtimeEvents(CallerTurns):
    """The server-event side of a live conversation (its state lives on the conversation)."""

    session_id: str
    channel: EventChannel
    closed: bool
    playback_end: float
    active_rid: int | None
    turn_ended_at: float | None
    clock: TurnClock
    _speech_started_ms: int | None
    responses_requested: int
    late_deltas_dropped: int
    _state_name: str | None
    _responses: dict[str, LiveResponse]
    _current: LiveResponse | None
    _open_items: list[AssistantItem]
    _partials: dict[str, str]
    _playing_rid: int
    _tool_task: asyncio.Task | None
    _rids: itertools.count[int]
    _seq: itertools.count[int]

    if TYPE_CHECKING:  # the conversation's own (declared here only for type checkers)

        def loop_time(self) -> float: ...

        async def emit(self, event: Any) -> None: ...

        async def _set_state(self, name: str, agent: str | None = None) -> None: ...

        async def _settle(self) -> None: ...

        def _agent_name(self) -> str: ...

        def _barge_in(self, cause: str) -> None: ...

        def _user_turn(self, text: str) -> None: ...

        def _send_output(self, call_id: str, content: str) -> None: ...

        def _commit_played(self, items: list[AssistantItem]) -> None: ...

        async def _run_calls(self, response: LiveResponse) -> None: ...

    def _event_handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[None]]]:
        """The handler of each server event (audio deltas, the hot path, are dispatched before)."""
        return {
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

    async def _on_error(self, event: dict[str, Any]) -> None:
        error = event.get("error") or {}
        code = str(error.get("code") or error.get("type") or "error")
        message = str(error.get("message") or "")[:300]
        if code in BENIGN_ERRORS:
            logger.debug("realtime API: %s (%s)", code, message)
            return
        logger.warning("realtime API error %s: %s", code, message)
        await self.emit(Error(self.session_id, code="realtime_error", message=f"{code}: {message}"))

    async def _on_response_created(self, event: dict[str, Any]) -> None:
        body = event.get("response") or {}
        self.responses_requested = max(0, self.responses_requested - 1)
        rid = next(self._rids)
        response = LiveResponse(id=str(body.get("id") or f"local-{rid}"), rid=rid, agent=self._agent_name())
        response.by, self._create_by = self._create_by, None  # one create is in flight at a time
        response.timing = TurnTiming() if response.by else self.clock.current()
        self._responses[response.id] = response
        self._current = response
        self.active_rid = rid

    def _response_for(self, response_id: Any) -> LiveResponse | None:
        if response_id:
            return self._responses.get(response_id)
        return self._current

    def _item_of(self, response: LiveResponse, item_id: Any) -> AssistantItem:
        key = str(item_id or f"{response.id}-item")
        item = response.items.get(key)
        if item is None:
            item = response.items[key] = AssistantItem(
                id=key, rid=response.rid, agent=response.agent, timing=response.timing, by=response.by
            )
            self._open_items.append(item)
        return item

    async def _on_output_item(self, event: dict[str, Any]) -> None:
        item = event.get("item") or {}
        response = self._response_for(event.get("response_id"))
        if response is None or item.get("type") != "function_call" or not item.get("call_id"):
            return
        self._note_call(response, item)

    @staticmethod
    def _note_call(response: LiveResponse, item: dict[str, Any]) -> None:
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
            if item.timing is not None:  # once per item; the mark keeps the response's first
                item.timing.mark("first_audio_out", now)
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
                self.session_id,
                text=delta,
                agent=response.agent,
                final=False,
                response_id=response.rid,
                by=response.by or "",
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
                    by=response.by or "",
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
            self._next_response()
            return
        if self._current is response:
            self._current = None
        self._next_response()
        usage = body.get("usage")
        if isinstance(usage, dict) and response.timing is not None:
            response.timing.add("llm_tokens_in", usage.get("input_tokens"))
            response.timing.add("llm_tokens_out", usage.get("output_tokens"))
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
                self._send_output(call.id, error_content("cancelled", "the response was interrupted"))
            self._commit_played(list(response.items.values()))  # cancelled by the service: plays out
            if self._state_name == "speaking":
                await self._set_state("listening")
            return
        self._commit_played(list(response.items.values()))
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
        if self._tool_task is not None and not self._tool_task.done():
            await self._set_state("thinking")  # a filler while tools run: the round goes on
            return
        await self._settle()
