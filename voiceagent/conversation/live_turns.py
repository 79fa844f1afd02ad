"""The live pipeline's turn-taking: is the caller's speech a turn, and when does the agent answer?

A mixin of :class:`~voiceagent.conversation.live.LiveConversation`. The realtime service's VAD
reports speech (``input_audio_buffer.speech_started`` / ``.speech_stopped``) but the session asks
it neither to stop its answer nor to start one (``interrupt_response`` and ``create_response``
false, :mod:`voiceagent.llm.realtime.connection`): both decisions are taken here, with the
conversation's :class:`~voiceagent.conversation.turn_taking.TurnTaking` settings.

* Speech while the agent is quiet is a turn: when it stops, ``response.create``.
* Speech over the agent is *held* (:class:`HeldSpeech`): the agent goes on talking. It becomes a
  barge-in (the agent stops, then answers when the caller is done) when the caller is still
  speaking ``min_interruption_ms`` after it began, or as soon as its transcription holds a word
  that is not a backchannel. Speech that stopped sooner waits for its transcript: a backchannel
  ("uh-huh", "okay") or noise (no words, a failed transcription) is no turn at all: the agent's
  audio was never stopped, no response is created, the service's item for it is deleted (so the
  model does not answer it later) and it is not in the history.

Why ``create_response`` false with our own ``response.create`` rather than cancelling what the
service created: with ``interrupt_response`` false the service may start a second response (or
refuse one) while the first still plays, and a cancel races the new response's first audio; with
both false the service only reports VAD events (documented), so nothing is spoken that we did not
ask for. The price is one client->server hop between the end of speech and the response.

``response.create`` never goes out while a response is still open (a cancelled one until its
``response.done``, a filler line while a tool runs): the service would refuse it
(``conversation_already_has_active_response``), so it waits for that response to end.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.events import Error, Transcript
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.timing import TurnClock
from voiceagent.conversation.turn_taking import TurnTaking, is_backchannel

logger = logging.getLogger("voiceagent.conversation.live")

_PARTIAL_TAIL = re.compile(r"[\w'-]+$")


@dataclass
class HeldSpeech:
    """Caller speech that began over the agent, not yet judged a barge-in or a backchannel."""

    item_id: str
    timer: asyncio.TimerHandle | None = None
    stopped_at: float | None = None  # loop time of its speech_stopped
    audio_s: float | None = None  # its audio as the service measured it
    taken: bool = False  # judged a turn: the agent was stopped

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def finished_words(partial: str) -> str:
    """The words of an interim transcription that are complete (a delta may end inside a word:
    "ok" of "okay" must not count as a word that is not a backchannel)."""
    if partial[-1:].isspace() or partial[-1:] in ".,!?;:":
        return partial.strip()
    return _PARTIAL_TAIL.sub("", partial).strip()


class CallerTurns:
    """The caller's side of a live conversation (its state lives on the conversation)."""

    session_id: str
    closed: bool
    turn_ended_at: float | None
    clock: TurnClock
    responses_requested: int
    _speech_started_ms: int | None
    _in_speech: bool
    _state_name: str | None
    _partials: dict[str, str]
    _current: Any  # LiveResponse | None
    _hold: HeldSpeech | None
    _judging: dict[str, HeldSpeech]
    _waiting_creates: deque[dict[str, Any]]
    _waiting_by: deque[str | None]  # each waiting create's person (None: the agent's own)
    _create_by: str | None  # the create in flight says a person's line: who
    taken_over_by: str | None
    _person_spoke_last: bool
    _idle_waiters: list[asyncio.Future]
    config: Any  # LiveConfig
    _ctx: Any  # TurnContext | None

    if TYPE_CHECKING:  # the conversation's own (declared here only for type checkers)

        def loop_time(self) -> float: ...

        async def emit(self, event: Any) -> None: ...

        async def _set_state(self, name: str, agent: str | None = None) -> None: ...

        def _agent_busy(self) -> bool: ...

        def _barge_in(self, cause: str) -> None: ...

        def _caller_activity(self) -> None: ...

        def _watch_for_gaps(self) -> None: ...

        def _user_turn(self, text: str) -> None: ...

        def _send(self, event: dict[str, Any]) -> None: ...

        def turn_taking_for(self, agent: AgentSpec | None) -> TurnTaking: ...

        def _transcribing(self) -> bool: ...

    # --- responses ----------------------------------------------------------------------------------
    def _request_response(self, body: dict[str, Any] | None = None, by: str | None = None) -> None:
        """``response.create`` now, or once the open response is done (the service allows one);
        ``by``: it says a person's line (a takeover), which its ``response.created`` learns."""
        event: dict[str, Any] = {"type": "response.create"}
        if body:
            event["response"] = body
        if self._current is not None or self.responses_requested > 0 or self._waiting_creates:
            self._waiting_creates.append(event)
            self._waiting_by.append(by)
        else:
            self._create_by = by
            self._send(event)

    def _next_response(self) -> None:
        """A response ended: send the ``response.create`` that waited for it."""
        if self._current is not None or self.responses_requested > 0:
            return
        if self._waiting_creates:
            self._create_by = self._waiting_by.popleft() if self._waiting_by else None
            self._send(self._waiting_creates.popleft())
            return
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _say_filler(self, line: str, agent: AgentSpec) -> None:
        """The live side of the fillers (:func:`~voiceagent.conversation.common.run_tool_round`):
        while tools run the agent says ``line`` as a response of its own, like a greeting; this
        returns once that response is done (its audio is then on the playback clock, so the next
        filler waits for it to be heard). A caller turn's barge-in cancels it like any response."""
        self._request_response({"instructions": self.config.say_line.format(line=line)})
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        await waiter

    def _turn_taking(self) -> TurnTaking:
        return self.turn_taking_for(self._ctx.agent if self._ctx is not None else None)

    def _forget_speech(self) -> None:
        """Pausing or closing: speech being judged is dropped (its timer with it)."""
        for hold in (self._hold, *self._judging.values()):
            if hold is not None:
                hold.cancel_timer()
        self._hold = None
        self._judging.clear()

    # --- the service's VAD ----------------------------------------------------------------------------
    async def _on_speech_started(self, event: dict[str, Any]) -> None:
        self._caller_activity()
        started = event.get("audio_start_ms")
        self._speech_started_ms = started if isinstance(started, int) else None
        self._in_speech = True
        self._watch_for_gaps()  # a client that stops sending now: its gap is silence (StreamGaps)
        wait_ms = self._turn_taking().min_interruption_ms
        if wait_ms <= 0 or not self._agent_busy():
            self._hold = None
            self._barge_in("speech")  # nothing to stop when the agent is quiet
            return
        hold = self._hold = HeldSpeech(item_id=str(event.get("item_id") or ""))
        hold.timer = asyncio.get_running_loop().call_later(wait_ms / 1000.0, self._hold_elapsed, hold)

    def _hold_elapsed(self, hold: HeldSpeech) -> None:
        """The caller is still speaking ``min_interruption_ms`` later: an interruption."""
        hold.timer = None
        if self._hold is hold and not hold.taken and not self.closed:
            hold.taken = True
            self._barge_in("speech")

    async def _on_speech_stopped(self, event: dict[str, Any]) -> None:
        now = self.loop_time()
        self._in_speech = False
        start, end = self._speech_started_ms, event.get("audio_end_ms")
        heard_s = (end - start) / 1000.0 if isinstance(end, int) and start is not None else None
        hold, self._hold = self._hold, None
        if hold is None or hold.taken:
            self._caller_turn(now, heard_s)
            return
        hold.cancel_timer()  # shorter than min_interruption_ms: its words decide
        hold.stopped_at, hold.audio_s = now, heard_s
        item = str(event.get("item_id") or hold.item_id)
        hold.item_id = item
        if not self._transcribing():
            self._let_pass(hold, "")  # no words will come: noise
            return
        self._judging[item] = hold

    def _caller_turn(self, at: float, audio_s: float | None) -> None:
        """The caller's turn ended at ``at``: the agent answers."""
        self.turn_ended_at = at
        timing = self.clock.user_turn(at, speech=True, audio_s=audio_s)
        timing.add("realtime_audio_in_s", audio_s)
        if self.taken_over_by is not None:  # a person has the call: the turn is stored, not answered
            self._person_spoke_last = False
            return
        self._request_response()

    def _take(self, hold: HeldSpeech) -> None:
        """Held speech is a real turn: stop the agent; answer once the caller is done."""
        hold.cancel_timer()
        if not hold.taken:
            hold.taken = True
            self._barge_in("speech")
        if hold.stopped_at is not None:
            self._judging.pop(hold.item_id, None)
            self._caller_turn(hold.stopped_at, hold.audio_s)

    def _let_pass(self, hold: HeldSpeech, text: str) -> None:
        """A backchannel or noise over the agent: no turn; the service forgets its item."""
        self._judging.pop(hold.item_id, None)
        if hold.item_id:
            self._send({"type": "conversation.item.delete", "item_id": hold.item_id})
        logger.debug("speech over the agent let pass (%s)", text or "no words")

    def _held(self, item: str) -> HeldSpeech | None:
        hold = self._judging.get(item)
        if hold is None and self._hold is not None and self._hold.item_id in (item, ""):
            hold = self._hold
        return hold

    # --- input transcription ---------------------------------------------------------------------------
    async def _on_transcription_delta(self, event: dict[str, Any]) -> None:
        item = str(event.get("item_id") or "")
        text = self._partials.get(item, "") + str(event.get("delta") or "")
        self._partials[item] = text
        hold = self._held(item)
        if hold is not None and not hold.taken:
            words = finished_words(text)
            if words and not is_backchannel(words):
                self._take(hold)
        if text.strip():
            await self.emit(Transcript(self.session_id, text=text.strip(), final=False))

    async def _on_transcription_completed(self, event: dict[str, Any]) -> None:
        item = str(event.get("item_id") or "")
        self._partials.pop(item, None)
        text = str(event.get("transcript") or "").strip()
        hold = self._held(item)
        if hold is not None and not hold.taken:
            if hold.stopped_at is None:  # words before the VAD's end of speech: only a word decides
                if not text or is_backchannel(text):
                    return
                self._take(hold)
            elif text and (not is_backchannel(text) or not self._agent_busy()):
                self._take(hold)  # the agent finished meanwhile: a word after it is a turn
            else:
                self._let_pass(hold, text)
                return
        if not text:
            return
        self.clock.transcribed(self.loop_time())
        await self.emit(Transcript(self.session_id, text=text, final=True))
        self._user_turn(text)
        if self._state_name == "listening":
            await self._set_state("thinking")

    async def _on_transcription_failed(self, event: dict[str, Any]) -> None:
        item = str(event.get("item_id") or "")
        self._partials.pop(item, None)
        hold = self._judging.get(item)
        if hold is not None and not hold.taken:
            self._let_pass(hold, "")  # unheard speech over the agent does not stop it
        error = event.get("error") or {}
        await self.emit(
            Error(
                self.session_id, code="stt_error", message=f"transcription failed: {error.get('message', '')}"
            )
        )
