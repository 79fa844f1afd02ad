"""A head start on the answer: the model's first round, and the speech of its first clause, begun
while the end of the caller's turn is still being waited for.

Why: after words the end-of-turn rule is not sure of (the recogniser doubts them, the turn model
hears more coming) it waits 0.5-1.6 s of silence before the turn ends; only then did the answer
begin, and the caller heard the model's time to its first words (0.3-0.8 s for a cloud model)
and the voice's time to a clause's first audio (0.1-0.3 s for Piper) on top. Begun at the pause's
hypothesis, both run inside that wait. LiveKit Agents calls this "preemptive generation" (off by
default); Pipecat 1.14 has none.

Safe by construction:

- only the model's round runs ahead. Its tool calls are requests; tools run (as always) once the
  turn is the caller's, in the engine's ``_respond``. Nothing is emitted (no state, text, audio)
  until the head start is adopted;
- it is adopted only when the request the turn makes is EQUAL to the one it made: the same
  history, the same words, agent, tools, settings and memory (copied when it began). Otherwise it
  is dropped and the model asked again. The offline rules give the same answer to the same
  request; a cloud model an equally good sample;
- it is dropped, its model stream and synthesis closed, when the caller speaks again, when another
  pause's words replace it, when the turn is not answered by the agent (a person has the call),
  and when the conversation closes.

The cost: a dropped head start was a model request and a clause's synthesis for nothing. It is
only begun for words that sound complete (an unfinished clause waits the maximum anyway and is
usually continued) while the agent is silent; ``REPLY_HEAD_START=false`` turns it off.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.common import chat_request
from voiceagent.conversation.providers import ChatChunk, ChatProvider, ChatRequest, TTSProvider
from voiceagent.conversation.session import Turn
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.conversation.text import ClauseSplitter
from voiceagent.conversation.turn_taking import TurnTaking, endpoint_ms
from voiceagent.speech.replay_buffer import ReplayBuffer

if TYPE_CHECKING:
    from voiceagent.conversation.context import AgentDirectory, TurnContext
    from voiceagent.conversation.session import SessionState
    from voiceagent.conversation.speaker import Speaker
    from voiceagent.conversation.specs import AgentSpec

__all__ = ["COUNTS", "ClauseAudio", "HeadStart", "HeadStarts", "on_outcome"]

logger = logging.getLogger("voiceagent.conversation")

# what head starts did since the process started, and who else is told (the Prometheus counter)
COUNTS: dict[str, int] = {"begun": 0, "used": 0, "dropped": 0}
_LISTENERS: list[Callable[[str], None]] = []


def on_outcome(listener: Callable[[str], None]) -> None:
    """``listener(outcome)`` for each head start begun, used or dropped (process-wide)."""
    _LISTENERS.append(listener)


def _count(outcome: str) -> None:
    COUNTS[outcome] += 1
    for listener in _LISTENERS:
        listener(outcome)


Build = Callable[[], Awaitable[tuple[ChatRequest, VoiceSpec]]]  # the turn's request and voice


class Dropped(Exception):
    """What a reader of a head start's model round or audio gets when it was cancelled under it."""


