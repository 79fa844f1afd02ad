"""A conversation's history as it is said and heard: turns kept in order in memory and in the
store, a reply written when it is sent and corrected to what the caller heard.

Why a reply is written twice: the caller has its text and audio the moment they are sent, but
what was heard is known only when it has played or been cut. Written at once (heard "unknown"),
a process that dies while it plays loses nothing the caller received; the correction replaces
that row in place. Writes go one after the other, off the event path. The mixin is part of
:class:`~voiceagent.conversation.core.ConversationCore` (kept apart for its size).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.common import persist
from voiceagent.conversation.events import TurnMetrics
from voiceagent.conversation.session import HEARD_CUT, HEARD_PLAYED, HEARD_UNKNOWN, PERSON, Turn
from voiceagent.conversation.timing import TurnReport, TurnTiming, notify

if TYPE_CHECKING:
    from voiceagent.conversation.events import EventChannel
    from voiceagent.conversation.session import SessionState, SessionStore
    from voiceagent.conversation.timing import TurnClock

__all__ = ["ConversationHistory"]


class ConversationHistory:
    """History rows of a conversation (its state lives on the conversation)."""

    session_id: str
    transport: str
    state: SessionState | None
    store: SessionStore
    history: list[Turn]
    closed: bool
    clock: TurnClock
    channel: EventChannel
    _sent: dict[object, Turn]
    _interrupted: list | None
    _persist_tail: asyncio.Task | None

    if TYPE_CHECKING:  # the conversation's own

        def loop_time(self) -> float: ...

        def _spawn(self, coro: Any) -> asyncio.Task: ...

    async def add_turn(self, turn: Turn) -> None:
        """A history turn (the ToolHost side of :func:`~voiceagent.conversation.common.run_tool_round`)."""
        self._add_turn(turn)

    def _add_turn(self, turn: Turn) -> None:
        """In memory now; in the store in order (one write after the other, off the event path)."""
        self.history.append(turn)
        self._store_write(turn, correction=False)

    def _store_write(self, turn: Turn, correction: bool) -> None:
        """A turn (or the correction of one) into the store, in order, off the event path."""
        if self.state is not None:
            self._persist_tail = asyncio.get_running_loop().create_task(
                self._persist(self._persist_tail, turn, correction)
            )

    def _write_sent(self, key: object, text: str, agent: str | None, speaker: str | None = None) -> None:
        """A reply the caller has (its text and audio sent) goes into the store NOW, whole, heard
        "unknown": a process that dies while it plays loses nothing the caller received. When it
        has played or been cut, :meth:`_add_assistant_turn` with the same ``key`` corrects that row
        to what was heard (and only then is it in :attr:`history`, the model's context)."""
        if not text or self.state is None or self.closed:
            return
        turn = Turn(
            role="assistant",
            content=text,
            agent=agent,
            heard=HEARD_UNKNOWN,
            uid=uuid.uuid4().hex,
            speaker=speaker,
        )
        self._sent[key] = turn
        self._store_write(turn, correction=False)

    def _withdraw_sent(self, key: object) -> None:
        """The reply written when sent was cut before the caller heard any of it: its row goes."""
        sent = self._sent.pop(key, None)
        if sent is not None:
            self._store_write(
                Turn(role="assistant", content="", agent=sent.agent, uid=sent.uid), correction=True
            )

    def _add_assistant_turn(
        self,
        text: str,
        agent: str | None,
        timing: TurnTiming | None,
        cut: bool = False,
        sent_key: object = None,
        by: str | None = None,
    ) -> None:
        """The agent's words as heard (``cut``: a barge-in stopped them), with their turn's timings
        and usage; the turn is reported (a ``TurnMetrics`` event, the process's turn observers). A
        reply written when sent (``sent_key``) has its row corrected, not a second one. Inside a
        barge-in it waits until ``StopAudio`` is queued, so that the interrupted turn carries its
        reaction time. ``by``: a person's line said in the agent's voice (a takeover): kept as
        theirs, and no agent latency is reported for it."""
        if self._interrupted is not None:
            self._interrupted.append((text, agent, timing, cut, sent_key, by))
            return
        heard = HEARD_CUT if cut else HEARD_PLAYED
        if by is not None:
            self._add_person_turn(text, by, heard, sent_key)
            return
        closed = self.clock.close(timing)
        latency, usage = closed.result()
        turn = Turn(role="assistant", content=text, agent=agent, latency_ms=latency, usage=usage, heard=heard)
        sent = self._sent.pop(sent_key, None) if sent_key is not None else None
        if sent is None:
            self._add_turn(turn)
        else:
            turn.at, turn.uid = sent.at, sent.uid  # in its place, where it was said
            self.history.append(turn)
            self._store_write(turn, correction=True)
        index = self.clock.closed_count
        self.channel.put_nowait(
            TurnMetrics(self.session_id, latency_ms=latency, usage=usage, turn_index=index, agent=agent or "")
        )
        notify(TurnReport(self.session_id, self.transport, agent, index, latency, usage, dict(closed.marks)))

    def _add_person_turn(self, text: str, by: str, heard: str, sent_key: object) -> None:
        turn = Turn(role="assistant", content=text, agent=by, heard=heard, speaker=PERSON)
        sent = self._sent.pop(sent_key, None) if sent_key is not None else None
        if sent is None:
            self._add_turn(turn)
            return
        turn.at, turn.uid = sent.at, sent.uid
        self.history.append(turn)
        self._store_write(turn, correction=True)

    async def _persist(self, previous: asyncio.Task | None, turn: Turn, correction: bool = False) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        assert self.state is not None
        if correction:
            write = self.store.correct_turn(self.state, turn)
            await persist(write, "correcting an assistant turn to what was heard", self.session_id)
        else:
            await persist(
                self.store.append_turn(self.state, turn), f"saving a {turn.role} turn", self.session_id
            )

    def _commit_when_played(self, until: float, commit: Callable[..., None], *args: Any) -> None:
        """``commit(*args)`` once the agent audio queued until ``until`` (loop time) has played."""
        delay = until - self.loop_time()
        if delay <= 0.0:
            commit(*args)
        else:
            self._spawn(self._commit_later(delay, commit, *args))

    @staticmethod
    async def _commit_later(delay: float, commit: Callable[..., None], *args: Any) -> None:
        await asyncio.sleep(delay)
        commit(*args)
