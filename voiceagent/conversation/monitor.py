"""A call that people handle, listened to: both sides transcribed and stored (agent assist).

The AudioHook monitor (``/contactcenter/monitor``) hears a contact-centre call between a
customer (the ``external`` channel) and the centre's person (``internal``). Nothing is said back:
there is no agent, no LLM, no TTS. Each channel gets the cascade's own listening machinery (VAD ->
utterances -> streaming STT, :class:`~voiceagent.conversation.listening.CascadeListening`) with
its agent-side hooks inert, so both sides are cut into turns and recognised exactly as a caller
of the voice agent is.

What comes out, in the order the turns end:

- ``Transcript`` events (interim and final) with ``speaker`` ``"user"`` for the customer and
  ``"person"`` for the centre's person, for the dashboards (agent assist);
- the history of the session (its id is the AudioHook session id): the customer's turns with role
  ``user``, the person's with role ``assistant``, ``speaker`` :data:`PERSON` and agent
  :data:`PERSON_AGENT`, written one after another off the audio path.

The same surface as a conversation for the transport driver: ``start``, ``close``, ``events``,
``closed``, ``close_reason``, ``close_hooks``, ``remember``, and ``push_audio(pcm, rate, channel)``.
No Django here (architecture rule 1): the store is the engine's :class:`SessionStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from voiceagent.conversation.common import persist
from voiceagent.conversation.events import Event, EventChannel, StateChange, Transcript
from voiceagent.conversation.listening import CascadeListening, ListeningConfig, VADLike
from voiceagent.conversation.providers import STTProvider
from voiceagent.conversation.session import PERSON, SessionState, SessionStore, Turn
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.timing import TurnClock
from voiceagent.conversation.turn_taking import TurnTaking, resolve
from voiceagent.logging import session_id_var

logger = logging.getLogger("voiceagent.conversation.monitor")

EXTERNAL, INTERNAL = "external", "internal"  # AudioHook's channel names: the customer, the person
SPEAKERS = {EXTERNAL: "user", INTERNAL: PERSON}  # Transcript.speaker per channel
PERSON_AGENT = "contact-center agent"  # Turn.agent of the person's turns
Write = Callable[[], Awaitable[Any]]  # a store write, made when its turn in the queue comes


class _SpeakerChannel:
    """A listener's event channel: its transcripts stamped with its speaker, into the monitor's."""

    def __init__(self, target: EventChannel, speaker: str):
        self.target = target
        self.speaker = speaker

    def _stamp(self, event: Event) -> Event:
        if isinstance(event, Transcript):
            return dataclasses.replace(event, speaker=self.speaker)
        return event

    def put_nowait(self, event: Event) -> bool:
        return self.target.put_nowait(self._stamp(event))

    async def put(self, event: Event) -> None:
        await self.target.put(self._stamp(event))


class ChannelListener(CascadeListening):
    """One channel's listening: the cascade's VAD -> STT turns, with no agent to talk over."""

    def __init__(
        self,
        monitor: MonitorConversation,
        name: str,
        *,
        stt: STTProvider,
        vad: VADLike,
        config: ListeningConfig,
    ):
        self.monitor = monitor
        self.name = name
        self.session_id = monitor.session_id
        self.config = config
        self.channel = _SpeakerChannel(monitor.channel, SPEAKERS[name])  # type: ignore[assignment]
        self.stt, self.vad = stt, vad
        self.closed = False
        self.paused = False
        self.turn_ended_at: float | None = None
        self.clock = TurnClock()
        self.playback_end = 0.0
        self.turn_model = None  # the words alone end a turn (no model per channel)
        self._current_agent: AgentSpec | None = None
        self._held = None
        self._duck = None
        self.dropped_frames = 0
        self._init_listening()

    # --- what the listening side asks of its conversation -------------------------------------------
    def loop_time(self) -> float:
        return self.monitor.loop_time()

    async def emit(self, event: Any) -> None:
        if not self.closed:
            await self.channel.put(event)

    def turn_taking_for(self, agent: AgentSpec | None) -> TurnTaking:
        return resolve(None, self.config.turn_taking(), self.config.silence_timeout_ms())

    def _start_turn(self, text: str) -> None:
        self.monitor._heard(self.name, text)

    def _drop_oldest(self, buffer: deque, what: str) -> None:
        buffer.popleft()
        self.dropped_frames += 1

    # --- the agent side: there is none (nothing to interrupt, duck or resume) -----------------------
    def _agent_busy(self) -> bool:
        return False

    def _hold_answer(self) -> bool:
        return False

    def _over_agent_noise(self, utterance: Any, text: str, logprob: float | None) -> bool:
        return False

    def _barge_in(self, cause: str) -> None:
        """Nothing plays, so nothing stops."""

    def _speech_over_agent(self, utterance: Any) -> None:
        """Never called: the agent is never busy."""

    def _quiet_over_agent(self, utterance: Any) -> None:
        """Never called: there is no duck."""

    def _restore_duck(self, of: Any = None) -> None:
        """No duck to restore."""

    def _begin_head_start(self, text: str, over_agent: bool) -> None:
        """A listener never answers: no answer to begin in a pause."""

    def _drop_head_start(self, why: str = "") -> None:
        """None was begun."""

    def _resume_answer(self, heard: str) -> None:
        """No held answer to resume."""

    def _caller_activity(self) -> None:
        """No silence timers: people on a call may be quiet as long as they like."""

    def finish(self) -> asyncio.Task | None:
        """The call ends: the utterance in progress ends here too (its words are not lost); its task."""
        utterance = self._utterance
        if utterance is None or utterance.task is None:
            return None
        self._end_utterance(utterance)
        return utterance.task

    def stop(self) -> None:
        """The monitor has ended: anything still being heard is dropped."""
        self.closed = True
        self._cancel_utterance()


class MonitorConversation:
    """Both sides of a call people handle, transcribed and stored; create, ``await start()``, push."""

    def __init__(
        self,
        session_id: str,
        *,
        scenario: str,
        store: SessionStore,
        stt: STTProvider,
        vad_factory: Callable[[], VADLike],
        config: ListeningConfig | None = None,
        transport: str | None = None,
        channels: tuple[str, ...] = (EXTERNAL, INTERNAL),
    ):
        self.session_id = session_id
        self.scenario_name = scenario
        self.transport = transport
        self.store = store
        self.config = config or ListeningConfig()
        self.channel = EventChannel(self.config.event_queue_size)
        self.state: SessionState | None = None
        self.history: list[Turn] = []
        self.closed = False
        self.close_reason: str | None = None
        self.close_hooks: list[Callable[[Any], None]] = []  # observers of the end (metrics, traces)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tail: asyncio.Task | None = None  # the last history write; the next waits for it
        self.listeners = {
            name: ChannelListener(self, name, stt=stt, vad=vad_factory(), config=self.config)
            for name in channels
            if name in SPEAKERS
        }

    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def start(self) -> None:
        """Load the session (the transport created it; else a new one), then listen."""
        self._loop = asyncio.get_running_loop()
        session_id_var.set(self.session_id)
        state = await self.store.load(self.session_id)
        if state is None:
            state = SessionState(
                self.session_id, self.scenario_name, active_agent=PERSON_AGENT, transport=self.transport
            )
            await persist(self.store.save(state), "saving the session state", self.session_id)
        self.state = state
        for listener in self.listeners.values():
            listener._begin_listening()
        await self.channel.put(StateChange(self.session_id, state="listening", agent=PERSON_AGENT))

    def events(self) -> AsyncIterator[Event]:
        """The event stream; ends when the monitor closes."""
        return self.channel.stream()

    def push_audio(self, pcm: bytes, sample_rate: int = 16000, channel: str = EXTERNAL) -> bool:
        """One channel's audio (PCM16 mono), processed at once as a caller's is."""
        listener = self.listeners.get(channel)
        return listener.push_audio(pcm, sample_rate) if listener is not None else False

    def end_turns(self) -> None:
        """The audio stops here (the client paused it): what each side was saying is a turn now,
        rather than one left open until the audio resumes."""
        for listener in self.listeners.values():
            listener.finish()

    def remember(self, memory: dict[str, Any]) -> None:
        """Session memory written from outside (a profile), from any thread: kept in the state
        this monitor saves (the cache's copy would otherwise be overwritten at its close)."""
        state = self.state
        if self.closed or state is None or self._loop is None:
            return
        state.memory.update(memory)
        self._loop.call_soon_threadsafe(
            self._queue, lambda: self.store.save(state), "saving the session state"
        )

    def _heard(self, channel: str, text: str) -> None:
        """A final transcript of ``channel``: a turn in the history, written after the one before."""
        state = self.state
        if self.closed or state is None:
            return
        if channel == INTERNAL:
            turn = Turn("assistant", text, agent=PERSON_AGENT, speaker=PERSON)
        else:
            turn = Turn("user", text)
        self.history.append(turn)
        self._queue(lambda: self.store.append_turn(state, turn), "writing the history")

    def _queue(self, call: Write, what: str) -> None:
        """A store write, after the one before (the history stays in the order it was said)."""
        self._tail = asyncio.get_running_loop().create_task(self._write(self._tail, call, what))

    async def _write(self, previous: asyncio.Task | None, call: Write, what: str) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        await persist(call(), what, self.session_id)

    async def close(self, reason: str = "closed") -> None:
        """Stop listening; the history written so far is flushed; the event stream ends."""
        if self.closed or self.close_reason is not None:
            return
        self.close_reason = reason
        ending = [task for listener in self.listeners.values() if (task := listener.finish()) is not None]
        if ending:  # the last words said before the close, recognised and stored (bounded)
            await asyncio.wait(ending, timeout=self.config.close_timeout_s)
        self.closed = True
        for listener in self.listeners.values():
            listener.stop()
        if self._tail is not None:
            await asyncio.wait([self._tail], timeout=self.config.close_timeout_s)
        if self.state is not None:
            with contextlib.suppress(Exception):
                await self.store.save(self.state)
            with contextlib.suppress(Exception):
                await self.store.flush(self.session_id)
        self.channel._append(StateChange(self.session_id, state="ended", agent=PERSON_AGENT))
        self.channel.close()
        logger.info("monitor closed: %s", reason)
        for hook in self.close_hooks:
            try:
                hook(self)
            except Exception:
                logger.exception("close hook %r failed", hook)
