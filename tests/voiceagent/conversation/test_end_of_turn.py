"""End of turn: the lexical rule fused with a turn model (voiceagent.conversation.end_of_turn).

The engine is driven frame by frame (``push_audio`` is synchronous) and the silence at which the
turn ends is counted in frames, so nothing here depends on the machine's speed. The turn model is
a stand-in with a scripted answer (the real one: tests/voiceagent/speech/test_turn_model.py).
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
from enginekit import AGENTS, SCENARIO, SILENCE, TONE, make_registry

from voiceagent.conversation.end_of_turn import fused_endpoint_ms
from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedChat, ScriptedSTT, StaticDirectory
from voiceagent.conversation.turn_taking import TurnTaking, endpoint_ms

SETTINGS = TurnTaking(endpointing_min_ms=500, endpointing_max_ms=1600)
MODEL_MS = 160  # the pause at which the model is asked (ListeningConfig.turn_model_ms)


class ScriptedTurnModel:
    """A ``TurnModel`` that answers ``probability`` on the next loop iteration, as the real one
    answers from its thread (``None``: the model failed; ``refuse``: its queue is full)."""

    name = "scripted-turn-model"

    def __init__(self, probability: float | None, refuse: bool = False):
        self.probability = probability
        self.refuse = refuse
        self.heard: list[int] = []  # bytes of audio each request carried

    def predict(self, pcm16, on_result, wanted=None) -> bool:
        if self.refuse:
            return False
        self.heard.append(len(pcm16))
        asyncio.get_running_loop().call_soon(on_result, self.probability)
        return True


# --- the fusion rule ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "logprob", "probability", "expected"),
    [
        ("Can you freeze my card please?", -0.1, 0.95, MODEL_MS),  # sure and complete: ends at the pause
        ("Can you freeze my card please?", -0.1, None, 500),  # no model answer: the rule as before
        ("Can you freeze my card please?", -0.1, 0.5, 330),  # unsure: half-way to the rule's wait
        ("Can you freeze my card please?", -0.1, 0.21, 494),  # barely: about the rule's wait
        ("Can you freeze my card please?", -0.1, 0.2, 1050),  # the model hears more coming: longer
        ("My code is paid.", -0.1, 0.17, 1050),  # a mishearing of "my code is eight ..."
        ("My card number is", -0.1, 0.99, 1600),  # unfinished words: the maximum whatever it says
        ("My code is 4", -0.1, 0.99, 1600),  # a number being read
        ("Can you freeze my card please?", -0.55, 0.99, 1050),  # words the recogniser is unsure of
        # a short sentence both doubt, a little and a lot: the longer wait ("i was born on ...")
        ("I went for long.", -0.31, 0.09, 1050),
        ("I went for long.", -0.31, 0.5, 522),  # the model not doubting: the recogniser's wait
        # a whole sentence the recogniser doubts a little keeps its wait (Smart Turn doubts slow voices)
        ("Someone stole my wallet with my credit card.", -0.35, 0.02, 610),
    ],
)
def test_the_fusion_of_words_and_model(text, logprob, probability, expected):
    assert fused_endpoint_ms(text, SETTINGS, logprob, probability, MODEL_MS) == expected
    if logprob >= -0.3 and probability != 0.2:  # sure words: the line's band changes nothing (but see
        # test_the_models_doubt_holds_sure_whole_sentences_only_to_the_timeout)
        assert fused_endpoint_ms(text, SETTINGS, logprob, probability, MODEL_MS, True, 2000) == expected


DOUBT = object()  # the recogniser's doubt's wait (the lexical rule with its confidence)


def test_on_a_phone_line_a_short_doubted_sentence_is_held_by_a_model_not_leaning_to_complete():
    """Seed 17's 8 kHz "i was born on ..." came back as "I went for long." at -0.435, Smart Turn at
    0.296 (above DOUBTFUL): the recogniser's 797 ms ended the 825 ms pause early."""
    phone = fused_endpoint_ms("I went for long.", SETTINGS, -0.435, 0.296, MODEL_MS, False, 1092)
    assert phone == 1050  # half-way from the minimum to the maximum, as for a doubting model
    full = fused_endpoint_ms("I went for long.", SETTINGS, -0.435, 0.296, MODEL_MS, True, 1092)
    assert full == endpoint_ms("I went for long.", SETTINGS, -0.435) == 797  # a full band: as before
    leaning = fused_endpoint_ms("I went for long.", SETTINGS, -0.435, 0.6, MODEL_MS, False, 1092)
    assert leaning == 797  # a model leaning to complete: the recogniser's wait


