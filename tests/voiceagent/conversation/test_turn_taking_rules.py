"""The turn-taking judgements: backchannels, the lexical end-of-turn rule, the settings merge, and
the echo gate's reference levels."""

from __future__ import annotations

import numpy as np
import pytest

from voiceagent.conversation.echo import EchoReference
from voiceagent.conversation.end_of_turn import fused_endpoint_ms
from voiceagent.conversation.turn_taking import (
    TurnTaking,
    TurnTakingSpec,
    endpoint_ms,
    is_backchannel,
    is_hallucination,
    resolve,
)

SETTINGS = TurnTaking(endpointing_min_ms=500, endpointing_max_ms=1600)


@pytest.mark.parametrize(
    "text",
    [
        "uh-huh",
        "Uh huh.",
        "Mm-hmm",
        "okay",
        "Yeah, right.",
        "ok ok",
        "",
        "Hmm?",
        "Bye bye.",
        "Thank you.",
        "Uh-uh.",
        "Mm-mm.",
    ],
)
def test_backchannels_and_noise(text):
    assert is_backchannel(text)


@pytest.mark.parametrize(
    "text", ["stop", "wait a moment", "no", "yeah but my card was stolen", "I lost my card"]
)
def test_words_that_take_the_turn(text):
    assert not is_backchannel(text)


@pytest.mark.parametrize(
    ("text", "voiced_ms"),
    [
        ("I'm just click click click click click click", 900),  # a keyboard, decoded as a loop
        ("That's it.", 200),  # two words in a 200 ms cough
        ("Can you see what we all know is all that's covered", 600),  # ten words in 0.6 s
    ],
)
def test_more_words_than_the_sound_can_hold_are_a_hallucination(text, voiced_ms):
    assert is_hallucination(text, voiced_ms)


@pytest.mark.parametrize(
    ("text", "voiced_ms"),
    [
        ("stop", 120),  # one word is always possible
        ("wait, stop, I have a different question about my card", 2200),
        ("no no no", 700),
        ("four four four one", 1400),  # digits read out: a run of three
        ("", 0),
    ],
)
def test_words_the_voiced_audio_can_hold_are_speech(text, voiced_ms):
    assert not is_hallucination(text, voiced_ms)


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("My card number is", 1600),
        ("my card number is 4 2 7", 1600),
        ("the code is four two", 1600),
        ("I want to check my balance and", 1600),
        ("um", 1600),
        ("I lost my card.", 500),
        ("What is my balance?", 500),
        ("Thank you", 500),
        ("", 500),
    ],
)
def test_the_end_of_turn_waits_longer_after_an_unfinished_clause_or_a_number(text, wait):
    assert endpoint_ms(text, SETTINGS) == wait


def test_agent_overrides_win_and_the_silence_timeout_is_the_minimum():
    spec = TurnTakingSpec(min_interruption_ms=100, fillers=("Hold on.",), endpointing_max_ms=300)
    merged = resolve(spec, TurnTaking(), silence_ms=700)
    assert merged.min_interruption_ms == 100 and merged.fillers == ("Hold on.",)
    assert merged.endpointing_min_ms == 700 and merged.endpointing_max_ms == 700  # never below the minimum
    assert resolve(None, TurnTaking()) == TurnTaking()


