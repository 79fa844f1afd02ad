"""A conversation's two clocks: the caller's silence and the length bound (no dead air, no call
without end).

After the agent has finished speaking and the conversation is listening, ``reprompt_after_s`` of
caller silence makes the agent say its ``reprompt`` line; after ``max_reprompts`` of them in a row
with no sign of the caller, the next silence brings its ``goodbye`` and the conversation closes
(:data:`CALLER_SILENT`). ``max_conversation_s`` after the start the agent stops what it was saying
(the history keeps what was heard, marked interrupted), says its ``time_limit_line`` and the
conversation closes (:data:`TIME_LIMIT`). Both closes are the agent's, like the
``end_conversation`` tool's: the transport ends its session once the last line has played.

Why timer handles and not a task per conversation: one ``loop.call_later`` per listening period
and one for the bound cost nothing between events, and nothing here runs per audio frame. The
mixin is part of :class:`~voiceagent.conversation.core.ConversationCore` (kept apart for its size);
it speaks through the pipeline's ``_speak``, so both pipelines re-prompt the same way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.takeover import TIME_LIMIT_DEFER_S

if TYPE_CHECKING:
    from voiceagent.conversation.context import AgentDirectory
    from voiceagent.conversation.session import SessionState
    from voiceagent.conversation.turn_taking import TurnTaking

__all__ = ["AGENT_ENDINGS", "CALLER_SILENT", "ENDED_BY_AGENT", "TIME_LIMIT", "ConversationTimers"]

logger = logging.getLogger("voiceagent.conversation")

ENDED_BY_AGENT = "conversation ended by the agent"
CALLER_SILENT = "caller silent"  # re-prompted max_reprompts times, then the goodbye
TIME_LIMIT = "time limit"  # max_conversation_s reached
AGENT_ENDINGS = frozenset(
    {ENDED_BY_AGENT, CALLER_SILENT, TIME_LIMIT}
)  # the agent ended it: its last words play


def last_line_grace_s(line: str) -> float:
    """How long a closing line may take before the conversation closes anyway (it was interrupted,
    or the pipeline never finished it): generous speech time for its words, plus synthesis."""
    return 5.0 + 0.6 * len(line.split())


class ConversationTimers:
    """The silence timer (re-prompts, goodbye) and the length bound of one conversation."""

    if TYPE_CHECKING:  # the conversation's own (ConversationCore)
        session_id: str
        closed: bool
        paused: bool
        playback_end: float
        state: SessionState | None
        directory: AgentDirectory
        taken_over_by: str | None
        _state_name: str | None
        _loop: asyncio.AbstractEventLoop | None

        def loop_time(self) -> float: ...

        def turn_taking_for(self, agent: AgentSpec | None) -> TurnTaking: ...

        def _speak(self, line: str, agent: AgentSpec) -> None: ...

        def _agent_busy(self) -> bool: ...

        def _barge_in(self, cause: str) -> None: ...

        def _drop_input(self) -> None: ...

        def _spawn(self, coro) -> asyncio.Task: ...

        async def close(self, reason: str = "closed") -> None: ...

    def _init_timers(self) -> None:
        self._idle: asyncio.TimerHandle | None = None  # the silence timer, or a closing line's backstop
        self._limit: asyncio.TimerHandle | None = None  # max_conversation_s
        self._idle_after = 0.0  # reprompt_after_s of the agent the timer was last armed for
        self._reprompts = 0  # re-prompts in a row without a sign of the caller
        self._ending: str | None = None  # CALLER_SILENT / TIME_LIMIT: the closing line is being said
        self._timer_agent: AgentSpec | None = None  # the agent whose settings the timers read

    # --- what the core calls ---------------------------------------------------------------------
    def _start_timers(self, agent: AgentSpec) -> None:
        """The conversation has begun (its greeting is on the way): the length bound starts."""
        self._timer_agent = agent
        limit = self.turn_taking_for(agent).max_conversation_s
        if limit > 0 and self._loop is not None:
            self._limit = self._loop.call_later(limit, self._time_up)

    def _arm_idle(self) -> None:
        """Listening: the caller's silence is counted from the end of the agent's audio."""
        if self.closed or self._ending is not None or self._loop is None:
            return
        self._idle_after = self.turn_taking_for(self._timer_agent).reprompt_after_s
        self._restart_idle(max(0.0, self.playback_end - self.loop_time()))

    def _caller_activity(self) -> None:
        """The caller spoke, typed or pressed a key: the re-prompts start over, a goodbye to a silent
        caller is called off, and silence is counted from now (an utterance that was only noise
        still gets its re-prompt)."""
        self._reprompts = 0
        if self._ending == CALLER_SILENT:
            self._ending = None
        if self._ending is None and not self.closed and self._loop is not None:
            self._restart_idle(0.0)

    def _ending_reason(self) -> str | None:
        """Set while the agent says a closing line of its own (the silent caller's goodbye, the time
        limit): the response's end closes the conversation with it."""
        return self._ending

    def _input_refused(self) -> bool:
        """The time limit was reached: caller input is no longer taken."""
        return self._ending == TIME_LIMIT

    def _cancel_timers(self) -> None:
        for handle in (self._idle, self._limit):
            if handle is not None:
                handle.cancel()
        self._idle = self._limit = None

    def _caller_speaking(self) -> bool:
        """Is the caller in the middle of an utterance (no re-prompt then)? A pipeline that knows
        says so; by default caller activity alone restarts the silence."""
        return False

    # --- the silence ----------------------------------------------------------------------------------
    def _restart_idle(self, extra_s: float) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._idle_after > 0 and self._loop is not None:
            self._idle = self._loop.call_later(extra_s + self._idle_after, self._idle_fired)

    def _idle_fired(self) -> None:
        self._idle = None
        if self.closed or self.paused or self._ending is not None or self._state_name != "listening":
            return  # speaking, thinking or paused: the next return to listening arms it again
        if self.taken_over_by is not None:
            return  # a person has the call: no re-prompt; the handback arms it again
        left = self.playback_end - self.loop_time()
        if left > 0 or self._agent_busy() or self._caller_speaking():
            self._restart_idle(max(0.0, left))
            return
        self._spawn(self._on_silence())

    async def _on_silence(self) -> None:
        """The caller has been silent ``reprompt_after_s``: re-prompt, or (after ``max_reprompts``)
        say goodbye and end the conversation."""
        if self.state is None:
            return
        agent = (await self.directory.context(self.state)).agent  # the active agent, as edited now
        self._timer_agent = agent
        if self.closed or self.paused or self._ending is not None or self._state_name != "listening":
            return
        if self.taken_over_by is not None:
            return
        settings = self.turn_taking_for(agent)
        if self._reprompts < settings.max_reprompts:
            self._reprompts += 1
            logger.info("caller silent %.1f s: re-prompt %d", self._idle_after, self._reprompts)
            self._speak(settings.reprompt, agent)
            return
        logger.info("caller silent after %d re-prompts: goodbye", self._reprompts)
        self._say_last(settings.goodbye, agent, CALLER_SILENT)

    # --- the length bound --------------------------------------------------------------------------
    def _time_up(self) -> None:
        self._limit = None
        if self.taken_over_by is not None and self._loop is not None:  # never cut a person off
            self._limit = self._loop.call_later(TIME_LIMIT_DEFER_S, self._time_up)
            return
        if not self.closed and self._ending != TIME_LIMIT:
            self._spawn(self._on_time_up())

    async def _on_time_up(self) -> None:
        """``max_conversation_s`` reached: stop the agent, refuse input, say the time-limit line, close."""
        if self.state is None or self.closed:
            return
        agent = (await self.directory.context(self.state)).agent
        if self.closed:
            return
        logger.info("conversation reached its time limit")
        self._ending = TIME_LIMIT  # from here caller input is refused
        self.paused = True  # caller audio is no longer taken (no barge-in over the last line)
        self._drop_input()
        self._barge_in("time limit")  # what was heard is committed, marked interrupted
        self._say_last(self.turn_taking_for(agent).time_limit_line, agent, TIME_LIMIT)

    # --- closing lines -------------------------------------------------------------------------------
    def _say_last(self, line: str, agent: AgentSpec, reason: str) -> None:
        """Say a closing line; the end of its response closes the conversation with ``reason``
        (the core's ``_settle``). A backstop closes it anyway when that never comes."""
        self._ending = reason
        if self._idle is not None:
            self._idle.cancel()
        assert self._loop is not None
        self._idle = self._loop.call_later(last_line_grace_s(line), self._backstop, reason)
        self._speak(line, agent)

    def _backstop(self, reason: str) -> None:
        self._idle = None
        if self._ending == reason and not self.closed:
            logger.info("closing line not finished in time: closing (%s)", reason)
            self._spawn(self.close(reason))