def test_words_far_below_a_guess_are_not_outweighed_by_a_sure_model_on_a_full_band():
    """Seed 16's digits fragment "... eight three three" came back as "But I'm very." at -1.41 a
    token (721 ms voiced: the words fit), Smart Turn at 0.93: the override ended it 660 ms early."""
    wait = fused_endpoint_ms("But I'm very.", SETTINGS, -1.41, 0.93, MODEL_MS, True, 721)
    assert wait == 1600
    assert fused_endpoint_ms("But I'm very.", SETTINGS, -1.2, 0.93, MODEL_MS, True, 721) == MODEL_MS


@pytest.mark.parametrize(
    ("text", "logprob", "probability", "expected"),
    [
        ("Hello there.", -1.04, 0.95, MODEL_MS),  # a sure model outweighs the doubt: ends at the pause
        # a model leaning to complete (LEANING..COMPLETE) outweighs it in proportion ("Hello nahre.")
        ("Hello there.", -1.04, 0.79, 537),
        ("Hello there.", -1.04, 0.77, 610),
        ("Hello there.", -1.04, 0.65, 1050),
        ("Hello there.", -1.04, 0.5, 1600),  # at LEANING and below: the doubt's wait
        ("Hello there.", -1.04, 0.3, 1600),
        ("Hello there.", -1.04, None, 1600),  # no model answer: the recogniser's doubt alone
        ("My card number is", -1.04, 0.99, 1600),  # unfinished words: the maximum, whatever the band
        # more words than the speech heard can hold ("the number is", 0.64 s, at 16 kHz): invented
        ("That's all I'm gonna do.", -0.9, 0.91, 1600),
        # doubted words in the shape of a misheard subject phrase ("my card number is ...")
        ("My card is done.", -0.9, 0.93, 1600),
        ("That's all I'm gonna do.", -0.9, 0.7, 1600),  # a leaning model: the same guards
        ("My card is done.", -0.9, 0.7, 1600),
        ("Hello there.", -1.29, 0.95, MODEL_MS),  # above OVERRIDE_FLOOR_LOGPROB: the override holds
    ],
)
def test_on_a_full_band_line_a_sure_model_outweighs_the_recognisers_doubt(
    text, logprob, probability, expected
):
    """On a telephone band the recogniser's doubt is what catches its confident mishearings of a
    fragment ("the number is ..." -> "No, I mean."), so it keeps its wait there whatever the model
    says; on a full band a sure model ends a complete-sounding turn at the pause, and a model
    leaning to complete shortens the doubt's wait in proportion, unless the words are more than
    the speech heard can hold (Whisper invented a sentence for a fragment)."""
    voiced_ms = 640  # "hello there" or "the number is", fast
    assert fused_endpoint_ms(text, SETTINGS, logprob, probability, MODEL_MS, True, voiced_ms) == expected
    narrow = fused_endpoint_ms(text, SETTINGS, logprob, probability, MODEL_MS, False, voiced_ms)
    assert narrow == fused_endpoint_ms(text, SETTINGS, logprob, probability, MODEL_MS)
    if text not in ("My card number is", "That's all I'm gonna do.", "My card is done."):
        assert narrow == 1600  # the doubt's wait, as before: a leaning model counts on a full band only


DOUBT = object()  # the recogniser's doubt's wait (the lexical rule with its confidence)