def tone(level_dbfs: float, ms: int, rate: int = 16000) -> bytes:
    amplitude = 32768 * 10 ** (level_dbfs / 20) * np.sqrt(2)
    t = np.arange(rate * ms // 1000) / rate
    return (np.sin(2 * np.pi * 300 * t) * amplitude).astype("<i2").tobytes()


def test_echo_is_much_weaker_than_the_agents_audio_a_caller_is_not():
    ref = EchoReference(window_s=0.5)
    ref.add(tone(-20, 1000, 24000), 24000, start=10.0)  # the agent plays from t=10 s for 1 s
    assert abs(ref.level(10.5) - -20) < 0.5
    assert ref.is_echo(-35.0, 10.5, gate_db=10)  # 15 dB down: its echo
    assert not ref.is_echo(-25.0, 10.5, gate_db=10)  # a caller talking over it
    assert not ref.is_echo(-35.0, 10.5, gate_db=0)  # gate off
    assert ref.is_echo(-35.0, 11.3, gate_db=10)  # echo returns after it played (within the window)
    assert not ref.is_echo(-35.0, 12.0, gate_db=10)  # long after: nothing to echo
    ref.add(tone(-20, 1000), 16000, start=20.0)
    ref.cut(20.2)  # barge-in at 20.2: what was queued after never plays
    assert abs(ref.level(20.6) - -20) < 0.5  # the window still holds 20.1-20.2
    assert ref.level(20.9) == -100.0


def test_a_ducked_agent_echoes_at_its_ducked_level_and_a_restore_brings_it_back():
    ref = EchoReference(window_s=0.1)
    ref.add(tone(-20, 2000), 16000, start=0.0)  # queued ahead: 2 s at -20 dBFS
    ref.duck(0.5, -20.0)  # from 0.5 s it plays 20 dB lower
    assert abs(ref.level(0.45) - -20) < 0.5
    assert abs(ref.level(0.8) - -40) < 0.5
    assert not ref.is_echo(-35.0, 0.8, gate_db=10)  # a caller at -35 over a ducked agent is heard
    ref.add(tone(-20, 500), 16000, start=2.0)  # audio emitted while ducked is ducked too
    assert abs(ref.level(2.2) - -40) < 0.5
    ref.duck(2.3, 0.0)  # restored: full level from then on
    assert abs(ref.level(2.45) - -20) < 0.5
    ref.add(tone(-20, 500), 16000, start=3.0)
    assert abs(ref.level(3.2) - -20) < 0.5


def test_a_line_without_echo_widens_the_gate_one_with_echo_keeps_it():
    """The gate learns the line's echo return loss from the microphone under the agent: on a clean
    line (a browser's echo canceller) a caller 15 dB under the agent's loudest syllable is heard;
    on a line returning the agent 15 dB down, that level stays echo."""
    clean, echoing = EchoReference(), EchoReference()
    for ref in (clean, echoing):
        ref.add(tone(-12, 3000), 16000, start=0.0)  # the agent plays for 3 s at -12 dBFS
        assert ref.is_echo(-27.0, 0.5, gate_db=10)  # unknown line: the configured gate
    for i in range(100):  # 2 s of microphone between the caller's turns
        now = 0.02 * i
        clean.observe(-75.0, now)  # a canceller's residue
        echoing.observe(-27.0, now)  # the agent, 15 dB down
    assert clean.return_loss_db is not None and clean.return_loss_db > 50
    assert abs(echoing.return_loss_db - 15.0) < 0.5
    assert not clean.is_echo(-27.0, 2.5, gate_db=10)  # a caller at a normal level over the agent
    assert clean.is_echo(-80.0, 2.5, gate_db=10)  # still only the line's own noise
    assert echoing.is_echo(-27.0, 2.5, gate_db=10)  # never weaker than configured
    assert not clean.is_echo(-27.0, 2.5, gate_db=0)  # off stays off
    assert clean.gate_db(0) == 0


def test_the_learned_return_loss_holds_through_a_caller_talking_over_the_agent():
    ref = EchoReference()
    ref.add(tone(-12, 10000), 16000, start=0.0)
    for i in range(400):  # 8 s: silence on the line, then 1.5 s of a caller under the gate
        ref.observe(-75.0 if i < 325 else -25.0, 0.02 * i)
    assert ref.return_loss_db is not None and ref.return_loss_db > 50


@pytest.mark.parametrize(
    ("text", "logprob", "wait"),
    [
        ("I went for none.", -0.9, 1600),  # "i was born on" on a phone line: a guess, it may go on
        ("Big.", -0.81, 1600),  # "six"
        ("Big.", -0.55, 1050),  # half sure: half way
        ("I lost my card.", -0.08, 500),  # sure of complete words: the minimum
        ("I lost my card.", None, 500),  # a recogniser that does not say: the words decide
        ("My card number is", -0.1, 1600),  # sure, but unfinished
        ("", -2.0, 500),  # nothing said
    ],
)
def test_words_the_recogniser_is_unsure_of_do_not_end_the_turn_early(text, logprob, wait):
    assert endpoint_ms(text, SETTINGS, logprob) == wait


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("My opinion.", 1600),  # "my pin is" on a phone line, written as a sentence at -0.25 a token
        ("My card.", 1600),  # "my card number is"
        ("our account number", 1600),
        ("My card was stolen.", 500),  # a sentence that opens with a possessive
        ("Savings.", 500),  # a short answer without one
    ],
)
def test_a_possessive_short_phrase_waits_for_the_rest_of_the_sentence(text, wait):
    assert endpoint_ms(text, SETTINGS, -0.1) == wait


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("Can you tell me?", 1600),  # "can you tell me ... what my balance is"
        ("Do you know?", 1600),
        ("Can you check?", 1600),
        ("Could you find out?", 1600),
        ("Can you tell me my balance?", 500),
        ("What do you know?", 1600),  # rare as a whole turn to a service agent: it waits
        ("I know.", 500),  # a statement: whole
        ("Let me check.", 500),
        ("Do you know.", 1600),  # "do you know when ..." written as a statement at 8 kHz
        ("Can you kick?", 1600),  # "can you check ..." with its verb misheard and alone
        ("Can you care?", 1600),
        ("Can you help?", 500),  # a verb that asks for nothing more
        ("Could you repeat it?", 500),
        ("How are you?", 500),  # no modal and "you": whole
        ("You know.", 500),  # no question opening
    ],
)
def test_a_question_stopped_on_a_verb_wanting_its_object_waits_for_the_rest(text, wait):
    assert endpoint_ms(text, SETTINGS, -0.1) == wait


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("Do not.", 1600),  # 16 kHz "do you know ..." at -0.97; or "do not ... cancel it"
        ("Can not.", 1600),
        ("I do not.", 500),  # an answer: its subject is there
        ("Why not?", 500),
        ("Don't.", 500),  # "please don't": whole
    ],
)
def test_a_negation_without_its_verb_waits_for_the_rest(text, wait):
    assert endpoint_ms(text, SETTINGS, -0.1) == wait
    # nor can a sure model end it on a full band (Smart Turn heard the opening at 0.91-0.95)
    fused = fused_endpoint_ms(text, SETTINGS, -0.97, 0.95, 160, True, 1000)
    assert fused == 1600 if wait == 1600 else fused == 160


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("Can you tell me what my balance is?", 500),  # an embedded question, closed by its copula
        ("Do you know where the branch is?", 500),
        ("Do you know where it is?", 500),
        ("What is?", 1600),  # the opening of "what is the fee for a transfer"
        ("What time is?", 1600),  # no subject before the copula
        ("But how I'm where is?", 1600),
        ("Can you tell me what my balance is", 1600),  # not written as a question: it may go on
        ("My card number is?", 1600),
    ],
)
def test_a_question_ending_on_its_embedded_clauses_copula_is_whole(text, wait):
    assert endpoint_ms(text, SETTINGS, -0.1) == wait


def test_words_whisper_only_guessed_at_are_noise_over_the_agent():
    from voiceagent.conversation.turn_taking import is_guess

    assert is_guess(-1.45)  # "Thank you." for a cough
    assert is_guess(-2.2)  # "Okay." for a keyboard
    assert not is_guess(-0.52)  # "No that's wrong. My card was stolen." on a phone line
    assert not is_guess(None)  # a recogniser that does not say
