"""The Whisper recogniser process as a burst of callers meets it: a batch of utterances decodes to
the same words as one at a time; over the real pipe, a final asked after interims is served
before them, the interims a final makes stale are skipped, and a turn that ends in the pause
whose decode is still queued gets that decode (promoted to a final), not a second one."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytest_asyncio

from tests.voiceagent.speech.test_whisper_stt import espeak_16k
from voiceagent.llm.rules import DIALOG_DIR
from voiceagent.speech.vocabulary import build_prompt
from voiceagent.speech.whisper_process import Skipped
from voiceagent.speech.whisper_queue import DecodeQueue, Kind, Request
from voiceagent.speech.whisper_stt import WhisperSTT, find_model
from voiceagent.speech.whisper_worker import (
    BEAM,
    BURST_BEAM,
    OVER_AGENT,
    QUICK_LOGPROB_SHIFT,
    QUICK_WINDOW,
    SHORT_WINDOW,
    Recognizer,
    _decode_loop,
    _request,
    collapse_repeats,
    cut_word_loops,
    decode_choice,
    domain_vocabulary,
    on_everyday_scale,
    pick_hypothesis,
    window_for,
)


def test_the_domain_rescoring_never_prefers_a_hypothesis_for_a_word_it_left_out():
    # CI heard "Can I talk to a real ?": the share of scenario words rose when "person" (not in
    # the vocabulary) was dropped, and a near-tie became a win for the shorter hypothesis
    vocabulary = domain_vocabulary(build_prompt(DIALOG_DIR))
    full, dropped = "Can I talk to a real person?", "Can I talk to a real ?"
    assert pick_hypothesis([full, dropped], [-0.300, -0.305], vocabulary) == 0
    assert pick_hypothesis([dropped, full], [-0.305, -0.300], vocabulary) == 1
    # a scenario word in place of another still wins a near-tie, as the rescoring is for
    assert pick_hypothesis(["my card won't go then", "my card was stolen"], [-0.30, -0.33], vocabulary) == 1


@pytest.mark.parametrize(
    ("heard", "kept"),
    [
        ("What can you do for me? What", "What can you do for me?"),
        ("Can I talk to a real person? Can I talk", "Can I talk to a real person?"),
        ("I lost my card. I lost my card.", "I lost my card."),
        ("My name is my name is.", "My name is."),
        ("My name is my name is my", "My name is"),
        ("Three four three four.", "Three four three four."),  # a code read out
        ("I want to, I want to block my card.", "I want to, I want to block my card."),
        ("Bye bye.", "Bye bye."),
        ("I see. I", "I see. I"),  # the caller may be going on: the end of turn waits
        ("What time is it? What is the balance?", "What time is it? What is the balance?"),
        ("", ""),
    ],
)
def test_the_decoders_loops_are_cut(heard, kept):
    assert collapse_repeats(heard) == kept


@pytest.mark.parametrize(
    ("heard", "kept"),
    [
        ("My pen is one nine eight" + " seven" * 48, "My pen is one nine eight seven"),  # seed 17
        ("My code is seven seven seven seven seven seven.", "My code is seven."),
        ("My code is one one one one.", "My code is one one one one."),  # four alike: a code
        ("No no no no no no, the other card.", "No, the other card."),
        ("", ""),
    ],
)
def test_a_word_the_decoder_looped_on_is_kept_once(heard, kept):
    assert cut_word_loops(heard) == kept


def test_a_callers_turn_loses_the_decoders_loop_and_speech_over_the_agent_keeps_it():
    """Over the agent the loop is what tells noise from words (is_hallucination)."""
    looped = "I'm just click" + " click" * 6

    class Looping:
        def transcribe_batch(self, items, beam, frames):
            return [(looped, -0.4) for _ in items]

    queue, sent = DecodeQueue(), []
    pcm = np.zeros(3200, "<i2")
    queue.put(Request(1, Kind.FINAL, 1, payload=(pcm, ""), over_agent=False))
    queue.put(Request(2, Kind.FINAL, 2, payload=(pcm, ""), over_agent=True))
    queue.close()
    _decode_loop(Looping(), queue, sent.append, 1)
    texts = {line.split(" ")[1]: line.split(" ", 8)[8] for line in sent}
    assert texts == {"1": "I'm just click", "2": looped}


def test_a_looping_hypothesis_gets_no_domain_share_for_the_scenario_words_it_repeats():
    # an echoed interruption at 8 kHz came back as "Three four three four ..." (26 words of 2.5 s):
    # every word and pair is in the vocabulary, so rescoring favoured the decoder's loop
    vocabulary = domain_vocabulary(build_prompt(DIALOG_DIR))
    loop = " ".join(["three four"] * 13)
    said = "No, that's wrong, my card was stolen."
    assert pick_hypothesis([loop, said], [-0.40, -0.50], vocabulary) == 0  # without the audio's length
    assert pick_hypothesis([loop, said], [-0.40, -0.50], vocabulary, seconds=2.5) == 1
    assert pick_hypothesis([said, loop], [-0.50, -0.40], vocabulary, seconds=2.5) == 0
    # a plausible hypothesis keeps its share: the near-tie rule is unchanged
    pair = ["my card won't go then", "my card was stolen"]
    assert pick_hypothesis(pair, [-0.30, -0.33], vocabulary, seconds=2.0) == 1


LINES = (
    ("my card was stolen", "en-gb+f3", 160),
    ("what is the balance on my account", "en-us", 140),
    ("my code is four two seven one", "en+m3", 180),
)


def test_a_batch_decodes_to_the_same_text_as_single_decodes():
    recognizer = Recognizer(str(find_model()), 1)
    prompt = build_prompt(DIALOG_DIR)
    audio = [np.frombuffer(espeak_16k(*line), "<i2") for line in LINES]
    assert len({window_for(len(a) / 16000) for a in audio}) == 1  # one window: they may batch
    heard = {}
    for beam in (5, 1):
        single = [recognizer.transcribe_scored(a, prompt, beam)[0] for a in audio]
        batched = [text for text, _ in recognizer.transcribe_batch([(a, prompt) for a in audio], beam)]
        assert batched == single and all(single), (beam, single, batched)
        heard[beam] = single
    assert "stolen" in heard[5][0].lower() and "balance" in heard[5][1].lower(), heard


def test_a_burst_of_finals_is_decoded_greedy_at_the_short_window_and_a_quiet_queue_as_usual():
    quiet = decode_choice(Kind.FINAL, 2.0, waiting=2, workers=2, waited_s=0.1)
    # the end of a burst: the queue is short again, but this caller has waited
    assert decode_choice(Kind.FINAL, 2.0, waiting=2, workers=2, waited_s=1.0) == (BURST_BEAM, QUICK_WINDOW)
    burst = decode_choice(Kind.FINAL, 2.0, waiting=12, workers=2)
    assert quiet == (BEAM, 0) and burst == (BURST_BEAM, QUICK_WINDOW) and BURST_BEAM < BEAM
    # a caller's pause hypothesis takes the short window (its confidence put on the 15 s scale),
    # with a narrower search in a burst; a long one, or one over the agent, the usual window
    assert decode_choice(Kind.PAUSE, 2.0, waiting=12, workers=2) == (BURST_BEAM, QUICK_WINDOW)
    assert decode_choice(Kind.PAUSE, 2.0, waiting=0, workers=2) == (BEAM, QUICK_WINDOW)
    assert decode_choice(Kind.PAUSE, 6.0, waiting=0, workers=2) == (BEAM, 0)
    assert decode_choice(Kind.PAUSE, 2.0, waiting=0, workers=2, over_agent=True) == (BEAM, 0)
    assert decode_choice(Kind.FINAL, 6.0, waiting=12, workers=2) == (BURST_BEAM, 0)
    # an interim is only shown (the pause's decode replaces it): a narrow search, at the short window
    # when it fits; over the agent its words decide a barge-in, so it keeps the everyday search
    assert decode_choice(Kind.INTERIM, 2.0, waiting=0, workers=2) == (BURST_BEAM, QUICK_WINDOW)
    assert decode_choice(Kind.INTERIM, 6.0, waiting=0, workers=2) == (BURST_BEAM, 0)
    assert decode_choice(Kind.INTERIM, 2.0, waiting=0, workers=2, over_agent=True) == (BEAM, 0)
    # speech over the agent keeps the window its guesses are calibrated at (babble stays a guess),
    # and a late pause hypothesis or speech over the agent keeps its search in a short queue
    assert decode_choice(Kind.FINAL, 2.0, waiting=12, workers=2, over_agent=True) == (1, 0)
    assert decode_choice(Kind.FINAL, 2.0, waiting=2, workers=2, over_agent=True, waited_s=1.0) == (BEAM, 0)
    assert decode_choice(Kind.PAUSE, 2.0, waiting=2, workers=2, waited_s=1.0) == (BEAM, QUICK_WINDOW)
    assert window_for(2.0) == SHORT_WINDOW > QUICK_WINDOW


def test_a_short_window_decodes_confidence_is_read_on_the_everyday_scale():
    assert on_everyday_scale(-0.5, QUICK_WINDOW) == -0.5 + QUICK_LOGPROB_SHIFT > -0.5
    assert on_everyday_scale(-0.5, 0) == on_everyday_scale(-0.5, SHORT_WINDOW) == -0.5


def test_the_wire_carries_whether_the_caller_spoke_over_the_agent():
    pcm = np.zeros(3200, "<i2").tobytes()
    for over in (False, True):
        payload = bytes([Kind.FINAL | (OVER_AGENT if over else 0)]) + (7).to_bytes(4, "little")
        payload += (2).to_bytes(4, "little") + b"hi" + pcm
        request = _request(1, payload)
        assert (request.kind, request.utterance, request.over_agent) == (Kind.FINAL, 7, over)
        assert request.payload[1] == "hi" and len(request.payload[0]) == 3200


def test_a_final_at_the_burst_window_is_heard_as_at_the_usual_one():
    recognizer = Recognizer(str(find_model()), 1)
    prompt = build_prompt(DIALOG_DIR)
    audio = np.frombuffer(espeak_16k(*LINES[0]), "<i2")
    usual = recognizer.transcribe_batch([(audio, prompt)], BEAM)[0][0]
    burst = recognizer.transcribe_batch([(audio, prompt)], BURST_BEAM, QUICK_WINDOW)[0][0]
    assert "stolen" in usual.lower() and "stolen" in burst.lower(), (usual, burst)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def one_worker():
    stt = WhisperSTT(workers=1, pool_size=1, prompt=build_prompt(DIALOG_DIR))
    await stt.warm()
    yield stt
    await stt.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_final_asked_after_interims_is_served_before_them_and_skips_its_own(one_worker):
    stt = one_worker
    speech = espeak_16k("i would like to freeze my card please", "en-us+f3", 150)
    done: list[str] = []

    async def ask(name: str, kind: Kind, utterance: int) -> str:
        try:
            text = (await stt.decode(speech, kind=kind, utterance=utterance)).text
        except Skipped:
            return "skipped"
        done.append(name)  # in the order served
        return text

    tasks = [asyncio.create_task(ask(f"interim {u}", Kind.INTERIM, u)) for u in (1, 2, 3, 4)]
    await asyncio.sleep(0)  # every interim written to the pipe before the final
    tasks.append(asyncio.create_task(ask("final 4", Kind.FINAL, 4)))
    texts = await asyncio.gather(*tasks)
    # one worker: at most the first interim was taken before the final arrived
    assert done.index("final 4") <= 1 and done[-2:] == ["interim 2", "interim 3"], done
    assert texts[3] == "skipped" and "freeze" in texts[4].lower(), texts
    queue = stt.pool.metrics()["queue"]
    assert queue["skipped_stale"] == {"interim": 1} and queue["served"]["final"] == 1, queue
    assert queue["deepest"] >= 4 and queue["depth"] == 0
    # how long the decodes themselves took, apart from their wait: a slow machine or a deep queue
    assert set(queue["decode_ms"]) == {"final", "interim"}, queue
    assert 0 < queue["decode_ms"]["final"]["p50"] <= queue["decode_ms"]["final"]["max"], queue


@pytest.mark.asyncio(loop_scope="module")
async def test_a_turn_that_ends_in_its_pause_gets_the_pause_decode_not_a_second_one(one_worker):
    stt = one_worker
    speech = espeak_16k("i lost my card", "en-us+f3", 150)
    blocker = asyncio.create_task(stt.decode(espeak_16k("how much money do i have"), kind=Kind.INTERIM))
    await asyncio.sleep(0)
    before = dict(stt.stats.served)
    stream = await stt.open("en-US", None)
    await stream.push(speech)
    heard: list[str] = []
    assert stream.hint_pause(lambda text, logprob: heard.append(text))
    await asyncio.sleep(0)  # the pause decode is queued behind the blocker
    await stream.push(bytes(640 * 13))  # the rest of the silence that ends the turn
    text = await stream.finish_at_pause()  # the turn ends in that pause: no speech since
    await blocker
    served = {k: n - before.get(k, 0) for k, n in stt.stats.served.items()}
    assert "card" in text.lower()
    assert served.get("final", 0) + served.get("pause", 0) == 1, served  # one decode, not two
    assert stt.stats.promoted >= 1 and heard == []  # served as a final; the turn is over

    stream = await stt.open("en-US", None)  # new speech after the pause: a decode of all of it
    await stream.push(speech)
    assert stream.hint_pause(lambda text, logprob: None)
    await stream.push(espeak_16k("and my wallet", "en-us+f3", 150))
    assert "wallet" in (await stream.finish()).lower()