@pytest.mark.parametrize(
    ("text", "logprob", "probability", "expected"),
    [
        ("Can you freeze my card please?", -1.04, 0.95, MODEL_MS),  # a whole question, a sure model
        ("What time is it?", -1.15, 0.9, MODEL_MS),  # four words are enough
        ("Can you freeze my card please?", -1.04, 0.79, DOUBT),  # a model not sure enough
        ("Can you kick?", -0.6, 0.97, DOUBT),  # a short question: the corpus's misheard "can you check"
        ("Can you tell me about?", -0.6, 0.97, 1600),  # unfinished words: the maximum
        ("No thank you, that's all.", -0.6, 0.95, MODEL_MS),  # a statement of five words or more
        ("I think my account was hacked.", -0.5, 0.96, MODEL_MS),
        ("That's all I'm gonna do.", -0.9, 0.95, DOUBT),  # a statement below UNSURE_LOGPROB: a guess
        ("No, no, I'm married.", -0.6, 0.97, DOUBT),  # four words: the corpus's misheard "my name is"
        ("I went born long.", -0.6, 0.97, DOUBT),  # "i was born on ..."
        ("My card was stolen last night.", -0.6, 0.97, DOUBT),  # a possessive opening
    ],
)
def test_on_a_phone_line_a_sure_model_outweighs_the_doubt_about_a_whole_sentence(
    text, logprob, probability, expected
):
    """At 8 kHz tiny.en doubts many complete turns ("Can you freeze my card please?" -0.5, "What
    time is it?" -1.15, "No thank you, that's all." -0.6); its doubt still holds short questions
    and statements, the shape of its mishearings of a fragment, and statements it guessed at."""
    wait = fused_endpoint_ms(text, SETTINGS, logprob, probability, MODEL_MS, False, 2000)
    doubt = endpoint_ms(text, SETTINGS, logprob)
    assert doubt > 500 and wait == (doubt if expected is DOUBT else expected), wait


def test_on_a_full_band_a_statement_the_recogniser_doubts_must_fit_the_speech_heard():
    """A full band keeps its stricter fit for statements (4.5 words a voiced second): "the number
    is" came back as "That's all I'm gonna do." there; a question is let through as on a phone."""
    statement, question = "I think my account was hacked.", "Can you freeze my card please?"
    assert fused_endpoint_ms(statement, SETTINGS, -0.6, 0.95, MODEL_MS, True, 1000) == endpoint_ms(
        statement, SETTINGS, -0.6
    )  # six words in a voiced second: the doubt's wait
    assert fused_endpoint_ms(statement, SETTINGS, -0.6, 0.95, MODEL_MS, False, 1000) == MODEL_MS
    assert fused_endpoint_ms(question, SETTINGS, -0.6, 0.95, MODEL_MS, True, 1000) == MODEL_MS


@pytest.mark.parametrize(
    ("text", "logprob", "wideband", "expected"),
    [
        ("Can I talk to a real person?", -0.16, True, 500),  # sure words on a full band: the timeout
        ("Someone stole my wallet with my credit card.", -0.25, True, 500),
        ("Can I talk to a real person?", -0.16, False, 500),  # on a phone line as well
        ("What time is it?", -0.21, False, 500),  # flite slt at 8 kHz: Smart Turn 0.03
        ("Can I talk to a real person?", -0.4, True, 720),  # words the recogniser doubts: its own wait
        ("Tell me a joke.", -0.1, True, 1050),  # four words: no whole statement
        ("Tell me a joke.", -0.1, False, 1050),
        ("My card was stolen last night.", -0.1, True, 1050),  # a possessive opening
        ("My card was stolen last night.", -0.1, False, 1050),
    ],
)
def test_the_models_doubt_holds_sure_whole_sentences_only_to_the_timeout(text, logprob, wideband, expected):
    """Smart Turn doubts slow synthetic voices (0.01-0.07 for "Can I talk to a real person?" at
    150 wpm; 0.03-0.05 for flite slt's "What time is it?" on a phone line); the recogniser's
    sureness of a whole sentence caps its wait at VAD_SILENCE_TIMEOUT instead of half-way to the
    maximum."""
    assert fused_endpoint_ms(text, SETTINGS, logprob, 0.04, MODEL_MS, wideband, 2500) == expected


