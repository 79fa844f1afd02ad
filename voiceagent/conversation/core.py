"""The conversation core: what the cascade and the realtime pipelines do the same way.

A pipeline subclasses :class:`ConversationCore` - the cascade
:class:`~voiceagent.conversation.engine.Conversation` (VAD -> STT -> LLM -> TTS) and the realtime
:class:`~voiceagent.conversation.live.LiveConversation` (speech-to-speech) - and fills in the
hooks at the bottom: how it begins (``_open``), says a fixed line (``_speak``), answers typed text
(``_answer_text``), drops waiting caller audio (``_drop_input``), stops its response on barge-in
(``_agent_busy``, ``_interrupt``) and what it commits, cancels and disconnects at the end.

The core owns the rest, once: the session (opened, history kept in order in memory and in the
store, ended), the event stream, keypad entry, pause/resume, the barge-in skeleton (``StopAudio``
queued synchronously, the playback clock reset), committing what was heard once it has played,
the end of a response (back to listening, or the end when the agent ended the conversation),
and the caller-silence and length timers (:mod:`~voiceagent.conversation.timers`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Required, TypedDict

from voiceagent.conversation.common import open_session, persist
from voiceagent.conversation.context import AgentDirectory, TurnContext
from voiceagent.conversation.events import (
    Error,
    Event,
    EventChannel,
    StateChange,
    StopAudio,
    Transcript,
)
from voiceagent.conversation.history import ConversationHistory
from voiceagent.conversation.session import (
    SessionState,
    SessionStore,
    Turn,
)
from voiceagent.conversation.specs import AgentSpec, VoiceSpec, resolve_voice
from voiceagent.conversation.takeover import PersonControl
from voiceagent.conversation.timers import ENDED_BY_AGENT, ConversationTimers
from voiceagent.conversation.timing import TurnClock, TurnTiming
from voiceagent.conversation.tools import REGISTRY, ToolRegistry
from voiceagent.conversation.turn_taking import TurnTaking, resolve
from voiceagent.logging import session_id_var

logger = logging.getLogger("voiceagent.conversation")

DTMF_DIGITS = frozenset("0123456789*#ABCD")


@dataclass
class CoreConfig:
    """The settings both pipelines read; each pipeline's config extends it."""

    history_turns: int = 40
    event_queue_size: int = 1024
    dtmf_flush_s: float = 1.5
    max_tool_rounds: int = 5  # tool rounds in a row without the caller speaking
    close_timeout_s: float = 2.0  # at close: for the connection and the last history writes
    language: str = "en-US"
    silence_timeout_ms: Callable[[], int] = lambda: 500
    default_voice: Callable[[], VoiceSpec] = VoiceSpec
    turn_taking: Callable[[], TurnTaking] = TurnTaking  # the global defaults, read when used
    recording: Callable[[], bool] = lambda: False  # RECORDING_ENABLED, read at each start


class SessionArgs(TypedDict, total=False):
    """The keyword arguments every pipeline's constructor takes for its session, defined once here."""

    scenario: Required[str]
    directory: Required[AgentDirectory]
    store: Required[SessionStore]
    registry: ToolRegistry  # default: the process-wide registry
    transport: str | None  # the transport's name, recorded on the session
    agent: str | None  # the agent to start with (default: the session's, else the scenario's entry)