async def _close(stream: object) -> None:
    """Close an async generator at once (a provider's stream: an HTTP response, a pool slot)."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


class ClauseAudio:
    """A clause's speech synthesised ahead, replayed as it comes; when its synthesis failed before
    any audio (or the voice changed), synthesised again the usual way."""

    def __init__(self, tts: TTSProvider, text: str, voice: VoiceSpec) -> None:
        self.text, self.voice = text, voice
        self._audio = ReplayBuffer()
        self.task = asyncio.get_running_loop().create_task(self._run(tts), name="head-start-tts")

    async def _run(self, tts: TTSProvider) -> None:
        try:
            audio = tts.synthesize(self.text, self.voice)
            try:
                async for pcm in audio:
                    self._audio.add(pcm)
            finally:  # cancelled: the voice's process or pool slot is released now
                await _close(audio)
        except asyncio.CancelledError:
            self._audio.close(Dropped("cancelled"))
            raise
        except Exception as exc:  # the speaker synthesises it again (and reports a second failure)
            self._audio.close(exc)
            return
        self._audio.close()

    def cancel(self) -> None:
        self.task.cancel()

    async def stream(
        self, voice: VoiceSpec, again: Callable[[], AsyncIterator[bytes]]
    ) -> AsyncIterator[bytes]:
        """The clause's audio in ``voice``: the audio made ahead, else ``again()``'s."""
        if voice != self.voice:
            self.cancel()
            async for pcm in again():
                yield pcm
            return
        given = 0
        try:
            async for pcm in self._audio.read():
                given += 1
                yield pcm
        except Exception:
            if given:
                raise
            async for pcm in again():  # failed before any audio: as if never made ahead
                yield pcm
        finally:
            self.cancel()  # a reader that stops early (barge-in) ends the synthesis too


class HeadStart:
    """One answer begun ahead for ``text``: ``build()`` gives the model request the turn would make
    and the agent's voice; the round's chunks are kept, and its first clause synthesised."""

    def __init__(
        self,
        text: str,
        build: Build,
        chat: ChatProvider,
        tts: TTSProvider,
    ) -> None:
        self.text = text
        self.request: ChatRequest | None = None
        self.audio: ClauseAudio | None = None
        self._deliver: dict[str, ClauseAudio] | None = None  # the adopting speaker's prepared audio
        self._chunks = ReplayBuffer()
        self._built: asyncio.Future[ChatRequest | None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.get_running_loop().create_task(self._run(build, chat, tts), name="head-start")
        self.task.add_done_callback(lambda _: self._built.done() or self._built.set_result(None))

    async def _run(self, build: Build, chat: ChatProvider, tts: TTSProvider) -> None:
        try:
            built, voice = await build()
            # as it was then: the memory is the session's own (the rest is built afresh each time)
            request = self.request = dataclasses.replace(built, memory=copy.deepcopy(built.memory))
        except Exception as exc:
            self._built.set_result(None)
            logger.debug("head start not begun: %s", exc)
            return
        self._built.set_result(self.request)
        splitter = ClauseSplitter()
        try:
            stream = chat.stream(request)
            try:
                async for chunk in stream:
                    self._chunks.add(chunk)
                    if self.audio is None and chunk.text:
                        self._first_clause(splitter.push(chunk.text), tts, voice)
            finally:  # dropped: the model's stream (its HTTP response) is closed now, not at collection
                await _close(stream)
            if self.audio is None:
                self._first_clause(splitter.flush(), tts, voice)
        except asyncio.CancelledError:
            self._chunks.close(Dropped("cancelled"))
            raise
        except Exception as exc:  # replayed to the turn, which reports it as a live failure would be
            self._chunks.close(exc)
            return
        self._chunks.close()

    def _first_clause(self, clauses: list[str], tts: TTSProvider, voice: VoiceSpec) -> None:
        if clauses:
            self.audio = ClauseAudio(tts, clauses[0], voice)
            if self._deliver is not None:
                self._deliver[self.audio.text] = self.audio

    async def matches(self, request: ChatRequest) -> bool:
        """Is ``request`` (the turn's) the one this head start made, and did it get an answer?"""
        made = await asyncio.shield(self._built)
        failed_at_once = self._chunks.done and self._chunks.error is not None and not self._chunks.items
        return made is not None and made == request and not failed_at_once

    async def replay(self, prepared: dict[str, ClauseAudio]) -> AsyncIterator[ChatChunk]:
        """The round's chunks: those kept, then the rest as the model sends them; its first
        clause's audio goes into ``prepared`` (a speaker's) as soon as there is one."""
        self._deliver = prepared
        if self.audio is not None:
            prepared[self.audio.text] = self.audio
        try:
            async for chunk in self._chunks.read():
                yield chunk
        finally:
            self.task.cancel()  # the turn stopped reading (a barge-in): the model's stream closes

    def cancel(self) -> None:
        self.task.cancel()
        if self.audio is not None:
            self.audio.cancel()


class HeadStarts:
    """The conversation's side (mixed into the cascade engine): begin, adopt or drop a head start."""

    chat: ChatProvider
    tts: TTSProvider
    closed: bool
    config: Any  # the engine's: ``head_start()`` reads REPLY_HEAD_START
    directory: AgentDirectory
    state: SessionState | None
    taken_over_by: str | None
    _head_start: HeadStart | None = None
    _turn: TurnTaking

    if TYPE_CHECKING:  # the conversation's own

        def _agent_busy(self) -> bool: ...

        def _messages(self, ctx: TurnContext, coming: Turn | None = None) -> list[dict[str, Any]]: ...

        def voice_for(self, agent: AgentSpec) -> VoiceSpec: ...

    async def _head_start_request(self, text: str) -> tuple[ChatRequest, VoiceSpec]:
        """The request the caller's turn ``text`` will make if it ends now, and the voice to say it."""
        state = self.state
        assert state is not None
        ctx = await self.directory.context(state)
        turn = Turn(role="user", content=text, agent=state.active_agent)
        return chat_request(ctx, self._messages(ctx, turn), state.memory), self.voice_for(ctx.agent)

    def _begin_head_start(self, text: str, over_agent: bool) -> None:
        """The pause's words are in and the turn has not ended yet: begin its answer, when it may be
        the one the caller gets (words that sound complete, the agent silent and in charge)."""
        text = text.strip()
        head = self._head_start
        if head is not None and head.text == text:
            return  # the same words again: it goes on
        self._drop_head_start("other words")
        if (
            not text
            or self.closed
            or over_agent
            or self.taken_over_by is not None
            or self.state is None
            or not self.config.head_start()
            or self._agent_busy()
            or endpoint_ms(text, self._turn) > self._turn.endpointing_min_ms  # unfinished words
        ):
            return
        self._head_start = HeadStart(text, lambda: self._head_start_request(text), self.chat, self.tts)
        _count("begun")
        logger.debug("head start begun on %d words", len(text.split()))

    def _drop_head_start(self, why: str = "the caller went on") -> None:
        """The caller went on (or the answer will not be the agent's): the head start is stale."""
        head, self._head_start = self._head_start, None
        if head is not None:
            head.cancel()
            _count("dropped")
            logger.debug("head start dropped: %s", why)

    async def _take_head_start(
        self, request: ChatRequest, speaker: Speaker
    ) -> AsyncIterator[ChatChunk] | None:
        """The chunks of a head start made for exactly ``request`` (its first clause's audio handed
        to ``speaker``), or None: the model is asked now. Whichever, no head start is left."""
        head, self._head_start = self._head_start, None
        if head is None:
            return None
        if not await head.matches(request):
            head.cancel()
            _count("dropped")
            logger.debug("head start dropped: the turn asks otherwise")
            return None
        _count("used")
        logger.debug("head start used")
        return head.replay(speaker.prepared)

    def _head_start_tasks(self) -> list[asyncio.Task]:
        head = self._head_start
        if head is None:
            return []
        return [head.task, *([head.audio.task] if head.audio is not None else [])]