def test_the_cap_on_the_models_doubt_wants_the_words_to_fit_the_speech_the_lines_vad_heard():
    """A phone line's VAD calls fewer frames voiced (see the next test): there the words must fit
    8 a voiced second, on a full band 4.5."""
    question = "What time is it?"  # 4 words
    assert fused_endpoint_ms(question, SETTINGS, -0.21, 0.03, MODEL_MS, False, 600) == 500
    assert fused_endpoint_ms(question, SETTINGS, -0.21, 0.03, MODEL_MS, True, 600) == 1050
    assert fused_endpoint_ms(question, SETTINGS, -0.21, 0.03, MODEL_MS, False, 400) == 1050  # 10 a second


def test_a_whole_question_on_a_phone_line_may_fill_its_voiced_frames_densely_but_not_absurdly():
    """A phone line's VAD calls fewer frames voiced than a full band's: six words over 1.1 s of
    them is a caller (5.5 a second, over the full band's 4.5); over 0.4 s it is the recogniser
    writing more than was said."""
    question = "Can you freeze my card please?"
    assert fused_endpoint_ms(question, SETTINGS, -1.04, 0.95, MODEL_MS, False, 1100) == MODEL_MS
    assert fused_endpoint_ms(question, SETTINGS, -1.04, 0.95, MODEL_MS, False, 400) == 1600


# --- through the engine ------------------------------------------------------------------------------
async def _silence_at_end(
    text: str,
    model: ScriptedTurnModel | None,
    speech_frames: int = 40,
    stt: ScriptedSTT | None = None,
    speech: bytes = TONE,
) -> int:
    """Milliseconds of silence the caller had made when the engine ended their turn."""
    conv = Conversation(
        "eot",
        scenario="desk",
        directory=StaticDirectory(AGENTS, SCENARIO, make_registry()),
        store=InMemorySessionStore(),
        stt=stt or ScriptedSTT([text]),
        tts=InstantTTS(),
        chat=ScriptedChat(),
        vad=EnergyVAD(),
        config=EngineConfig(
            silence_timeout_ms=lambda: SETTINGS.endpointing_min_ms, turn_taking=lambda: SETTINGS
        ),
        turn_model=model,
    )
    await conv.start()
    try:
        for _ in range(20):  # the greeting
            await asyncio.sleep(0)
        for _ in range(speech_frames):
            conv.push_audio(speech)
            await asyncio.sleep(0)
        assert conv._utterance is not None
        for silent in range(1, 200):
            conv.push_audio(SILENCE)
            for _ in range(3):  # the model's answer comes on a later loop iteration
                await asyncio.sleep(0)
            if conv._utterance is None:
                return silent * 20
        raise AssertionError("the turn never ended")
    finally:
        await conv.close()


class LateTurnModel(ScriptedTurnModel):
    """A turn model whose answer comes ``late_frames`` frames after it was asked (a loaded machine:
    its thread queued behind other conversations' requests)."""

    def __init__(self, probability: float | None, late_frames: int):
        super().__init__(probability)
        self.late_frames = late_frames

    def predict(self, pcm16, on_result, wanted=None) -> bool:
        self.heard.append(len(pcm16))

        async def later() -> None:
            for _ in range(self.late_frames * 3):  # _silence_at_end: three iterations a frame
                await asyncio.sleep(0)
            on_result(self.probability)

        self.task = asyncio.get_running_loop().create_task(later())
        return True


@pytest.mark.parametrize(
    ("probability", "ends_ms"), [(0.05, (1040, 1080)), (0.97, (600, 760)), (None, (500, 760))]
)
async def test_a_turn_the_model_could_still_hold_waits_for_its_late_answer(probability, ends_ms):
    """The words alone would end "Tell me a joke." at 500 ms; the model, asked at 160 ms, answers
    ~27 frames later (a loaded machine). Its doubt (0.05) holds the turn to 1050 ms, so the turn
    does not end before the answer; a sure answer ends it at once; an answer of None (the model
    failed or gave way) leaves the words' 500 ms, which have passed: it ends at once too."""
    waited = await _silence_at_end("tell me a joke", LateTurnModel(probability, late_frames=27))
    low, high = ends_ms
    assert low <= waited <= high, waited