def words_heard(words: list[str], start: float, end: float, now: float, slack: float = 0.0) -> list[str]:
    """The words of a line that played from ``start`` to ``end`` (loop time) the caller heard by
    ``now``: all of them once it has played (within ``slack``), else the share of its playing time
    that has passed - what the history records when the caller interrupts."""
    if now >= end - slack:
        return words
    if now <= start:
        return []
    return words[: int(len(words) * (now - start) / (end - start))]


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Is ``loop`` the one running in this thread?"""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class ConversationCore(ConversationHistory, ConversationTimers, PersonControl, abc.ABC):
    """One session's conversation, whatever the pipeline: create, ``await start()``, push, read events."""

    log: ClassVar[logging.Logger] = logger
    config: CoreConfig
    recording = False  # the transport records this conversation (decided at start)

    def __init__(
        self,
        session_id: str,
        config: CoreConfig,
        *,
        scenario: str,
        directory: AgentDirectory,
        store: SessionStore,
        registry: ToolRegistry = REGISTRY,
        transport: str | None = None,
        agent: str | None = None,
    ):
        self.session_id = session_id
        self.scenario_name = scenario
        self.requested_agent = agent
        self.directory = directory
        self.store = store
        self.registry = registry
        self.config = config
        self.transport = transport
        self.channel = EventChannel(config.event_queue_size)
        self.state: SessionState | None = None
        self.history: list[Turn] = []
        self.active_rid: int | None = None
        self.playback_end = 0.0  # loop time when the agent audio queued so far has played
        self.paused = False
        self.closed = False
        self.close_reason: str | None = None
        self.dropped_frames = 0
        self.turn_ended_at: float | None = None  # the end-of-turn decision (latency metrics start here)
        self.clock = TurnClock()  # per-turn timings and usage (voiceagent.conversation.timing)
        self._interrupted: (
            list[tuple[str, str | None, TurnTiming | None, bool, object, str | None]] | None
        ) = None
        self._sent: dict[object, Turn] = {}  # replies written when sent, by key, until heard
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rids = itertools.count(1)
        self._seq = itertools.count(1)
        self._state_name: str | None = None
        self._dtmf: list[str] = []
        self._dtmf_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._persist_tail: asyncio.Task | None = None  # the last history write; the next waits for it
        self._greeting: asyncio.Future | None = None  # the opening greeting, done once it has been said
        self.close_hooks: list[Callable[[ConversationCore], None]] = []  # observers of the end (traces)
        self.taken_over_by: str | None = None  # a person has the conversation (takeover.py)
        self._init_timers()  # caller silence (re-prompts, goodbye) and the length bound

    # --- lifecycle ----------------------------------------------------------------------------------
    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def start(self) -> None:
        """Load (or create) the session state, begin the pipeline, speak the greeting."""
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
        self.recording = self.config.recording() if ctx.scenario.recording is None else ctx.scenario.recording
        if not await self._open(ctx):
            return
        await self._set_state("listening")
        self._start_timers(ctx.agent)
        self._arm_idle()
        announce = ctx.scenario.recording_announcement if self.recording else ""
        if (greeting := " ".join(filter(None, (announce, ctx.agent.greeting)))) and not self.history:
            self._greeting = self._loop.create_future()
            self._speak(greeting, ctx.agent)

    async def close(self, reason: str = "closed") -> None:
        """Stop everything; commit what was heard; state saved, history flushed; the stream ends."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        self._greeted()
        self._cancel_timers()
        if self._loop is not None:
            self._commit_heard(self.loop_time())
        current = asyncio.current_task()  # close() may run inside one of the conversation's tasks
        for task in [self._dtmf_task, *self._pipeline_tasks(), *self._tasks]:
            if task is not None and task is not current and not task.done():
                task.cancel()
        await self._disconnect()
        if self._persist_tail is not None:
            await asyncio.wait([self._persist_tail], timeout=self.config.close_timeout_s)
        if self.state is not None:
            with contextlib.suppress(Exception):
                await self.store.save(self.state)
            with contextlib.suppress(Exception):
                await self.store.flush(self.session_id)
        self.channel._append(StateChange(self.session_id, state="ended", agent=self._agent_name()))
        self.channel.close()
        self.log.info("conversation closed: %s", reason)
        for hook in self.close_hooks:
            try:
                hook(self)
            except Exception:
                self.log.exception("close hook %r failed", hook)

    def events(self) -> AsyncIterator[Event]:
        """The event stream; ends when the conversation closes."""
        return self.channel.stream()

    # --- input ----------------------------------------------------------------------------------------
    async def push_text(self, text: str) -> None:
        """Typed input: a final transcript, then the agent's answer. Typing barges in, except over
        the opening greeting: a conversation started by a typed line (the browser's first ``text``
        or keypad entry starts it) greets first, as one started by speech does, then answers."""
        text = text.strip()
        if not text or self.closed or self._input_refused():
            return
        self._caller_activity()
        greeting = self._greeting
        if greeting is not None and not greeting.done():
            await self.emit(Transcript(self.session_id, text=text, final=True))
            self._spawn(self._answer_after_greeting(greeting, text))
            return
        self._barge_in("text")
        self.clock.user_turn(asyncio.get_running_loop().time(), speech=False)
        await self.emit(Transcript(self.session_id, text=text, final=True))
        await self._answer_text(text)

    async def _answer_after_greeting(self, greeting: asyncio.Future, text: str) -> None:
        """A line typed while the greeting was being said, answered once it has played (a new
        turn stops what is playing); lines typed meanwhile wake in the order they came."""
        await asyncio.shield(greeting)
        while not self.closed and (left := self.playback_end - self.loop_time()) > 0.0:
            await asyncio.sleep(left)
        if self.closed:
            return
        self._barge_in("text")  # whatever began since (the caller spoke after the greeting)
        self.clock.user_turn(asyncio.get_running_loop().time(), speech=False)
        await self._answer_text(text)

    def played_out(self) -> None:
        """The client says it has played all the agent audio it was sent (a test client or a
        text-only one that plays it the moment it arrives): the playback clock catches up, so the
        caller's next words are a new turn, not a barge-in, and nothing waits for audio heard."""
        if self._loop is not None:
            self.playback_end = min(self.playback_end, self.loop_time())

    def _greeted(self) -> None:
        """The opening greeting has been said (or will not be: a barge-in, the end)."""
        if self._greeting is not None and not self._greeting.done():
            self._greeting.set_result(None)

    def remember(self, memory: dict[str, Any]) -> None:
        """Session-memory entries written from outside the conversation (a demo profile attached to
        the live session): into its state now, so its next turn sees them and its saves keep them
        (the cache's copy would otherwise be overwritten by the state held here). Callable from any
        thread: from another one it runs on the conversation's loop."""
        loop = self._loop
        if loop is not None and not _on_loop(loop):
            loop.call_soon_threadsafe(self.remember, memory)
            return
        if self.closed or self.state is None:
            return
        self.state.memory.update(memory)
        self.log.info("session memory updated from outside: %s", ", ".join(sorted(memory)))
        self._spawn(persist(self.store.save(self.state), "saving the session state", self.session_id))

    def push_dtmf(self, digit: str) -> None:
        """A keypad digit; digits are gathered until ``#`` or a short pause, then become a turn."""
        if self.closed or digit not in DTMF_DIGITS or self._input_refused():
            return
        self._caller_activity()
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
        self._drop_input()
        await self._set_state("paused")

    async def resume(self) -> None:
        if self._input_refused():  # the time limit's last line: it stays deaf until it closes
            return
        self.paused = False
        await self._set_state("listening")
        self._arm_idle()

    def _drop_oldest(self, buffer: deque, what: str) -> None:
        """Make room in a full input buffer by dropping its oldest chunk; every 50th drop tells the
        client (an ``input_overflow`` error), so a caller whose audio is lost knows it."""
        buffer.popleft()
        self.dropped_frames += 1
        if self.dropped_frames % 50 == 1:
            message = f"{what}; dropped {self.dropped_frames} chunks"
            self.channel.put_nowait(Error(self.session_id, code="input_overflow", message=message))

    # --- output -----------------------------------------------------------------------------------------
    async def emit(self, event: Event) -> None:
        if not self.closed:
            await self.channel.put(event)

    async def _set_state(self, name: str, agent: str | None = None) -> None:
        self._state_name = name
        await self.emit(StateChange(self.session_id, state=name, agent=agent or self._agent_name()))

    def voice_for(self, agent: AgentSpec) -> VoiceSpec:
        return resolve_voice(agent.voice, self.config.default_voice)

    def turn_taking_for(self, agent: AgentSpec | None) -> TurnTaking:
        """The turn-taking settings of ``agent``: the global ones (read now, so a configuration
        change applies to the next turn) with its overrides; its silence timeout is the minimum
        endpointing wait."""
        defaults = self.config.turn_taking()
        silence = self.config.silence_timeout_ms()
        if agent is None:
            return resolve(None, defaults, silence)
        return resolve(agent.turn_taking, defaults, agent.vad_silence_timeout_ms or silence)

    def _agent_name(self) -> str:
        return self.state.active_agent if self.state is not None else ""

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """A task of this conversation: cancelled when it closes."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _too_many_tool_rounds(self) -> None:
        message = f"stopped after {self.config.max_tool_rounds} tool rounds"
        await self.emit(Error(self.session_id, code="tool_rounds_exceeded", message=message))

    # --- barge-in and the end of a response ------------------------------------------------------------
    def _barge_in(self, cause: str) -> None:
        """Stop the agent NOW (synchronously, within the current frame or event): its response and
        its not-yet-taken audio; ``StopAudio`` when audio was out; what was heard is committed,
        with the reaction time (speech detected -> ``StopAudio`` queued)."""
        if self._loop is None or not self._agent_busy():
            return
        now = self.loop_time()
        self._interrupted = []
        try:
            rid, audio_out, stopped = self._interrupt(now)
            if audio_out:
                self.channel._append(StopAudio(self.session_id, reason="barge_in", response_id=rid))
        finally:
            interrupted, self._interrupted = self._interrupted, None
        reaction = (self.loop_time() - now) * 1000.0
        for text, agent, timing, cut, sent_key, by in interrupted:
            if timing is not None and audio_out:
                timing.barge_in_ms = round(reaction, 3)
            self._add_assistant_turn(text, agent, timing, cut, sent_key, by)
        self.playback_end = now
        self.active_rid = None
        if stopped is not None:  # per turn at most: DEBUG, the event stream tells clients anyway
            self.log.debug("barge-in (%s): response %s stopped%s", cause, rid, stopped)

    async def _settle(self) -> None:
        """After a response: back to listening (the caller's silence counted from the end of the
        agent's audio), or the end when the agent ended the conversation (its tool, its goodbye to
        a silent caller, the time limit) once its last words have played."""
        self._greeted()
        ending = self._ending_reason()
        if ending is None and self.state is not None and self.state.memory.get("conversation_ended"):
            ending = ENDED_BY_AGENT
        if ending is not None:
            wait = self.playback_end - self.loop_time()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.close(ending)
            return
        await self._transfer_due()
        await self._set_state("listening")
        self._arm_idle()

    # --- what each pipeline does its own way -----------------------------------------------------------
    @abc.abstractmethod
    async def _open(self, ctx: TurnContext) -> bool:
        """Begin listening with the session's agent; False when the conversation cannot go on."""

    @abc.abstractmethod
    def _speak(self, line: str, agent: AgentSpec) -> None:
        """Say a fixed line (greeting, handoff announcement) as its own response."""

    @abc.abstractmethod
    async def _answer_text(self, text: str) -> None:
        """A typed turn (already in the event stream): into the history, then answered."""

    @abc.abstractmethod
    def _drop_input(self) -> None:
        """Pausing: forget caller audio not yet processed."""

    @abc.abstractmethod
    def _agent_busy(self) -> bool:
        """Is the agent responding, working or still being heard (speech now is a barge-in)?"""

    @abc.abstractmethod
    def _interrupt(self, now: float) -> tuple[int, bool, str | None]:
        """Barge-in: purge the queued audio, stop the response, commit what was heard by ``now``.
        Returns (response id, whether audio was out, a note on what was stopped for the log, or
        None when nothing was)."""

    @abc.abstractmethod
    def _commit_heard(self, now: float) -> None:
        """Closing: commit what the caller heard of the agent's speech by ``now``."""

    def _pipeline_tasks(self) -> Iterable[asyncio.Task | None]:
        """The pipeline's own tasks, cancelled at close."""
        return ()

    async def _disconnect(self) -> None:
        """Closing: release the pipeline's connection (after its tasks are cancelled)."""
        return None
