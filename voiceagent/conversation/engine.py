"""The cascade conversation engine: VAD + streaming STT -> LLM with tools -> clause-streamed TTS.

One :class:`Conversation` per session, transport-agnostic (architecture rule 1): a transport
pushes audio/text/DTMF in and renders the typed events of :mod:`voiceagent.conversation.events`.
What it shares with the realtime pipeline (session, history, keypad, pause, barge-in skeleton,
the end of a response) is :class:`~voiceagent.conversation.core.ConversationCore`; this module is
the cascade's own part.

A turn, as code: frames -> ``_on_frame`` (VAD, barge-in, utterance start/end) -> the utterance
task feeds the STT stream -> at ``VAD_SILENCE_TIMEOUT`` of silence the final text starts a
response task -> ``_respond`` streams the LLM with the active agent's rendered prompt, history and
tools, runs tool calls through the registry (several per round, bounded rounds), switches agents
on handoff tools, and hands finished clauses to a :class:`~voiceagent.conversation.speaker.Speaker`
that synthesises them while the LLM is still streaming.

Barge-in, in two steps (:mod:`voiceagent.conversation.listening` decides when): caller speech over
the agent lasting ``MIN_INTERRUPTION_MS`` *holds* the answer - its not-yet-taken audio is purged,
``StopAudio`` goes out synchronously, its speaker stops but keeps what was not heard. The caller's
words then decide: noise or a backchannel resumes the answer from the interrupted clause (the
history notes the interruption where it happened); anything else abandons it (LLM and TTS
cancelled) and records in the history only what was played up to the hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Unpack

from voiceagent.conversation.common import chat_request, history_lines, persist, run_tool_round
from voiceagent.conversation.context import AgentDirectory, TurnContext, resolve_tools
from voiceagent.conversation.core import DTMF_DIGITS, ENDED_BY_AGENT, ConversationCore, SessionArgs
from voiceagent.conversation.ducking import CascadeDucking
from voiceagent.conversation.events import AgentResponse, Audio, Error, StopAudio
from voiceagent.conversation.head_start import HeadStarts
from voiceagent.conversation.listening import CascadeListening, ListeningConfig, VADLike
from voiceagent.conversation.providers import (
    ChatProvider,
    ProviderError,
    STTProvider,
    ToolCallRequest,
    TTSProvider,
    TurnModel,
)
from voiceagent.conversation.session import PERSON, Turn
from voiceagent.conversation.speaker import Speaker, SpeechPace
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.text import ClauseSplitter
from voiceagent.conversation.timing import TurnTiming

# the engine's public face: transports, the runtime and agents_app import these names from here
__all__ = [
    "DTMF_DIGITS",
    "ENDED_BY_AGENT",
    "FALLBACK_LINE",
    "AgentDirectory",
    "Conversation",
    "EngineConfig",
    "TurnContext",
    "VADLike",
    "resolve_tools",
]

logger = logging.getLogger("voiceagent.conversation")

FALLBACK_LINE = "I'm sorry, I'm having trouble answering right now. Could you say that again?"


@dataclass
class EngineConfig(ListeningConfig):
    llm_timeout_s: float = 15.0
    fallback_line: str = FALLBACK_LINE
    head_start: Callable[[], bool] = lambda: True  # REPLY_HEAD_START: see head_start.py


class Conversation(CascadeListening, CascadeDucking, HeadStarts, ConversationCore):
    """A voice conversation on one session. Create, ``await start()``, then push and read events."""

    config: EngineConfig

    def __init__(
        self,
        session_id: str,
        *,
        stt: STTProvider,
        tts: TTSProvider,
        chat: ChatProvider,
        vad: VADLike,
        config: EngineConfig | None = None,
        turn_model: TurnModel | None = None,
        **session: Unpack[SessionArgs],
    ):
        super().__init__(session_id, config or EngineConfig(), **session)
        self.stt, self.tts, self.chat, self.vad = stt, tts, chat, vad
        self.turn_model = turn_model  # None: the end of a turn is judged from the words alone
        self._response_task: asyncio.Task | None = None
        self._speaker: Speaker | None = None
        self._pace = SpeechPace()  # the voice's pace, measured on what it played (see Speaker)
        self._pending: tuple[int, str, Speaker] | None = None  # assistant speech to commit once played
        self._held: Speaker | None = None  # an answer stopped by the caller, not abandoned yet
        self._current_agent: AgentSpec | None = None
        self._init_listening()

    # --- the core's hooks -------------------------------------------------------------------------
    async def _open(self, ctx: TurnContext) -> bool:
        self._begin_listening()
        return True

    def _speak(self, line: str, agent: AgentSpec) -> None:
        self._begin_response(self._speak_line(line, agent))

    async def _answer_text(self, text: str) -> None:
        self._start_turn(text)

    def _drop_input(self) -> None:
        self._cancel_utterance()

    def _pipeline_tasks(self) -> list[asyncio.Task | None]:
        utterance_task = self._utterance.task if self._utterance is not None else None
        # the speakers' synthesis too: one left waiting on a provider outlived its conversation
        # and was destroyed pending when the server stopped
        speakers = [s.task for s in (self._speaker, self._held) if s is not None]
        return [self._response_task, utterance_task, *speakers, *self._head_start_tasks()]

    def _commit_heard(self, now: float) -> None:
        if self._pending is not None:
            self._commit(self._take_pending(), now)

    # --- output and barge-in ----------------------------------------------------------------------
    def emit_audio(self, pcm: bytes, sample_rate: int, rid: int) -> float:
        """Queue an audio chunk on the playback clock; returns when it starts playing."""
        now = self.loop_time()
        start = max(now, self.playback_end)
        self.playback_end = start + len(pcm) / 2 / sample_rate
        self.note_agent_audio(pcm, sample_rate, start)
        self.channel.put_nowait(
            Audio(self.session_id, pcm=pcm, sample_rate=sample_rate, seq=next(self._seq), response_id=rid)
        )
        return start

    def _agent_busy(self) -> bool:
        responding = self._response_task is not None and not self._response_task.done()
        return responding or self._held is not None or self.loop_time() < self.playback_end

    def _hold_answer(self) -> bool:
        """The caller has talked over the agent long enough: stop its audio now (``StopAudio``,
        queued audio purged) but keep its answer, to resume or abandon once the caller's words are
        known. False when there was nothing to stop."""
        speaker = self._speaker
        if self._held is not None or speaker is None or self._loop is None:
            return False
        now = self.loop_time()
        audio_out = now < self.playback_end
        ducked = self._duck.since if self._duck is not None else None
        if not speaker.hold(now if ducked is None else ducked):  # ducked: not heard under the caller
            return False
        self._duck_over(stopping=audio_out)
        self._held = speaker
        rid = speaker.rid
        self.channel.purge(lambda e: isinstance(e, Audio) and e.response_id == rid)
        if audio_out:
            self.channel._append(StopAudio(self.session_id, reason="barge_in", response_id=rid))
            speaker.timing.barge_in_ms = round((self.loop_time() - now) * 1000.0, 3)
        self.playback_end = now
        self._echo.cut(now)
        self.log.debug("caller over the agent: response %s held", rid)
        return True

    def _resume_answer(self, heard: str) -> None:
        """What held the answer was noise or a backchannel: say the interrupted clause again and go
        on; the history shows the interruption (``heard``) where it happened."""
        speaker, self._held = self._held, None
        if speaker is None or self.closed:
            return
        note = f'[caller: "{heard}"; resumed]' if heard else "[caller noise; resumed]"
        speaker.resume(note, self.loop_time())
        rid = speaker.rid
        self.active_rid = rid
        if self._pending is not None and self._pending[2] is speaker:  # its response had finished
            speaker.when_done(lambda: self._commit_when_played(self.playback_end, self._commit_pending, rid))
        self.log.debug("response %s resumed after %s", rid, note)

    def _interrupt(self, now: float) -> tuple[int, bool, str | None]:
        """Cancel the response (LLM and TTS) and its queued audio; commit what was played by ``now``
        (by the hold, for an answer the caller had already stopped)."""
        rid = self.active_rid
        speaker, self._speaker = self._speaker, None  # handled: a second call (new turn) finds nothing
        held, self._held = self._held, None
        ducked = self._duck_over(stopping=now < self.playback_end)
        heard = now if ducked is None else ducked  # played ducked under the caller's words: not heard
        self._echo.cut(now)
        if speaker is not None and speaker.committed:  # played in full and recorded: nothing to stop
            speaker = None
        audio_out = now < self.playback_end or (speaker is not None and bool(speaker.spoken) and held is None)
        if rid is not None:
            self.channel.purge(lambda e: isinstance(e, Audio) and e.response_id == rid)
        if self._response_task is not None and not self._response_task.done():
            self._response_task.cancel()
        if speaker is not None:
            speaker.cancel()
        pending = self._take_pending()
        if pending is not None:
            self._commit(pending, heard)
        if (
            speaker is not None
            and (speaker.spoken or speaker.played_by(heard))
            and (pending is None or pending[2] is not speaker)
        ):
            # interrupted while still streaming (maybe still in its first clause): what was played
            # so far is what the caller heard
            self._commit((rid or 0, self._agent_name(), speaker), heard)
        if rid is None and not audio_out:  # only a task that had not begun a response was dropped
            return 0, False, None
        return rid or 0, audio_out, ", audio stopped" if audio_out else ", before any audio"

    def played_out(self) -> None:
        """As the core's, and what was said is committed now (a held answer waits for the
        caller's words, not for playback). The echo gate forgets the agent's audio: a client that
        plays it the moment it arrives sends no echo of it on the playback clock, and the caller's
        quieter syllables would otherwise be taken for the agent's voice (a word cut off a turn)."""
        if self._loop is None or self._held is not None:
            return
        super().played_out()
        self._echo.forget()
        if self._pending is not None:
            self._commit_pending(self._pending[0])

    # --- responses --------------------------------------------------------------------------------
    def _begin_response(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._response_task is not None and not self._response_task.done():
            self._response_task.cancel()
        self._response_task = asyncio.get_running_loop().create_task(coro)

    def _start_turn(self, text: str) -> None:
        if self.closed:
            return
        self._barge_in("new turn")
        if self._pending is not None:  # it played out just now, before its commit ran: it goes first
            self._commit(self._take_pending(), float("inf"))
        if self._while_taken_over(text):  # a person has the call: stored, not answered
            self._drop_head_start("a person has the call")
            return
        self._begin_response(self._respond(text))

    def _person_says(self, text: str, by: str) -> None:
        self._begin_response(self._speak_person(text, by))

    async def _speak_person(self, text: str, by: str) -> None:
        assert self.state is not None
        agent = self._current_agent or (await self.directory.context(self.state)).agent
        await self._speak_line(text, agent, by=by)

    def _answer_history(self) -> None:
        self._begin_response(self._respond(None))

    def _new_response(self, by: str | None = None) -> tuple[int, Speaker]:
        """A response's id and speaker; ``by``: a person's line (its own timing: the caller's turn
        is not the agent's to answer)."""
        self._duck_over(stopping=False)  # a duck the last answer ended under: full gain again
        rid = next(self._rids)
        self.active_rid = rid
        timing = TurnTiming() if by else self.clock.current()
        speaker = self._speaker = Speaker(self, rid, timing, self._pace)
        speaker.by = by
        return rid, speaker

    async def _speak_line(self, text: str, agent: AgentSpec, by: str | None = None) -> None:
        """Say a fixed line (greeting; ``by``: a person's, in the agent's voice) as its own response."""
        rid, speaker = self._new_response(by)
        try:
            await self._set_state("speaking", agent.name)
            await self._say(speaker, rid, text, agent, by or "")
            await speaker.finish()
            self._hold_for_commit(rid, agent.name, speaker)
        finally:
            if self.active_rid == rid:
                await self._settle()

    async def _say(self, speaker: Speaker, rid: int, text: str, agent: AgentSpec, by: str = "") -> None:
        """A fixed line of a response: its text as a final ``AgentResponse``, then its speech."""
        await self.emit(
            AgentResponse(self.session_id, text=text, agent=agent.name, final=True, response_id=rid, by=by)
        )
        await speaker.say(text, agent)

    def _hold_for_commit(self, rid: int, agent: str, speaker: Speaker) -> None:
        """Record the assistant's words once they have played (or when interrupted)."""
        previous = self._take_pending()
        if previous is not None:
            self._commit(previous, self.loop_time())
        self._pending = (rid, agent, speaker)
        if self.playback_end > self.loop_time():  # still to play: the caller has it, the store too
            who, person = (speaker.by, PERSON) if speaker.by else (agent, None)
            self._write_sent(rid, speaker.all_spoken(), who, person)
        self._commit_when_played(self.playback_end, self._commit_pending, rid)

    def _commit_pending(self, rid: int) -> None:
        if self._pending is None or self._pending[0] != rid:
            return
        speaker = self._pending[2]
        if speaker.held:  # stopped by the caller: committed when resumed and played, or abandoned
            return
        if self.active_rid == rid and self.loop_time() < self.playback_end:  # resumed: plays on
            self._commit_when_played(self.playback_end, self._commit_pending, rid)
            return
        self._commit(self._take_pending(), float("inf"))

    def _take_pending(self) -> tuple[int, str, Speaker] | None:
        pending, self._pending = self._pending, None
        return pending

    def _commit(self, pending: tuple[int, str, Speaker] | None, now: float) -> None:
        """A response's heard words into the history, once: a "new turn" barge-in may still find
        the speaker of an answer already committed while its task saves the state."""
        if pending is None or self.state is None:
            return
        rid, agent, speaker = pending
        if speaker.committed:
            return
        text = speaker.spoken_until(now)
        interrupted = now != float("inf")
        cut = False
        if not text:
            if not (interrupted and speaker.played_by(now)):
                self._withdraw_sent(rid)
                return
            text, cut = "…", True  # the caller heard it begin and cut it before its first whole word
        elif interrupted and (speaker.cut or text != speaker.all_spoken()):
            text, cut = text + " …", True  # interrupted here
        speaker.committed = True
        self._add_assistant_turn(text, agent, speaker.timing, cut, sent_key=rid, by=speaker.by)

    async def _respond(self, user_text: str | None) -> None:
        """One user turn: history, LLM rounds with tools and handoffs, streamed speech (``None``:
        the caller's turn is in the history already - a handback answers it)."""
        assert self.state is not None
        state = self.state
        rid, speaker = self._new_response()
        if user_text is not None:
            self._add_turn(Turn(role="user", content=user_text, agent=state.active_agent))  # saved at once
        await self._set_state("thinking", state.active_agent)
        ctx = await self.directory.context(state)
        self._current_agent = ctx.agent
        messages = self._messages(ctx)
        said: list[str] = []  # this response's words so far: a handoff's line does not repeat them
        try:
            for _round in range(self.config.max_tool_rounds):
                text, calls, failed = await self._llm_round(ctx, messages, speaker, rid)
                said.append(text)
                if failed:
                    await self._say(speaker, rid, self.config.fallback_line, ctx.agent)
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
                spoken = " ".join(said)
                next_ctx, announced = await self._run_tools(ctx, calls, messages, speaker, rid, spoken)
                if announced:
                    break
                if next_ctx is not ctx:  # discrete handoff: the new agent continues this turn
                    ctx = next_ctx
                    self._current_agent = ctx.agent
                    messages[0] = {"role": "system", "content": ctx.system_prompt}
            else:
                await self._too_many_tool_rounds()
            await speaker.finish()
            self._hold_for_commit(rid, state.active_agent, speaker)
        except asyncio.CancelledError:
            speaker.cancel()
            raise
        finally:
            await persist(self.store.save(state), "saving the session state", self.session_id)
        if self.active_rid == rid:
            await self._settle()

    def _messages(self, ctx: TurnContext, coming: Turn | None = None) -> list[dict[str, Any]]:
        """The model's context: the system prompt and the history (and the ``coming`` turn, not
        added yet: a head start's)."""
        turns = self.history if coming is None else [*self.history, coming]
        messages: list[dict[str, Any]] = [{"role": "system", "content": ctx.system_prompt}]
        for role, text in history_lines(turns[-self.config.history_turns :]):
            messages.append({"role": role, "content": text})
        return messages

    async def _llm_round(
        self, ctx: TurnContext, messages: list[dict[str, Any]], speaker: Speaker, rid: int
    ) -> tuple[str, list[ToolCallRequest], bool]:
        """Stream one model round; clauses go to TTS as they complete. Returns (text, tool calls, failed)."""
        agent = ctx.agent
        request = chat_request(ctx, messages, self.state.memory)
        splitter = ClauseSplitter()
        parts: list[str] = []
        calls: list[ToolCallRequest] = []
        first = True
        timing = speaker.timing
        timing.mark("llm_request", self.loop_time())  # the first round's (marks keep their first)
        try:
            ahead = await self._take_head_start(request, speaker)  # begun in the caller's pause
            stream = ahead if ahead is not None else self.chat.stream(request)
            async with asyncio.timeout(self.config.llm_timeout_s):
                async for chunk in stream:
                    if chunk.text:
                        if first:
                            first = False
                            timing.mark("llm_first_token", self.loop_time())
                            await self._set_state("speaking", agent.name)
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
                        timing.mark("llm_first_token", self.loop_time())
                        calls.extend(chunk.tool_calls)
                    if chunk.usage is not None:
                        timing.add("llm_tokens_in", chunk.usage.input_tokens)
                        timing.add("llm_tokens_out", chunk.usage.output_tokens)
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
        speaker: Speaker,
        rid: int,
        said: str = "",
    ) -> tuple[TurnContext, bool]:
        """Execute a round's tool calls (handoffs last); a slow round's fillers are spoken lines of
        this response; an announced handoff's line leaves out what the response ``said`` already.
        Returns (context to continue with, announced?)."""
        handoff = await run_tool_round(
            self,
            ctx,
            calls,
            lambda call, content: messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": content}
            ),
            say_filler=lambda line, agent: self._say(speaker, rid, line, agent),
        )
        if handoff is None:
            return ctx, False
        if handoff.announced:
            target = handoff.context.agent
            line = handoff.line_after(said)
            if line:
                await self._set_state("speaking", target.name)
                await self._say(speaker, rid, line, target)
            self._current_agent = target
        return handoff.context, handoff.announced
