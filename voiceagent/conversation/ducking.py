"""Speech over the agent, before its words are known: the agent is ducked, not stopped.

Why: stopping the agent at ``min_interruption_ms`` of speech over it and waiting for the final
transcript cost the caller 1-2 s of silence after an "mm hmm", then the interrupted clause said
again from its start. Now, at :data:`DUCK_AFTER_MS` of speech (or ``min_interruption_ms`` when
that is shorter), the agent's audio is *ducked*
(:data:`DUCK_GAIN_DB`, a :class:`~voiceagent.conversation.events.Duck` event every transport
applies to what it has not played) and keeps going on the playback clock, while the recogniser is
asked what was said at once and then every :data:`ASK_EVERY_MS` of further speech, and once the
caller falls quiet (:data:`QUIET_MS`):

- a hypothesis with a word that is no backchannel (nor noise, a hallucination, a guess, voices in
  the background) once the speech has lasted ``min_interruption_ms``, or more than
  :data:`BACKCHANNEL_MAX_MS` of speech over the agent (:data:`NOISE_MAX_MS` when every hypothesis,
  the latest recent, called it noise), is a real interruption: the answer is
  held as before (queued audio purged, ``StopAudio``), the words heard counted up to the duck (a
  ducked agent under the caller's voice was not heard);
- a backchannel or noise, once the caller is quiet, restores the gain (``Duck(0)``): no gap,
  nothing said twice;
- an utterance that ends first is judged on its final transcript as before
  (:meth:`~voiceagent.conversation.listening.CascadeListening._heard`).

Tried and withdrawn (2026-11-28, twelfth session): an unsure hypothesis (mean token log-probability
under -0.7) of a short utterance over the agent taken for a guess at a backchannel (Whisper writes
espeak's "mm-hmm" on a phone line as "and then them." at -0.85 without the vocabulary prompt). On
bench_turn_taking seed 17 (webrtc, 40 a category) it left the one stopped "mm-hmm" as it was (with
the prompt its hypothesis is surer) and the agent ignored two real interruptions on echoed lines
("No. My card was stolen.", "I have a different question.": answered 100 -> 95 %), the first
version also when the caller went on after the agent stopped. A caller who is not answered is
worse than an agent that stops for an "mm-hmm".

A recogniser without hypotheses on demand (``hint_pause``) decides through its interims, its final
transcript and the length rule. A ``StopAudio`` ends a duck on every wire; any other end of one
(the verdict, a new response) sends ``Duck(0)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.events import Duck, EventChannel
from voiceagent.conversation.turn_taking import is_backchannel, is_guess, is_hallucination

if TYPE_CHECKING:
    from voiceagent.conversation.echo import EchoReference
    from voiceagent.conversation.turn_taking import TurnTaking

__all__ = [
    "ASK_EVERY_MS",
    "BACKCHANNEL_MAX_MS",
    "DUCK_AFTER_MS",
    "DUCK_GAIN_DB",
    "NOISE_MAX_MS",
    "QUIET_MS",
    "CascadeDucking",
]

logger = logging.getLogger("voiceagent.conversation")

DUCK_GAIN_DB = -20.0  # the agent under a caller whose words are not known yet: heard, not in the way
# speech over the agent this long ducks it (or min_interruption_ms, when that is shorter): the caller
# hears the agent give way within ~0.25 s of their onset (bench_turn_taking seed 16: stop p50 646 ->
# 230 ms against ducking at MIN_INTERRUPTION_MS = 300); a 150 ms noise burst never reaches it
DUCK_AFTER_MS = 180
BACKCHANNEL_MAX_MS = 1200  # speech over the agent this long (from its onset) is no "uh-huh" ...
# ... unless every hypothesis so far called it noise and the latest heard all but the last
# NOISE_FRESH_MS of it (a babble of voices, a long 8 kHz "mm-hmm": bench_turn_taking seed 17 stopped
# the agent for 1.4-2.4 s on three babbles whose hypotheses were "Thank you." / "All right."); it
# stays ducked up to NOISE_MAX_MS of such sound, as long as the recogniser keeps up
NOISE_FRESH_MS = 1000
NOISE_MAX_MS = 3000
ASK_EVERY_MS = 200  # while ducked and the caller speaks: another hypothesis after this much speech
QUIET_MS = 80  # the caller has stopped: a hypothesis of everything said, to restore on


@dataclass
class _Ducked:
    utterance: Any  # the listening side's utterance that ducked the agent
    since: float  # loop time the gain went down (the words heard end here on an interruption)
    onset_ms: int  # the utterance's speech over the agent before this stretch began
    next_ask_ms: int  # its speech over the agent at which to ask again
    asking: int = 0  # hypotheses in flight
    word: bool = False  # a hypothesis held a word before min_interruption_ms of speech
    noise_upto: int = -1  # speech frames the latest hypothesis judged noise had heard (-1: none)


class CascadeDucking:
    """The duck and its verdict (state on the conversation; the listening side calls in)."""

    session_id: str
    config: Any
    channel: EventChannel
    active_rid: int | None
    closed: bool
    _echo: EchoReference
    _turn: TurnTaking
    _silence_ms: int
    _utterance: Any
    _held: Any

    if TYPE_CHECKING:  # the conversation's own

        def loop_time(self) -> float: ...

        def _hold_answer(self) -> bool: ...

        def _foreground(self, utterance: Any) -> bool: ...

        def _agent_busy(self) -> bool: ...

        def _ask_in_order(self, utterance: Any, ask: Any) -> None: ...

    _duck: _Ducked | None = None
    _stretch_from_ms: int = 0  # speech over the agent before the current stretch (after a restore)
    _stretch_of: Any = None  # the utterance that count belongs to

    # --- called by the listening side -------------------------------------------------------------
    def _speech_over_agent(self, utterance: Any) -> None:
        """A speech frame of ``utterance`` over the (unheld) agent: duck, ask, or call it an
        interruption."""
        if self._stretch_of is not utterance:
            self._stretch_of, self._stretch_from_ms = utterance, 0
        stretch = utterance.over_agent_ms - self._stretch_from_ms
        duck = self._duck
        if duck is None:
            duck_at = min(DUCK_AFTER_MS, self._turn.min_interruption_ms)
            if stretch >= duck_at and self._foreground(utterance):
                self._begin_duck(utterance, stretch)
            return
        if duck.utterance is not utterance:  # a duck left by an utterance that ended: judged there
            return
        length = utterance.over_agent_ms - duck.onset_ms
        if length >= BACKCHANNEL_MAX_MS and not self._heard_as_noise(utterance, duck, length):
            self._interruption(utterance)  # too long for a backchannel, and no words known to say so
        elif duck.word and stretch >= self._turn.min_interruption_ms:
            self._interruption(utterance)  # words, and now long enough to stop the agent
        elif not duck.asking and utterance.over_agent_ms >= duck.next_ask_ms:
            self._ask(utterance)

    def _duck_decides(self, utterance: Any) -> bool:
        """Does ``utterance``'s recogniser give hypotheses on demand? Then the duck's verdict, which
        weighs the recogniser's confidence, stops the agent or not, and an interim (which does not
        say how sure it is) never does: under the duck an 8 kHz "mm-hmm" came back as the interim
        "I'm handsome." (-1.36 when asked, a guess) and held the agent for 1 s (bench_turn_taking
        seed 16 silero); after the verdict had restored the agent, as "And then from." (-1.29),
        982 ms (seed 17 silero); and a cough too short to duck the agent (under
        :data:`DUCK_AFTER_MS`) as "Thats all.", 802 ms (seed 17 silero, under load). Speech over
        the agent long enough to matter ducks it, and that duck's verdict decides."""
        return getattr(utterance.stream, "hint_pause", None) is not None

    def _quiet_over_agent(self, utterance: Any) -> None:
        """A silent frame of ``utterance`` while the agent is ducked: once the caller has been
        quiet for :data:`QUIET_MS`, what they said is asked for (to restore the agent on)."""
        duck = self._duck
        if duck is not None and duck.utterance is utterance and self._silence_ms == QUIET_MS:
            self._ask(utterance)

    def _over_agent_noise(self, utterance: Any, text: str, logprob: float | None) -> bool:
        """Is ``text``, said over the agent, no turn of the caller's: a backchannel, a recogniser's
        words for a noise, a guess, or voices behind the caller?"""
        background = bool(utterance.over_agent_ms) and not self._foreground(utterance)
        voiced_ms = utterance.voiced_frames * self.config.frame_ms
        return background or is_backchannel(text) or is_hallucination(text, voiced_ms) or is_guess(logprob)

    def _heard_as_noise(self, utterance: Any, duck: _Ducked, length_ms: int) -> bool:
        """Has the recogniser kept up with this long sound over the agent and called it noise all
        along (a babble, a long "mm-hmm", a TV)? Then it stays ducked past
        :data:`BACKCHANNEL_MAX_MS`, up to :data:`NOISE_MAX_MS`: a word in a later hypothesis still
        stops the agent, and the caller being quiet restores it."""
        if duck.noise_upto < 0 or duck.word or length_ms >= NOISE_MAX_MS:
            return False
        behind_ms = (utterance.speech_frames - duck.noise_upto) * self.config.frame_ms
        return behind_ms <= NOISE_FRESH_MS

    def _restore_duck(self, of: Any = None) -> None:
        """The sound over the agent was nothing it must stop for: full gain again, from now (``of``:
        only a duck that utterance began)."""
        duck = self._duck
        if duck is None or (of is not None and duck.utterance is not of):
            return
        self._duck = None
        utterance = duck.utterance
        if self._stretch_of is utterance:
            self._stretch_from_ms = utterance.over_agent_ms  # a new stretch must reach the threshold
        self._set_gain(0.0)

    # --- called by the speaking side --------------------------------------------------------------
    def _duck_over(self, stopping: bool) -> float | None:
        """The duck ends with the answer held or abandoned (``stopping``: a ``StopAudio`` follows,
        which ends it on the wire) or a new response beginning (``Duck(0)`` now). Returns when it
        began (what the caller heard of the answer ends there), None when there was none."""
        duck, self._duck = self._duck, None
        if duck is None:
            return None
        if stopping:
            self._echo.duck(self.loop_time(), 0.0)
        else:
            self._set_gain(0.0)
        return duck.since

    # --- inside -----------------------------------------------------------------------------------
    def _begin_duck(self, utterance: Any, stretch: int) -> None:
        onset = utterance.over_agent_ms - stretch
        self._duck = _Ducked(utterance, self.loop_time(), onset, utterance.over_agent_ms + ASK_EVERY_MS)
        self._set_gain(DUCK_GAIN_DB)
        self._ask(utterance)

    def _set_gain(self, gain_db: float) -> None:
        self._echo.duck(self.loop_time(), gain_db)
        rid = self.active_rid or 0
        self.channel._append(Duck(self.session_id, gain_db=gain_db, response_id=rid))

    def _ask(self, utterance: Any) -> None:
        """A hypothesis of everything said so far, when the recogniser can give one on demand
        (asked once it has every frame heard so far: the listening side's ``_ask_in_order``)."""
        duck = self._duck
        if duck is None or getattr(utterance.stream, "hint_pause", None) is None:
            return
        spoken = utterance.speech_frames
        duck.asking += 1
        duck.next_ask_ms = utterance.over_agent_ms + ASK_EVERY_MS

        def ask(stream: Any) -> None:
            if not stream.hint_pause(
                lambda text, logprob=None: self._judge(utterance, spoken, text, logprob)
            ):
                duck.asking -= 1  # it cannot say (too little audio): the next frames ask again

        self._ask_in_order(utterance, ask)

    def _judge(self, utterance: Any, spoken: int, text: str, logprob: float | None) -> None:
        """A hypothesis asked when ``spoken`` speech frames had been heard: a word means an
        interruption; noise restores the agent if the caller has said nothing since."""
        duck = self._duck
        if duck is None or duck.utterance is not utterance or self.closed:
            return
        duck.asking -= 1
        text = text.strip()
        noise = not text or self._over_agent_noise(utterance, text, logprob)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s: over the agent, %d ms in (%d voiced): %r at %s: %s", self.session_id,
                utterance.over_agent_ms - duck.onset_ms, utterance.voiced_frames * self.config.frame_ms,
                text, logprob if logprob is None else round(logprob, 2), "noise" if noise else "words",
            )  # fmt: skip
        if not noise:
            if utterance.over_agent_ms - duck.onset_ms >= self._turn.min_interruption_ms:
                self._interruption(utterance)
            else:  # shorter than min_interruption_ms: it stops the agent once it is that long
                duck.word = True
        else:
            duck.noise_upto = max(duck.noise_upto, spoken)
            if utterance.speech_frames == spoken and (self._silence_ms or self._utterance is not utterance):
                self._restore_duck()

    def _interruption(self, utterance: Any) -> None:
        """A real interruption: hold the answer (its audio stops) as the threshold once did. When
        there is nothing to hold (its last words still playing out), it stays ducked until the
        final transcript's turn stops it."""
        if self._hold_answer():
            utterance.held = True
