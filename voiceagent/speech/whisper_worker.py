"""The recogniser process of :mod:`voiceagent.speech.whisper_stt`: Whisper on CTranslate2.

One child process per server process loads the model once and decodes utterances on
``workers`` threads (CTranslate2 runs ``inter_threads`` decodes in parallel, one core each, and
releases the GIL while it computes). Nothing here runs in the server process: log-mel features
(numpy) and decoding would otherwise compete with the event loop for the GIL.

Wire format (private to the two modules):
  parent -> child  ``D`` + id (uint32 LE) + length (uint32 LE) + payload, where payload is the
                   prompt's length (uint32 LE), the prompt (UTF-8) and 16 kHz PCM16 audio
  child -> parent  one line each: ``READY <model>``, ``R <id> <decode_s> <audio_s> <text>``,
                   ``E <id> <message>``

Decoding choices, measured on synthetic callers (bench/bench_offline_speech.py):
- The encoder gets a 15 s window (1500 frames) for utterances up to 13.5 s, 30 s beyond: the
  encoder's cost grows faster than linearly, and 15 s costs a third of 30 s with the same word
  error rate; shorter windows made the decoder loop on the text (WER 0.3-1.2).
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
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import numpy as np

from voiceagent.speech.log_mel import SAMPLE_RATE, log_mel

SHORT_WINDOW: Final = 1500  # frames (15 s)
FULL_WINDOW: Final = 3000  # frames (30 s): Whisper's own window, the most it hears at once
SHORT_MAX_S: Final = 13.5
NO_SPEECH: Final = 0.6
LOW_LOGPROB: Final = -1.0  # mean log-probability per token below which the words are a guess
BEAM: Final = 5
DOMAIN_WEIGHT: Final = 0.3  # of domain_score (0..2) against Whisper's mean token log-probability
_SENTENCE = re.compile(r"(?<=[.?!])\s+")


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", " ", text.lower().replace("'", "").replace("\u2019", "")).split()


@functools.lru_cache(maxsize=16)
def domain_vocabulary(prompt: str) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """The words and word pairs of the prompt (the scenarios' vocabulary)."""
    words = _words(prompt)
    return frozenset(words), frozenset(itertools.pairwise(words))


def domain_score(text: str, vocabulary: tuple[frozenset[str], frozenset[tuple[str, str]]]) -> float:
    """0..2: the share of ``text``'s words in the vocabulary (digits count) plus the share of its
    word pairs in it. A hypothesis made of the scenario's words beats a near-tie made of others."""
    words, pairs = vocabulary
    said = _words(text)
    if not said:
        return 0.0
    known = sum(w in words or w.isdigit() for w in said) / len(said)
    joined = sum(p in pairs for p in itertools.pairwise(said)) / max(1, len(said) - 1)
    return known + joined


def window_for(seconds: float) -> int:
    """Encoder frames for an utterance of ``seconds``."""
    return SHORT_WINDOW if seconds <= SHORT_MAX_S else FULL_WINDOW


def collapse_repeats(text: str) -> str:
    """``"I lost my card. I lost my card."`` -> ``"I lost my card."`` (a decoder stuck in a loop)."""
    kept: list[str] = []
    for sentence in _SENTENCE.split(text.strip()):
        key = re.sub(r"[^a-z0-9 ]", "", sentence.lower()).strip()
        if kept and key and key == re.sub(r"[^a-z0-9 ]", "", kept[-1].lower()).strip():
            continue
        kept.append(sentence)
    return " ".join(kept)


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

    def transcribe_scored(self, pcm16: np.ndarray, prompt: str = "") -> tuple[str, float]:
        """The text and Whisper's mean log-probability per token of the hypothesis chosen (how sure
        it is of those words: about -0.1 for a clear sentence, below -0.6 for a guess)."""
        seconds = len(pcm16) / SAMPLE_RATE
        frames = window_for(seconds)
        features = log_mel(pcm16, frames, self.n_mels)
        ids = list(self.prompt_ids(prompt))
        result = self.model.generate(
            self._ct2.StorageView.from_array(features[None]),
            [ids],
            beam_size=BEAM,
            num_hypotheses=BEAM,
            max_length=len(ids) + 10 + int(8 * min(seconds, 30.0)),
            return_no_speech_prob=True,
            return_scores=True,
            suppress_blank=True,
        )[0]
        # Whisper's own silence rule: the model says "no speech" and is unsure of its words
        if result.no_speech_prob > NO_SPEECH and result.scores[0] < LOW_LOGPROB:
            return "", result.scores[0]
        texts = [self.tokenizer.decode(seq).strip() for seq in result.sequences_ids]
        vocabulary = domain_vocabulary(prompt)
        best = max(
            range(len(texts)),
            key=lambda i: result.scores[i] + DOMAIN_WEIGHT * domain_score(texts[i], vocabulary),
        )
        return collapse_repeats(texts[best]), result.scores[best]


def _serve(recognizer: Recognizer, workers: int) -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    lock = threading.Lock()

    def send(line: str) -> None:
        with lock:
            out.write(line.replace("\n", " ").encode("utf-8", "replace") + b"\n")
            out.flush()

    def decode(request: int, payload: bytes) -> None:
        try:
            size = int.from_bytes(payload[:4], "little")
            prompt = payload[4 : 4 + size].decode("utf-8", "replace")
            pcm = np.frombuffer(payload[4 + size :], dtype="<i2")
            began = time.perf_counter()
            text, logprob = recognizer.transcribe_scored(pcm, prompt)
            took = time.perf_counter() - began
            send(f"R {request} {took:.4f} {len(pcm) / SAMPLE_RATE:.4f} {logprob:.3f} {text}")
        except Exception as exc:  # one bad utterance never takes the recogniser down
            send(f"E {request} {type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="whisper") as pool:
        while True:
            header = inp.read(9)
            if len(header) < 9:
                return  # the parent closed the pipe (or died)
            request = int.from_bytes(header[1:5], "little")
            payload = inp.read(int.from_bytes(header[5:9], "little"))
            if header[:1] == b"D":
                pool.submit(decode, request, payload)


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
