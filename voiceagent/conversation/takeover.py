"""A person takes a live conversation over, speaks through it, and hands it back.

A contact centre needs a way to a human on every call. Over the REST API (and the dashboard's
buttons) a person takes over a live conversation: the agent stops at once (the same synchronous
stop as a barge-in: what the caller heard is kept, marked cut) and stays silent - no answers, no
re-prompts, no goodbye, no time limit - while the caller's words are still recognised, shown and
stored. What the person types is spoken to the caller in the active agent's voice (the cascade's
TTS, the realtime model's own voice) and kept in the history as theirs (``Turn.speaker`` =
:data:`~voiceagent.conversation.session.PERSON`, ``agent`` = who). Handing back, the agent resumes
with the whole history, the person's words included (as notes it did not say itself), and answers
the caller at once when the caller spoke last.

The way to a person the agent takes itself: ``escalate_to_human`` marks a transfer requested in
the session memory (``transfer``); once the agent's line about it has been said, the conversation
emits :class:`~voiceagent.conversation.events.TransferRequested` with the scenario's target, and
the transport does the transfer its own way (a phone call is transferred, an AudioHook session
ends for the contact centre to route it, the browser asks the dashboard for a person). The
outcome comes back as :meth:`transfer_done` or :meth:`transfer_failed` (the caller is told, and
the conversation goes on).

The mixin is part of :class:`~voiceagent.conversation.core.ConversationCore`; each pipeline fills
in :meth:`_person_says` and :meth:`_answer_history`. The methods here are synchronous and run on
the conversation's loop (:mod:`voiceagent.transport.control` brings a request there from any
worker), so a request sees the state it changes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.events import Takeover, TransferRequested
from voiceagent.conversation.session import PERSON, Turn

if TYPE_CHECKING:
    from voiceagent.conversation.context import AgentDirectory
    from voiceagent.conversation.events import EventChannel
    from voiceagent.conversation.session import SessionState
    from voiceagent.conversation.specs import AgentSpec

__all__ = ["TIME_LIMIT_DEFER_S", "TRANSFER_FAILED_LINE", "ControlResult", "PersonControl"]

logger = logging.getLogger("voiceagent.conversation")

TIME_LIMIT_DEFER_S = 30.0  # the length bound reached while a person has the call: asked again then
TRANSFER_FAILED_LINE = "I'm sorry, I couldn't connect you to a person just now. I'm still here to help."


@dataclass(frozen=True)
class ControlResult:
    """The answer to a person's request, as the API gives it: 200, 404 (no such live conversation)
    or 409 (not in a state that allows it), a detail for the refusals, a body for success."""

    status: int
    detail: str = ""
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == 200


class PersonControl:
    """Takeover, the person's lines and the handback (state on the conversation)."""

    taken_over_by: str | None = None  # who has the conversation now (None: the agent)
    _person_spoke_last = False  # a line of theirs came after the caller's last turn (maybe still playing)

    if TYPE_CHECKING:  # the conversation's own (ConversationCore)
        session_id: str
        closed: bool
        history: list[Turn]
        channel: EventChannel
        state: SessionState | None
        directory: AgentDirectory
        _idle: asyncio.TimerHandle | None

        def _speak(self, line: str, agent: AgentSpec) -> None: ...

        def _barge_in(self, cause: str) -> None: ...

        def _add_turn(self, turn: Turn) -> None: ...

        def _agent_name(self) -> str: ...

        def _arm_idle(self) -> None: ...

        def _greeted(self) -> None: ...

        def _spawn(self, coro: Any) -> asyncio.Task: ...

        async def _set_state(self, name: str, agent: str | None = None) -> None: ...

    # --- what the API asks -------------------------------------------------------------------------
    def take_over(self, by: str) -> ControlResult:
        """The person ``by`` has the conversation: the agent stops now and stays silent."""
        if self.closed:
            return ControlResult(404, "the conversation has ended")
        if self.taken_over_by is not None:
            return ControlResult(409, f"already taken over by {self.taken_over_by}")
        self.taken_over_by = by
        self._person_spoke_last = False
        self._greeted()  # a line typed during the greeting is stored, not answered
        self._barge_in("takeover")
        self._stop_idle()
        self._add_turn(
            Turn(role="system", content=f"{by} took over the conversation", agent=by, speaker=PERSON)
        )
        self.channel._append(Takeover(self.session_id, active=True, by=by))
        self._spawn(self._set_state("listening"))
        logger.info("conversation taken over by %s", by)
        return ControlResult(200, body={"taken_over": True, "by": by})

    def say(self, text: str, by: str | None = None) -> ControlResult:
        """The person's line, spoken to the caller in the agent's voice (a second line replaces
        one still playing)."""
        if self.closed:
            return ControlResult(404, "the conversation has ended")
        if self.taken_over_by is None:
            return ControlResult(409, "the conversation is not taken over: POST .../takeover first")
        who = by or self.taken_over_by
        self._barge_in("person's line")
        self._person_spoke_last = True
        self._person_says(text, who)
        return ControlResult(200, body={"said": text, "by": who})

    def hand_back(self, by: str | None = None) -> ControlResult:
        """The agent has the conversation again, with everything said meanwhile; it answers the
        caller now when the caller spoke last."""
        if self.closed:
            return ControlResult(404, "the conversation has ended")
        person = self.taken_over_by
        if person is None:
            return ControlResult(409, "the conversation is not taken over")
        self.taken_over_by = None  # a line of theirs still playing plays out
        text = f"{person} handed the conversation back to the agent"
        self._add_turn(Turn(role="system", content=text, agent=person, speaker=PERSON))
        self.channel._append(Takeover(self.session_id, active=False, by=person))
        self._arm_idle()
        answers = not self._person_spoke_last and self._caller_spoke_last()
        if answers:
            self._answer_history()
        logger.info(
            "conversation handed back by %s%s", by or person, "; the agent answers" if answers else ""
        )
        return ControlResult(200, body={"taken_over": False, "by": by or person, "answering": answers})

    # --- the transfer the agent asked for ------------------------------------------------------------
    async def _transfer_due(self) -> None:
        """After a response: a transfer ``escalate_to_human`` requested goes to the transport now
        (its line has been said; a paced wire lets it play out before it acts)."""
        memory = self.state.memory if self.state is not None else {}
        transfer = memory.get("transfer")
        if not isinstance(transfer, dict) or transfer.get("status") != "requested":
            return
        transfer["status"] = "started"
        scenario = (await self.directory.context(self.state)).scenario  # type: ignore[arg-type]
        target = scenario.transfer_target or ""
        transfer["target"] = target
        logger.info("transfer to a person requested (%s)", "to " + target if target else "no target set")
        self.channel._append(
            TransferRequested(
                self.session_id,
                target=target,
                reason=str(transfer.get("reason", "")),
                reference=str(transfer.get("reference", "")),
                priority=str(transfer.get("priority", "normal")),
            )
        )

    def transfer_done(self, target: str = "") -> ControlResult:
        """The provider accepted the transfer: the caller is with a person now."""
        if self.closed:
            return ControlResult(404, "the conversation has ended")
        self._transfer_status("accepted")
        note = f"the call was transferred to a person ({target})" if target else "the call was transferred"
        self._add_turn(Turn(role="system", content=note))
        return ControlResult(200, body={"transfer": "accepted"})

    def transfer_failed(self, detail: str = "") -> ControlResult:
        """The transfer failed: the caller is told, and the conversation goes on with the agent."""
        if self.closed:
            return ControlResult(404, "the conversation has ended")
        self._transfer_status("failed")
        logger.warning("transfer to a person failed: %s", detail or "no reason given")
        self._add_turn(Turn(role="system", content=f"the transfer to a person failed: {detail or 'unknown'}"))
        self._spawn(self._say_transfer_failed())
        return ControlResult(200, body={"transfer": "failed"})

    def _transfer_status(self, status: str) -> None:
        transfer = self.state.memory.get("transfer") if self.state is not None else None
        if isinstance(transfer, dict):
            transfer["status"] = status

    async def _say_transfer_failed(self) -> None:
        if self.state is None:
            return
        agent = (await self.directory.context(self.state)).agent
        if not self.closed:
            self._barge_in("transfer failed")
            self._speak(TRANSFER_FAILED_LINE, agent)

    # --- what the pipelines ask --------------------------------------------------------------------
    def _while_taken_over(self, text: str) -> bool:
        """A caller turn that would start an answer: while a person has the conversation it is
        stored (already shown: its transcript went out) and not answered. True when it was."""
        if self.taken_over_by is None:
            return False
        self._add_turn(Turn(role="user", content=text, agent=self._agent_name()))
        self._person_spoke_last = False
        self._spawn(self._set_state("listening"))
        return True

    def _caller_spoke_last(self) -> bool:
        for turn in reversed(self.history):
            if turn.role in ("user", "assistant"):
                return turn.role == "user"
        return False

    def _stop_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _person_says(self, text: str, by: str) -> None:
        """Speak ``text`` in the active agent's voice as ``by``'s line (the pipeline's own way)."""
        raise NotImplementedError

    def _answer_history(self) -> None:
        """The agent answers the history as it stands (the caller's last turn is in it)."""
        raise NotImplementedError