async def test_a_turn_the_model_hears_complete_ends_at_the_first_pause():
    model = ScriptedTurnModel(0.97)
    assert await _silence_at_end("can you freeze my card please", model) == MODEL_MS
    # it heard the whole utterance so far: the speech and the silence up to the pause
    assert model.heard and model.heard[0] >= (40 + MODEL_MS // 20) * len(SILENCE)


async def test_each_end_of_turn_says_at_debug_level_what_it_waited_on(caplog):
    with caplog.at_level(logging.DEBUG, logger="voiceagent.conversation"):
        assert await _silence_at_end("can you freeze my card please", ScriptedTurnModel(0.97)) == MODEL_MS
    said = [r.getMessage() for r in caplog.records if ": end of turn after " in r.getMessage()]
    assert len(said) == 1 and "wait 160 ms" in said[0] and "model 0.97" in said[0], said
    assert " ms voiced" in said[0], said  # the speech heard: what the fit of the words is judged on


async def test_without_the_model_the_turn_ends_after_the_minimum_silence():
    assert await _silence_at_end("can you freeze my card please", None) == 500


async def test_unfinished_words_wait_the_maximum_whatever_the_model_says():
    # the recogniser's interim is "my": a possessive's phrase, the subject of a sentence still said
    assert await _silence_at_end("my card number is", ScriptedTurnModel(0.99)) == 1600


async def test_the_model_hearing_more_to_come_makes_the_turn_wait_longer():
    assert await _silence_at_end("can you freeze my card please", ScriptedTurnModel(0.02)) == 1060


async def test_an_unsure_model_ends_the_turn_between_the_pause_and_the_rules_wait():
    assert await _silence_at_end("can you freeze my card please", ScriptedTurnModel(0.5)) == 340


async def test_a_caller_on_a_full_band_line_is_answered_at_the_pause_despite_the_recognisers_doubt():
    """The line's band is heard from the caller's speech: a full-band voice (a browser) whose
    complete-sounding words the recogniser doubts ends at the model's pause when the model is sure;
    the same words from a telephone-band line (the 440 Hz tone: nothing above 4 kHz) wait for the
    doubt, as before."""
    hiss = np.random.default_rng(5).standard_normal(len(TONE) // 2) * 800
    full_band = (np.frombuffer(TONE, "<i2") + hiss).astype("<i2").tobytes()
    sure = ScriptedTurnModel(0.97)

    def doubtful() -> ScriptedSTT:
        return ScriptedSTT(["hello there"], on_demand=True, logprob=-1.04)

    assert await _silence_at_end("hello there", sure, stt=doubtful(), speech=full_band) == MODEL_MS
    assert await _silence_at_end("hello there", sure, stt=doubtful(), speech=TONE) == 1600


async def test_a_failed_or_refused_model_leaves_the_lexical_rule():
    assert await _silence_at_end("can you freeze my card please", ScriptedTurnModel(None)) == 500
    assert await _silence_at_end("can you freeze my card please", ScriptedTurnModel(0.97, refuse=True)) == 500


async def test_the_pause_hypothesis_hears_every_frame_before_the_pause_even_in_a_burst():
    """Frames reach the recogniser on the utterance's task, behind the VAD. When they come in a
    burst (a loaded loop, a network batch, a batched VAD's verdicts), the hypothesis asked at the
    pause must still cover the last words: it may become the final transcript."""
    stt = ScriptedSTT(["can I talk to a real person"], on_demand=True)
    conv = Conversation(
        "burst",
        scenario="desk",
        directory=StaticDirectory(AGENTS, SCENARIO, make_registry()),
        store=InMemorySessionStore(),
        stt=stt,
        tts=InstantTTS(),
        chat=ScriptedChat(),
        vad=EnergyVAD(),
        config=EngineConfig(
            silence_timeout_ms=lambda: SETTINGS.endpointing_min_ms, turn_taking=lambda: SETTINGS
        ),
    )
    await conv.start()
    try:
        for _ in range(20):  # the greeting
            await asyncio.sleep(0)
        for _ in range(10):  # the caller starts; the recogniser's stream opens and keeps up
            conv.push_audio(TONE)
            await asyncio.sleep(0)
        for _ in range(3):
            await asyncio.sleep(0)
        for _ in range(30):  # then the rest of the words and the pause arrive at once
            conv.push_audio(TONE)
        for _ in range(10):
            conv.push_audio(SILENCE)
        for _ in range(20):
            await asyncio.sleep(0)
        assert stt.hint_frames, "no hypothesis was asked at the pause"
        # the pause's (the last asked: speech over the greeting may have asked the duck's before it)
        assert stt.hint_frames[-1] >= 40  # all 40 speech frames (and the preroll) were in it
    finally:
        await conv.close()


class LateVAD(EnergyVAD):
    """Silero's lag: speech after a silence is called speech only from its ``lag``-th frame on
    (its batch answers a frame or two behind, and its probability must climb past the threshold);
    ``never``: loud frames after the first pause it never calls speech (a knock)."""

    def __init__(self, lag: int = 2, never: bool = False):
        super().__init__()
        self.lag, self.never, self.loud_run, self.paused = lag, never, 0, False

    def is_speech(self, frame: bytes) -> bool:
        loud = super().is_speech(frame)
        self.loud_run = self.loud_run + 1 if loud else 0
        self.paused = self.paused or not loud
        return loud and not (self.never and self.paused) and self.loud_run > self.lag


async def _pause_then(vad: EnergyVAD, pause_frames: int, after: list[bytes]) -> tuple[int, int]:
    """The caller speaks 40 frames, pauses ``pause_frames``, then sends ``after`` and falls silent:
    (how many frames past the pause the turn ended, or 0 when it ended after ``after``; then the
    milliseconds of silence at that end)."""
    conv = Conversation(
        "late",
        scenario="desk",
        directory=StaticDirectory(AGENTS, SCENARIO, make_registry()),
        store=InMemorySessionStore(),
        stt=ScriptedSTT(["can you freeze my card please"]),
        tts=InstantTTS(),
        chat=ScriptedChat(),
        vad=vad,
        config=EngineConfig(
            silence_timeout_ms=lambda: SETTINGS.endpointing_min_ms, turn_taking=lambda: SETTINGS
        ),
    )
    await conv.start()
    started = False
    try:
        for _ in range(20):  # the greeting
            await asyncio.sleep(0)
        frames = [TONE] * 40 + [SILENCE] * pause_frames + after
        for i, frame in enumerate(frames, 1):
            conv.push_audio(frame)
            await asyncio.sleep(0)
            started = started or conv._utterance is not None
            if started and conv._utterance is None:
                return i - 40 - pause_frames, 0
        for silent in range(1, 200):
            conv.push_audio(SILENCE)
            await asyncio.sleep(0)
            if conv._utterance is None:
                return 0, silent * 20
        raise AssertionError("the turn never ended")
    finally:
        await conv.close()


async def test_a_caller_starting_again_before_a_late_vad_says_so_keeps_the_turn():
    """The pause is 480 ms and the rule's wait 500: the caller's next word starts on the pause's
    500th ms, and a VAD two frames late calls it silence. Its loudness says otherwise: the turn goes
    on, and ends after the next pause."""
    assert await _pause_then(LateVAD(lag=2), 24, [TONE] * 20) == (0, 500)
    assert await _pause_then(EnergyVAD(), 24, [TONE] * 20) == (0, 500)  # a VAD in time: the same


async def test_a_loud_sound_the_vad_never_calls_speech_delays_the_end_by_three_frames_at_most():
    # a knock on the pause's 500th ms: the turn ends on its 4th frame, 60 ms past the wait
    assert await _pause_then(LateVAD(never=True), 24, [TONE] * 10) == (4, 0)
    # quiet frames never hold the end: the first one past the wait ends the turn
    assert await _pause_then(EnergyVAD(), 24, [SILENCE] * 3) == (1, 0)
