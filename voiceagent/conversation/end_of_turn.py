"""End of turn from the words AND the voice: the lexical rule fused with a turn model.

The lexical rule (:func:`~voiceagent.conversation.turn_taking.endpoint_ms`) knows an unfinished
clause or a number being read from the words, but after a complete-sounding phrase it can only
wait ``VAD_SILENCE_TIMEOUT`` (500 ms): a sentence's end and a breath before the next one read the
same. A turn model (:class:`~voiceagent.conversation.providers.TurnModel`, Smart Turn v3.2 by
default) hears the intonation and pace of the last seconds and says how likely the turn is over.
The recogniser is asked what was said at ``pause_hint_ms`` of silence (100 ms), the model at
``turn_model_ms`` (160 ms: it was trained on turns ending ~0.2 s into the silence and judges worse
with less), and the two decide:

- the words are unfinished (or, on a telephone band, the recogniser unsure of them): the lexical
  rule's wait, whatever the model says (on synthetic voices it hears "my card number is" or "my
  code is four" as complete as often as not), but at least the doubt's wait below for a short
  sentence the model doubts (:func:`_whole`);
- the words sound complete: the model's probability that the turn is complete sets the wait, from
  "now" (the model's own pause, at :data:`COMPLETE` and above) to ``VAD_SILENCE_TIMEOUT`` (just
  above :data:`DOUBTFUL`), in proportion between the two. More conservative than Pipecat's use of
  the same model (complete above 0.5, at its VAD's 200 ms stop): at 0.5 the turn ends after
  ~330 ms of silence;
- the words sound complete but the model hears more coming (<= :data:`DOUBTFUL`): half-way from
  ``VAD_SILENCE_TIMEOUT`` to ``ENDPOINTING_MAX_MS`` (1050 ms by default). This is what catches the
  recogniser's confident mishearings of a fragment ("my code is eight" -> "My code is paid.", "I
  was born on" -> "I went for a long." at 8 kHz: 0.17 and 0.06 from the model), the premature
  ends the words alone cannot see; a complete turn the model doubts (~20 % of the corpus's
  synthetic voices) waits that long, but a whole sentence the recogniser is sure of only to
  ``VAD_SILENCE_TIMEOUT`` (:func:`_sure_whole_sentence`);
- without a model answer (none configured, missing, failed, its queue full): the lexical rule
  alone, as before.

A sure model and doubted words: on a full-band line (and for whole sentences). Letting a sure model (>=
:data:`COMPLETE`) outweigh the recogniser's doubt about complete-sounding words on every line (espeak's
"hello there" comes back as "Hello there." at -1.04 and waited the maximum) made 10 % of seed 16's
pauses end early (bench_turn_taking, webrtc, 40 a category): at 8 kHz "the number is ..." comes back
as "No, I mean." / "I'm worried." (-0.6 and below) and the model scores those pauses 0.88-0.93
complete - there the recogniser's doubt is the only thing that catches them. So the line's band is
heard (:mod:`voiceagent.conversation.line_band`) and the model outweighs the doubt only on a full
band, and only for words that fit the speech heard (:data:`PLAUSIBLE_WORDS_PER_S`) and do not open
with a possessive (the two 16 kHz mishearings the full-band override ended early on seeds 16 and 17).
On a telephone band a whole sentence is let through as well (:func:`_outweighs_doubt`): a question
of 4 words or more, or a statement of 5 or more the recogniser is not guessing at (not below
``UNSURE_LOGPROB``). Offline (``bench_end_of_turn_rule``: the corpus's plain turns and pauses
decoded as the engine does, seeds 16 and 17, 80 a category), whole questions took the phone-band
complete turns ended within 500 ms 0.167 -> 0.283 and 0.133 -> 0.217; statements then (with the
copula rule of ``turn_taking.closes_embedded_question``) 0.23 -> 0.40 and 0.23 -> 0.36, ended at
once 0.18 -> 0.34 and 0.17 -> 0.30, with no more fragments ended early (1/120 each). Letting every
question through (3-word ones too) ended "can you check ..." misheard as "Can you kick?", and
4-word statements "my name is ..." misheard as "No, no, I'm married." (seed 17).

On a full band a model leaning to complete (:data:`LEANING` up to :data:`COMPLETE`) shortens the
doubt's wait in proportion, under the same guards.

The words are waited for whenever the recogniser was asked (``hint_pending``): the model never
ends a turn on audio alone while a hypothesis is on its way, so the decision comes when both are
in: ~100 ms + the recogniser's decode, instead of ``VAD_SILENCE_TIMEOUT`` at the earliest. And the
words never end a turn while the model's answer is on its way and could still hold it
(:meth:`TurnModelListening._endpoint_for`).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.providers import TurnModel
from voiceagent.conversation.turn_taking import (
    MAX_WORDS_PER_VOICED_S,
    SURE_LOGPROB,
    UNSURE_LOGPROB,
    TurnTaking,
    endpoint_ms,
    is_hallucination,
    is_whole_question,
    is_whole_statement,
    opens_with_possessive,
)
from voiceagent.speech.audio.levels import frame_dbfs

__all__ = [
    "COMPLETE",
    "DOUBTFUL",
    "HEARD_FRAMES",
    "PauseModel",
    "TurnModelListening",
    "fused_endpoint_ms",
]

logger = logging.getLogger("voiceagent.conversation")

COMPLETE = 0.8  # the model at least this sure the turn is complete: it ends at the pause
DOUBTFUL = 0.2  # the model at most this sure: it hears more coming, the wait grows
# on a full band, a model between this and COMPLETE outweighs the recogniser's doubt in proportion:
# espeak's "hello there" came back as "Hello nahre." at -1.1 with the model at 0.77 and waited the
# maximum (1600 ms), 0.03 short of the override. bench_end_of_turn_rule (seeds 16-19, 80 a
# category): 12 of 400 full-band complete turns sit there (0.51-0.80, -0.3..-0.9), and 2 of 480
# fragments, both more words than the speech heard ("Be your nore.", "So hum the risk.")
LEANING = 0.5
HEARD_FRAMES = 400  # 8 s of 20 ms frames: what Smart Turn hears at most
# words per second of voiced audio a doubted hypothesis may hold for a sure model to outweigh the
# doubt: a caller's words fit (~2-4), Whisper inventing a sentence for a fragment does not
# ("the number is" at 16 kHz -> "That's all I'm gonna do.", the model 0.91: seed 16)
PLAUSIBLE_WORDS_PER_S = 4.5
# below this mean log-probability a token the words are no hypothesis a sure model can vouch for,
# even on a full band: seed 16's digits fragment "... eight three three" came back as "But I'm
# very." at -1.41, Smart Turn at 0.93, and ended 660 ms early (bench_end_of_turn_rule on the
# 2026-12-01 AVX2 machine); the override's own cases sat at -1.04 ("Hello there.") and -1.1
# ("Hello nahre."), and no complete turn of seeds 16 and 17 comes back below -1.0 with the model
# at 0.5 or more
OVERRIDE_FLOOR_LOGPROB = -1.3


def fused_endpoint_ms(
    text: str,
    settings: TurnTaking,
    logprob: float | None,
    probability: float | None,
    asked_at_ms: int,
    wideband: bool = False,
    voiced_ms: int = 0,
) -> int:
    """The silence (ms) that ends the turn after ``text``, given the turn model's ``probability``
    that it is complete (None: no model answer for this pause) asked at ``asked_at_ms`` of
    silence. Never shorter than the lexical rule when the words are unfinished, nor when they are
    unsure on a telephone band; on a full band (``wideband``), or for a whole sentence
    (:func:`is_whole_question`, :func:`is_whole_statement`), a sure model outweighs the
    recogniser's doubt about complete-sounding words that fit the ``voiced_ms`` of speech heard
    and do not open with a possessive (doubted, that is the shape of a misheard subject phrase:
    "my card number is ..." -> "My card is done." at 16 kHz, the model 0.93: seed 17)."""
    lexical = endpoint_ms(text, settings, logprob)
    if (
        probability is not None
        and probability >= (LEANING if wideband else COMPLETE)
        and lexical > settings.endpointing_min_ms
        and _outweighs_doubt(text, logprob, wideband, voiced_ms)
    ):
        alone = endpoint_ms(text, settings, None)  # the words alone: complete or not
        share = min(1.0, max(0.0, (COMPLETE - probability) / (COMPLETE - LEANING)))
        lexical = min(lexical, alone + round((lexical - alone) * share))  # see LEANING
    if probability is None:
        return lexical
    doubt_ms = (settings.endpointing_min_ms + settings.endpointing_max_ms) // 2
    # a phone line: a model not leaning to complete holds it too (see _whole)
    holds = probability <= DOUBTFUL if wideband else probability < LEANING
    if holds and lexical > settings.endpointing_min_ms and not _whole(text):
        return max(lexical, doubt_ms)  # a short sentence doubted by both: see _whole
    if lexical > settings.endpointing_min_ms or lexical <= asked_at_ms:
        return lexical
    if probability <= DOUBTFUL and not _sure_whole_sentence(text, logprob, wideband, voiced_ms):
        return max(lexical, doubt_ms)
    doubt = min(1.0, max(0.0, (COMPLETE - probability) / (COMPLETE - DOUBTFUL)))
    return asked_at_ms + round((lexical - asked_at_ms) * doubt)


def _whole(text: str) -> bool:
    """A whole question or statement (:func:`is_whole_question`, :func:`is_whole_statement`): when
    the recogniser's slight doubt already holds its turn past ``VAD_SILENCE_TIMEOUT``, the model's
    doubt adds nothing to it. A shorter sentence, the shape of a misheard fragment, takes the
    model's doubt as well: seed 17's 8 kHz "i was born on ..." came back as "I went for long." at
    -0.31 (a 520 ms wait), Smart Turn at 0.09, and ended early in every bench_turn_taking silero
    run. Whole sentences keep the recogniser's wait: 13 of seed 16's 200 complete turns (slow
    espeak voices Smart Turn doubts) would otherwise wait 1050 ms instead of 520-970. On a
    telephone band a model that does not lean to complete (below :data:`LEANING`) holds it too: on the
    2026-12-01 machine the same fragment came back at -0.435 with the model at 0.296, waited
    797 ms and ended 28 ms early (bench_end_of_turn_rule and bench_turn_taking seed 17 webrtc);
    offline, seeds 16 and 17, it was the only point that rule moved."""
    return is_whole_question(text) or is_whole_statement(text)


def _sure_whole_sentence(text: str, logprob: float | None, wideband: bool, voiced_ms: int) -> bool:
    """Words the model's doubt (<= :data:`DOUBTFUL`) cannot hold past ``VAD_SILENCE_TIMEOUT``: a
    whole question or statement the recogniser is sure of (``SURE_LOGPROB``), not opening with a
    possessive, fitting the speech the line's VAD heard (:data:`PLAUSIBLE_WORDS_PER_S` on a full
    band; on a telephone band, whose VAD calls fewer frames voiced, ``is_hallucination``'s own 8).
    Smart Turn doubts slow synthetic voices ("Can I talk to a real person?" at 150 wpm: 0.01-0.07,
    -0.16 from the recogniser; flite slt's "What time is it?" at 8 kHz: 0.03, -0.21, 680 ms
    voiced), and the mishearings its doubt caught were short sentences (:func:`_whole`) or
    possessive phrases. bench_end_of_turn_rule, complete turns ended within 500 ms, seeds
    16/17/18/19: 16 kHz 0.44 -> 0.53, 0.48 -> 0.54, 0.49 -> 0.56, 0.44 -> 0.52 (the full band);
    8 kHz 0.39 -> 0.43, 0.30 -> 0.35, 0.36 -> 0.37, 0.31 -> 0.34 (the phone band); no more
    fragments ended early."""
    fit = PLAUSIBLE_WORDS_PER_S if wideband else MAX_WORDS_PER_VOICED_S
    return (
        logprob is not None
        and logprob >= SURE_LOGPROB
        and _whole(text)
        and not opens_with_possessive(text)
        and not is_hallucination(text, voiced_ms, fit)
    )


def _outweighs_doubt(text: str, logprob: float | None, wideband: bool, voiced_ms: int) -> bool:
    """May a sure model outweigh the recogniser's doubt about these complete-sounding words? Not
    when they open with a possessive or are far below a guess (:data:`OVERRIDE_FLOOR_LOGPROB`); on
    a full band when they fit the speech heard; for a whole question on any band, and a whole
    statement the recogniser is not guessing at on a telephone band, when they are not its loop
    (that band's VAD hears fewer voiced frames). A full band's
    statements keep the stricter fit: "the number is" came back as "That's all I'm gonna do." there,
    the model 0.91; on a phone line that was at -0.9."""
    if opens_with_possessive(text) or (logprob is not None and logprob < OVERRIDE_FLOOR_LOGPROB):
        return False
    if wideband and not is_hallucination(text, voiced_ms, PLAUSIBLE_WORDS_PER_S):
        return True
    whole = is_whole_question(text) or (
        not wideband and is_whole_statement(text) and (logprob is None or logprob >= UNSURE_LOGPROB)
    )
    return whole and not is_hallucination(text, voiced_ms)


# A frame the VAD calls silent but this much louder than the pause's quietest (and than
# ONSET_MIN_DBFS) is the caller starting again before the VAD says so: the turn does not end on it.
# Silero's verdicts come a frame or two behind the audio (its batch runs on a thread, and its
# probability must climb past the threshold): bench_turn_taking seed 17 silero ended "my card
# number is ... four two seven one" on its pause's 1140th ms, 26 ms into "four" (the wait was 1134
# ms for a 1114 ms pause), in every run of the last three sessions.
ONSET_OVER_PAUSE_DB = 15.0
ONSET_MIN_DBFS = -50.0
ONSET_FRAMES = 3  # a sound the VAD never calls speech (a knock) delays the end by at most this many


@dataclass
class PauseModel:
    """One utterance's state for the turn model: the audio it hears and its answer for this pause,
    and how loud the pause is (a caller starting again before the VAD says so)."""

    heard: deque[bytes] = field(default_factory=lambda: deque(maxlen=HEARD_FRAMES))
    gap: int = 0  # silences so far: an answer for an earlier one is stale
    probability: float | None = None  # the model's answer for the current silence
    pending: bool = False  # asked for the current silence, not yet answered
    quietest_db: float = 0.0  # the quietest frame of the current silence (dBFS)
    loud_frames: int = 0  # its frames that sounded like speech the VAD had not called so
    onset: bool = False  # the latest frame did, and the end waits for the VAD (ONSET_FRAMES at most)

    def spoke_again(self) -> None:
        """The caller spoke after a silence: the model's answer for it, come or coming, is stale."""
        self.gap += 1
        self.probability, self.pending = None, False


class TurnModelListening:
    """The listening side's use of the turn model (a mixin of the conversation, state on it)."""

    turn_model: TurnModel | None = None  # the conversation's (None: the words alone decide)
    session_id: str
    closed: bool
    config: Any
    _utterance: Any
    _turn: TurnTaking
    _endpoint_ms: int
    _silence_ms: int
    _line: Any  # LineBand: is the caller on a full-band line

    if TYPE_CHECKING:

        def _end_utterance(self, utterance: Any) -> None: ...

    def _silent_frame(self, utterance: Any, frame: bytes) -> None:
        """A frame of ``utterance``'s pause the VAD called silent: does it sound like the caller
        starting again (:data:`ONSET_OVER_PAUSE_DB` over the pause's quietest frame)? Then the turn
        does not end on it (:meth:`_pause_over`), for :data:`ONSET_FRAMES` such frames at most."""
        pause: PauseModel = utterance.pause
        level = frame_dbfs(frame)
        if self._silence_ms <= self.config.frame_ms:  # the pause's first frame: the speech's tail
            pause.quietest_db, pause.loud_frames, pause.onset = level, 0, False
            return
        loud = level >= max(ONSET_MIN_DBFS, pause.quietest_db + ONSET_OVER_PAUSE_DB)
        pause.quietest_db = min(pause.quietest_db, level)
        pause.loud_frames += loud
        pause.onset = loud and pause.loud_frames <= ONSET_FRAMES

    def _pause_over(self, utterance: Any) -> bool:
        """Has the caller been silent long enough for the turn to end now (and the latest frame
        not the start of more speech the VAD has yet to call so)?"""
        return self._silence_ms > 0 and self._endpoint_ms <= self._silence_ms and not utterance.pause.onset

    def _endpoint_for(self, utterance: Any) -> int:
        """The silence that ends ``utterance`` now: its words and, for this pause, the model. While
        the model's answer is on its way it counts as the most doubting one (0): a turn never ends
        on the words before an answer that could still hold it (it ends at once when the answer
        says so). On a loaded machine the answer came ~590 ms into the pause, after the words'
        522 ms for "I went for long." (8 kHz "i was born on ...", bench_turn_taking seed 17 silero),
        which the model's 0.09 would have held to 1050 ms: the caller went on at 794 ms. A client
        that stops sending in the pause does not hang the turn: the gap is silence (StreamGaps)."""
        pause: PauseModel = utterance.pause
        at_ms, probability = self.config.turn_model_ms, 0.0 if pause.pending else pause.probability
        wideband, voiced_ms = bool(self._line.wideband), utterance.voiced_frames * self.config.frame_ms
        return fused_endpoint_ms(
            utterance.text, self._turn, utterance.logprob, probability, at_ms, wideband, voiced_ms
        )

    def _end_reason(self, utterance: Any) -> str:
        """What the end-of-turn decision was made on (a DEBUG line: why a turn waited as it did)."""
        words = "pending" if utterance.hint_pending else repr(utterance.text)
        logprob, p = utterance.logprob, utterance.pause.probability
        sure, model = (None if v is None else round(v, 2) for v in (logprob, p))
        band = {True: "full band", False: "phone band", None: "band unknown"}[self._line.wideband]
        head = f"{self.session_id}: end of turn after {self._silence_ms} ms of silence"
        voiced = f"{band}, {utterance.voiced_frames * self.config.frame_ms} ms voiced"
        return f"{head}: wait {self._endpoint_ms} ms, words {words}, logprob {sure}, model {model}, {voiced}"

    def _ask_turn_model(self, utterance: Any) -> None:
        """A pause: the model hears the utterance so far (in its own thread)."""
        model = self.turn_model
        if model is None:
            return
        state: PauseModel = utterance.pause
        gap = state.gap

        def wanted() -> bool:  # asked in the model's thread: reads two attributes
            return state.gap == gap and self._utterance is utterance

        heard = b"".join(state.heard)
        state.pending = model.predict(heard, lambda p: self._on_turn_probability(utterance, gap, p), wanted)
        if state.pending and not utterance.hint_pending:  # the words are in: hold them for the answer
            self._endpoint_ms = self._endpoint_for(utterance)

    def _on_turn_probability(self, utterance: Any, gap: int, probability: float | None) -> None:
        """The model's answer for the pause ``gap`` (on the loop): when the words are already in,
        the turn may end at once."""
        state: PauseModel = utterance.pause
        if self.closed or utterance is not self._utterance or state.gap != gap:
            return  # the turn ended, or the caller spoke again since
        state.probability, state.pending = probability, False
        if utterance.hint_pending:
            return  # the words decide with it when they come
        self._endpoint_ms = self._endpoint_for(utterance)
        if self._pause_over(utterance):
            self._end_utterance(utterance)
