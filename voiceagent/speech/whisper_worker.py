"""The recogniser process of :mod:`voiceagent.speech.whisper_stt`: Whisper on CTranslate2.

One child process per server process loads the model once and decodes utterances on
``workers`` threads (CTranslate2 runs ``inter_threads`` decodes in parallel, one core each, and
releases the GIL while it computes), taking them from a queue that serves a waiting caller first
(:mod:`voiceagent.speech.whisper_queue`: finals, then pause hypotheses, then interims, oldest
first; stale interims skipped). Nothing here runs in the server process: log-mel features
(numpy) and decoding would otherwise compete with the event loop for the GIL.

Wire format (private to this module and :mod:`voiceagent.speech.whisper_process`):
  parent -> child  ``D`` + id (uint32 LE) + length (uint32 LE) + payload, where payload is the
                   kind (1 byte, :class:`~voiceagent.speech.whisper_queue.Kind`, plus
                   :data:`OVER_AGENT` when the caller speaks over the agent), the utterance
                   (uint32 LE), the prompt's length (uint32 LE), the prompt (UTF-8) and 16 kHz
                   PCM16 audio; ``P`` + id + four zero bytes: serve that queued request as a final
  child -> parent  one line each: ``READY <model>``,
                   ``R <id> <decode_s> <audio_s> <logprob> <wait_s> <batch> <beam> <text>``,
                   ``S <id>`` (skipped: made stale), ``E <id> <message>``

Decoding choices, measured on synthetic callers (bench/bench_offline_speech.py, and the
corpus decoded alone with the vocabulary prompt, CPU seconds of one core per utterance):
- The encoder's window is 15 s (30 s past 13.5 s), but 7.5 s (:data:`QUICK_WINDOW`) for a
  caller's pause hypotheses, interims and a burst's finals that leave 2 s of padding in it.
  Measured on 1050 pause decodes (7 espeak/flite voices x 3 rates, 14 complete sentences and 11
  fragments, full band and 8 kHz mu-law, 100 ms of line hiss after, the vocabulary prompt, beam 5):
  WER 0.041 -> 0.042 (full band) and 0.154 -> 0.156 (phone), the mean log-probability per token
  0.016-0.032 lower (correlation 0.96 with the 15 s figure), a third less encoder CPU. The
  logprob a 7.5 s decode reports is put on the 15 s scale (:data:`QUICK_LOGPROB_SHIFT`), the one
  the turn-taking rules are calibrated at. Speech over the agent keeps 15 s: at 7.5 s Whisper
  came back sure of words it writes for babble, which the barge-in rules rely on it doubting.
  (A window hardly longer than the speech made the decoder loop on the text: WER 0.3-1.2.)
- Batched decoding (several utterances in one ``generate`` call, :meth:`Recognizer.transcribe_batch`)
  gives the same text but cost 5 % more CPU per utterance in batches of 4 (16 % at 12, with no
  prompt) on this 2-core machine: tiny.en in int8 is not held back by per-call overhead, so
  :data:`MAX_BATCH` is 1 and the two cores run two single decodes.
- A narrower search (:data:`BURST_BEAM` hypotheses, not 5) when more urgent requests wait than
  :data:`GREEDY_DEPTH` per worker (a burst), only while callers queue for their turn's end; finals
  in a burst also take the 7.5 s window (:data:`QUICK_WINDOW`). Greedy search, used here before,
  saved only 2 % of a 15 s window's decode against two hypotheses on the 2026-11-29 machine (0.297
  / 0.304 s: the encoder is most of it) and misheard: espeak en-us "... a payment on my account I
  don't recognise" + 0.2 s of line noise -> "... I don't care." (in a burst run, "I don't care
  goodbye.", which ended the caller's conversation); two hypotheses heard it right. Speech over
  the agent stays greedy in a deep queue (its barge-in rules were tuned on that).
- Interims take two hypotheses at the 7.5 s window when they fit (0.26 -> 0.165 s; greedy search
  there cost the same and wrote a looping tail: "Can I talk to a real person? Can I talk"), but
  over the agent, where their words decide a barge-in.
- The prompt (the previous-text slot, ``<|startofprev|>``) carries the scenario's vocabulary:
  with it in-domain WER fell by about half on voices the model hears badly.
- Beam search (5) whose five hypotheses are rescored with the prompt's words and word pairs
  (:func:`domain_score`): Whisper often ranks "what is the melon on my account" a hair above
  "what is the balance on my account"; out-of-domain sentences, with few prompt words in any
  hypothesis, are left as Whisper ranked them. Measured: in-domain WER at 8 kHz 0.25 -> 0.17-0.23
  on espeak-ng voices for ~20 % more CPU than greedy search.
- At most ~8 tokens per second of audio, a repeated sentence collapsed, and
  nothing returned when the model says there was no speech and is unsure of its words (noise,
  breath, a hum: tiny.en otherwise writes "You" or, led by the prompt, a phrase of it).
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from voiceagent.conversation.turn_taking import ends_unfinished, is_number
from voiceagent.speech.log_mel import SAMPLE_RATE, log_mel
from voiceagent.speech.whisper_queue import DecodeQueue, Kind, Request

SHORT_WINDOW: Final = 1500  # frames (15 s)
FULL_WINDOW: Final = 3000  # frames (30 s): Whisper's own window, the most it hears at once
SHORT_MAX_S: Final = 13.5
# frames: 15 s for every utterance up to SHORT_MAX_S; the shorter QUICK_WINDOW is chosen per
# request by decode_choice (7.5 and 10 s for every decode, tried before, made Whisper sure of babble
# over the agent, and the room's voices took the turn:
# tests/calls/test_browser_turn_taking.py::test_words_whisper_only_guesses_...)
WINDOWS: Final = (SHORT_WINDOW,)
# frames (7.5 s): a caller's pause hypothesis (the decode the end of turn waits for), an interim,
# and a final decoded while a burst queues, when the utterance leaves WINDOW_MARGIN_S of padding
# in it: a third less encoder CPU for the same words (see the module's notes)
QUICK_WINDOW: Final = 750
# added to the mean log-probability of a QUICK_WINDOW decode: the median difference to the same
# audio at 15 s (0.016 full band, 0.032 phone band; 0.023-0.034 with two hypotheses), so that
# turn_taking's SURE/UNSURE/GUESS thresholds, set on 15 s decodes, read it alike
QUICK_LOGPROB_SHIFT: Final = 0.025
# the kind byte's flag for speech over the agent: its final keeps the 15 s window even in a burst
# (at 7.5 s Whisper came back sure of babble over the agent, which then took the turn)
OVER_AGENT: Final = 0x80
# hypotheses a burst's final keeps at QUICK_WINDOW: two are enough for the domain rescoring to
# pick "balance" over greedy's "melon song" (espeak en-us), and cost about what greedy search at
# 15 s did: CPU s per utterance on 5 espeak lines, beam/window: 5/15 s 0.221, 1/15 s 0.178,
# 1/7.5 s 0.087, 2/7.5 s 0.098, 3/7.5 s 0.117 (same words as 5/15 s from 2 up)
BURST_BEAM: Final = 2
WINDOW_MARGIN_S: Final = 2.0
NO_SPEECH: Final = 0.6
LOW_LOGPROB: Final = -1.0  # mean log-probability per token below which the words are a guess
BEAM: Final = 5
MAX_BATCH: Final = 1  # utterances decoded in one generate call (see the module's notes)
GREEDY_DEPTH: Final = 2  # urgent requests waiting per worker beyond which the search is narrowed
# seconds a caller's decode has waited in the queue beyond which it is narrowed like a burst's: the
# tail of a burst (the queue short again by then) is the callers who waited longest
LATE_S: Final = 0.3
DOMAIN_WEIGHT: Final = 0.3  # of domain_score (0..2) against Whisper's mean token log-probability
# words a second of audio (silence included) can hold: past it a hypothesis is the decoder looping
MAX_WORDS_PER_S: Final = 5.0
LOOPED_RUN: Final = 5  # one word this many times in a row: the decoder looping (cut_word_loops)
_SENTENCE = re.compile(r"(?<=[.?!])\s+")


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", " ", text.lower().replace("'", "").replace("\u2019", "")).split()


@functools.lru_cache(maxsize=16)
def domain_vocabulary(prompt: str) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """The words and word pairs of the prompt (the scenarios' vocabulary)."""
    words = _words(prompt)
    return frozenset(words), frozenset(itertools.pairwise(words))


def domain_score(
    text: str, vocabulary: tuple[frozenset[str], frozenset[tuple[str, str]]], of_words: int = 0
) -> float:
    """0..2: the share of ``text``'s words in the vocabulary (digits count) plus the share of its
    word pairs in it. A hypothesis made of the scenario's words beats a near-tie made of others.
    ``of_words``: the longest competing hypothesis's word count, the shares' denominator, so that
    a hypothesis which merely leaves out a word the vocabulary lacks ("can I talk to a real ?"
    for "... real person?") gains nothing by it."""
    words, pairs = vocabulary
    said = _words(text)
    if not said:
        return 0.0
    count = max(len(said), of_words)
    known = sum(w in words or w.isdigit() for w in said) / count
    joined = sum(p in pairs for p in itertools.pairwise(said)) / max(1, count - 1)
    return known + joined


def pick_hypothesis(
    texts: list[str],
    scores: list[float],
    vocabulary: tuple[frozenset[str], frozenset[tuple[str, str]]],
    seconds: float = 0.0,
) -> int:
    """The index of the beam hypothesis to keep: Whisper's mean log-probability plus
    :data:`DOMAIN_WEIGHT` times its :func:`domain_score` against the others' longest. With the
    audio's ``seconds``, a hypothesis of more words than that can hold
    (:data:`MAX_WORDS_PER_S`: the decoder looping, "three four three four ...") gets no domain
    share, however many scenario words it repeats, and does not set the others' denominator."""
    counts = [len(_words(t)) for t in texts]
    bound = MAX_WORDS_PER_S * seconds + 2 if seconds > 0 else float("inf")
    longest = max((n for n in counts if n <= bound), default=0)

    def score(i: int) -> float:
        share = domain_score(texts[i], vocabulary, longest) if counts[i] <= bound else 0.0
        return scores[i] + DOMAIN_WEIGHT * share

    return max(range(len(texts)), key=score)


def window_for(seconds: float) -> int:
    """Encoder frames for an utterance of ``seconds``: the shortest of :data:`WINDOWS` that leaves
    at least :data:`WINDOW_MARGIN_S` of padding after the audio (the encoder's cost grows faster
    than its window; a window hardly longer than the speech made the decoder loop), 30 s past
    :data:`SHORT_MAX_S`."""
    if seconds > SHORT_MAX_S:
        return FULL_WINDOW
    return next((w for w in WINDOWS if seconds + WINDOW_MARGIN_S <= w / 100), SHORT_WINDOW)


def on_everyday_scale(logprob: float, frames: int) -> float:
    """A decode's mean log-probability as the 15 s window would have given it: the turn-taking
    rules' thresholds were set on those (:data:`QUICK_LOGPROB_SHIFT`)."""
    return logprob + QUICK_LOGPROB_SHIFT if frames == QUICK_WINDOW else logprob


_TOKEN = re.compile(r"[A-Za-z0-9']+")


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", text.lower()).strip()


def collapse_repeats(text: str) -> str:
    """The text without the decoder's loops: ``"I lost my card. I lost my card."`` ->
    ``"I lost my card."``; a last sentence that only starts the previous one again (``"What can
    you do for me? What"``, a short window's loop) is dropped; a phrase said over and over (``"My
    name is my name is."``) is kept once, unless it is all numbers (a code read out: "three four
    three four"). A tail that leaves a clause open ("I see. I") may be the caller going on, and is
    kept: the end of turn waits for it."""
    kept: list[str] = []
    for sentence in _SENTENCE.split(text.strip()):
        key = _key(sentence)
        if kept and key and key == _key(kept[-1]):
            continue
        kept.append(sentence)
    tail = _key(kept[-1]).split() if len(kept) > 1 else []
    if tail and _key(kept[-2]).split()[: len(tail)] == tail and not ends_unfinished(tail):
        kept.pop()  # the decoder starting the sentence over (not "I see. I ...": a caller going on)
    return _once(" ".join(kept))


def cut_word_loops(text: str) -> str:
    """``text`` with each run of one word said :data:`LOOPED_RUN` times or more in a row kept once:
    the decoder looping on a sound ("My pen is one nine eight seven seven seven ...", 48 sevens,
    seed 17 at 16 kHz), digits too, since a code has at most four alike in a row ("one one one
    one" is kept). Not for speech over the agent: there the loop itself says "noise"
    (``turn_taking.is_hallucination``: "I'm just click click click click ...")."""
    tokens = list(_TOKEN.finditer(text))
    runs, start = [], 0
    for i in range(1, len(tokens) + 1):
        if i == len(tokens) or tokens[i].group().lower() != tokens[start].group().lower():
            if i - start >= LOOPED_RUN:
                runs.append((tokens[start], tokens[i - 1]))
            start = i
    for first, last in reversed(runs):
        text = text[: first.end()] + text[last.end() :]
    return text


def _once(text: str) -> str:
    """``text`` cut after the first of a phrase (2+ words, not all numbers) that it only repeats."""
    tokens = list(_TOKEN.finditer(text))
    words = [t.group().lower() for t in tokens]
    for size in range(2, len(words) // 2 + 1):
        phrase = words[:size]
        if all(is_number(w) for w in phrase):
            continue
        if all(w == phrase[i % size] for i, w in enumerate(words)):
            end = tokens[size - 1].end()
            return text[:end] + ("." if text.rstrip()[-1:] in ".?!" else "")
    return text


class Recognizer:
    """The loaded model, tokenizer and prompt cache; ``transcribe`` is thread-safe."""

    def __init__(self, model_dir: str, workers: int, compute_type: str = "int8"):
        import ctranslate2
        import tokenizers

        self._ct2 = ctranslate2
        self.model = ctranslate2.models.Whisper(
            model_dir, device="cpu", compute_type=compute_type, inter_threads=workers, intra_threads=1
        )
        self.tokenizer = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.n_mels = int(getattr(self.model, "n_mels", 80) or 80)
        ids = self.tokenizer.token_to_id
        english_only = not self.model.is_multilingual
        start = ["<|startoftranscript|>"] + ([] if english_only else ["<|en|>", "<|transcribe|>"])
        self._start = [ids(token) for token in [*start, "<|notimestamps|>"]]
        self._prev = ids("<|startofprev|>")

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one Recognizer per process, prompts are few
    def prompt_ids(self, prompt: str) -> tuple[int, ...]:
        if not prompt.strip():
            return tuple(self._start)
        tokens = self.tokenizer.encode(" " + prompt.strip(), add_special_tokens=False).ids[-200:]
        return (self._prev, *tokens, *self._start)

    def transcribe(self, pcm16: np.ndarray, prompt: str = "") -> str:
        return self.transcribe_scored(pcm16, prompt)[0]

    def transcribe_scored(self, pcm16: np.ndarray, prompt: str = "", beam: int = BEAM) -> tuple[str, float]:
        """The text and Whisper's mean log-probability per token of the hypothesis chosen (how sure
        it is of those words: about -0.1 for a clear sentence, below -0.6 for a guess)."""
        return self.transcribe_batch([(pcm16, prompt)], beam)[0]

    def transcribe_batch(
        self, items: list[tuple[np.ndarray, str]], beam: int = BEAM, frames: int = 0
    ) -> list[tuple[str, float]]:
        """Several utterances (of one encoder window: see :func:`window_for`) in ONE ``generate``
        call: CTranslate2 encodes and searches them together, far cheaper than one call each when
        a crowd stops speaking at once. Each answer is what :meth:`transcribe_scored` would say.
        ``frames`` overrides the encoder window (:func:`decode_choice`)."""
        seconds = [len(pcm) / SAMPLE_RATE for pcm, _ in items]
        frames = frames or max(window_for(s) for s in seconds)
        features = np.stack([log_mel(pcm, frames, self.n_mels) for pcm, _ in items])
        prompts = [list(self.prompt_ids(prompt)) for _, prompt in items]
        longest = max(len(ids) + 10 + int(8 * min(s, 30.0)) for ids, s in zip(prompts, seconds, strict=True))
        results = self.model.generate(
            self._ct2.StorageView.from_array(features),
            prompts,
            beam_size=beam,
            num_hypotheses=beam,
            max_length=longest,
            return_no_speech_prob=True,
            return_scores=True,
            suppress_blank=True,
        )
        answers = [
            self._choose(result, prompt, 10 + int(8 * min(s, 30.0)), s)
            for (_, prompt), s, result in zip(items, seconds, results, strict=True)
        ]
        return [(text, on_everyday_scale(logprob, frames)) for text, logprob in answers]

    def _choose(self, result: Any, prompt: str, max_tokens: int, seconds: float) -> tuple[str, float]:
        """The hypothesis the domain rescoring picks; each cut at this utterance's own token bound
        (a batch's bound is its longest utterance's)."""
        # Whisper's own silence rule: the model says "no speech" and is unsure of its words
        if result.no_speech_prob > NO_SPEECH and result.scores[0] < LOW_LOGPROB:
            return "", result.scores[0]
        texts = [self.tokenizer.decode(seq[:max_tokens]).strip() for seq in result.sequences_ids]
        best = pick_hypothesis(texts, list(result.scores), domain_vocabulary(prompt), seconds)
        return collapse_repeats(texts[best]), result.scores[best]


def _serve(recognizer: Recognizer, workers: int) -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    lock = threading.Lock()

    def send(line: str) -> None:
        with lock:
            out.write(line.replace("\n", " ").encode("utf-8", "replace") + b"\n")
            out.flush()

    queue = DecodeQueue(on_skip=lambda r: send(f"S {r.id}"))
    threads = [
        threading.Thread(target=_decode_loop, args=(recognizer, queue, send, workers), daemon=True)
        for _ in range(workers)
    ]
    for thread in threads:
        thread.start()
    try:
        while True:
            header = inp.read(9)
            if len(header) < 9:
                return  # the parent closed the pipe (or died)
            request = int.from_bytes(header[1:5], "little")
            payload = inp.read(int.from_bytes(header[5:9], "little"))
            if header[:1] == b"D":
                queue.put(_request(request, payload))
            elif header[:1] == b"P":
                queue.promote(request)
    finally:
        queue.close()


def _request(request: int, payload: bytes) -> Request:
    """``kind`` (1 byte: 0 final, 1 pause, 2 interim), utterance (uint32), prompt length (uint32),
    prompt, audio."""
    kind, utterance = Kind(payload[0] & ~OVER_AGENT), int.from_bytes(payload[1:5], "little")
    size = int.from_bytes(payload[5:9], "little")
    prompt = payload[9 : 9 + size].decode("utf-8", "replace")
    pcm = np.frombuffer(payload[9 + size :], dtype="<i2")
    window = window_for(len(pcm) / SAMPLE_RATE)
    return Request(request, kind, utterance, window, (pcm, prompt), over_agent=bool(payload[0] & OVER_AGENT))


def decode_choice(
    kind: Kind, seconds: float, waiting: int, workers: int, over_agent: bool = False, waited_s: float = 0.0
) -> tuple[int, int]:
    """``(beam, frames)`` for a decode: beam search at the utterance's own window while the queue
    is short. A caller's final that fits :data:`QUICK_WINDOW` gets :data:`BURST_BEAM` hypotheses
    there when more callers wait for their turn (``waiting``: urgent decodes, this one included)
    than a round of the workers can serve (:data:`GREEDY_DEPTH`), or when it has waited
    :data:`LATE_S` already (the tail of a burst). A caller's pause hypothesis that fits takes
    :data:`QUICK_WINDOW` always (its confidence put on the 15 s scale: see the module's notes).
    Speech ``over_agent`` keeps the 15 s window its barge-in rules were calibrated at; in a deep
    queue pause hypotheses keep :data:`BURST_BEAM` hypotheses (greedy search misheard, for 2 %
    less CPU: see the module's notes), but speech over the agent greedy as before (its barge-in
    rules were tuned on that; two hypotheses rescored with the vocabulary may favour a looping
    run of number words). An interim gets
    :data:`BURST_BEAM` hypotheses at :data:`QUICK_WINDOW` when it fits (0.26 -> 0.165 CPU s per
    decode on the 2026-11-29 machine: the encoder's window is most of the cost; greedy search there
    costs the same and loops: "Can I talk to a real person? Can I talk"): nothing decides on its
    confidence, the pause's decode replaces its words, and a worker still busy with one when a
    burst's finals come holds them back; but over the agent (its words decide a barge-in) it keeps
    the everyday window and search. ``frames`` 0: the request's own window."""
    fits = seconds + WINDOW_MARGIN_S <= QUICK_WINDOW / 100
    if not kind.urgent:  # an interim: shown, and replaced by the pause's or final's own decode
        return (BEAM, 0) if over_agent else (BURST_BEAM, QUICK_WINDOW if fits else 0)
    deep = waiting > GREEDY_DEPTH * workers
    if kind is Kind.FINAL and not over_agent and fits and (deep or waited_s >= LATE_S):
        return BURST_BEAM, QUICK_WINDOW
    if kind is Kind.PAUSE and not over_agent and fits:
        return (BURST_BEAM if deep else BEAM), QUICK_WINDOW
    if not deep:
        return BEAM, 0
    return (1, 0) if over_agent else (BURST_BEAM, 0)


def _decode_loop(
    recognizer: Recognizer, queue: DecodeQueue, send: Callable[[str], None], workers: int
) -> None:
    """One worker: take the most wanted batch, decode it in one call, answer each request. Beam
    search while the queue is short; narrower when more callers wait than a round of the workers
    can serve (:func:`decode_choice`)."""
    while batch := queue.take(MAX_BATCH):
        began = time.monotonic()
        waiting = len(batch) + queue.depth(urgent_only=True)
        longest = max(len(r.payload[0]) for r in batch) / SAMPLE_RATE
        over_agent = any(r.over_agent for r in batch)
        waited = began - min(r.queued_at for r in batch)
        beam, frames = decode_choice(batch[0].kind, longest, waiting, workers, over_agent, waited)
        try:
            answers = recognizer.transcribe_batch([r.payload for r in batch], beam, frames)
        except Exception as exc:  # one bad batch never takes the recogniser down
            for r in batch:
                send(f"E {r.id} {type(exc).__name__}: {exc}")
            continue
        took = time.monotonic() - began
        for r, (text, logprob) in zip(batch, answers, strict=True):
            if not r.over_agent:
                text = cut_word_loops(text)
            audio_s = len(r.payload[0]) / SAMPLE_RATE
            wait = began - r.queued_at
            send(f"R {r.id} {took:.4f} {audio_s:.4f} {logprob:.3f} {wait:.4f} {len(batch)} {beam} {text}")


def worker_main(argv: list[str] | None = None) -> None:
    """Child entry point: ``<model_dir> <workers>``; prints READY once the model is loaded."""
    args = sys.argv[1:] if argv is None else argv
    model_dir, workers = args[0], max(1, int(args[1]))
    try:
        recognizer = Recognizer(model_dir, workers)
        recognizer.transcribe(np.zeros(SAMPLE_RATE // 2, dtype=np.int16))  # first-call set-up
    except Exception as exc:
        sys.stdout.write(f"FAIL {type(exc).__name__}: {exc}\n".replace("\n", " ").strip() + "\n")
        sys.stdout.flush()
        return
    sys.stdout.write(f"READY {os.path.basename(model_dir.rstrip('/'))}\n")
    sys.stdout.flush()
    try:
        _serve(recognizer, workers)
    except (KeyboardInterrupt, BrokenPipeError):
        return


if __name__ == "__main__":  # pragma: no cover
    worker_main()
