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
from voiceagent.speech.whisper_queue import Kind
from voiceagent.speech.whisper_stt import WhisperSTT, find_model
from voiceagent.speech.whisper_worker import Recognizer, window_for

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
