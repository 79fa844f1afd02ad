"""Corpus and scoring of bench/bench_offline_speech.py: what callers say, in whose voice, and WER.

The in-domain sentences are paraphrases of what callers say to the built-in scenarios (banking:
lost and stolen cards, fraud, balance, identity with names, dates and codes; default: the
assistant and the specialist), written for this benchmark: they are not the phrases the
recogniser's vocabulary hint is built from. The out-of-domain ones are everyday sentences that no
scenario expects. Voices are synthesisers the service does not speak with (it speaks with Piper's
en_US-joe-medium): espeak-ng variants and CMU flite's voices (Debian package ``flite``).
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import wave
from dataclasses import dataclass

import numpy as np
import soxr

IN_DOMAIN = (
    "hi i think i lost my debit card yesterday",
    "someone stole my wallet with my credit card in it",
    "i cant find my card anywhere",
    "can you freeze my card please",
    "i need to block my credit card right now",
    "there is a payment on my account i dont recognize",
    "i think my account was hacked",
    "what is the balance on my account",
    "how much money do i have",
    "can you read me my recent transactions",
    "my name is maria garcia",
    "my name is james walker and i was born on july fourth nineteen ninety",
    "i was born on december twelfth nineteen seventy two",
    "the code is four seven one nine two six",
    "my code is eight three three zero five one",
    "yes that is me",
    "the debit card please",
    "it was the third one",
    "none of those are mine",
    "no thank you thats all",
    "can i talk to a real person",
    "please send me a new code",
    "i would like to speak to the specialist",
    "how does compound interest work",
    "take me back to the assistant",
    "thank you goodbye",
)
OUT_OF_DOMAIN = (
    "the weather is lovely in the mountains this time of year",
    "please bring the blue umbrella to the concert tonight",
    "my brother is learning to play the violin",
    "we should plant tomatoes in the garden next spring",
    "the train to the city leaves at half past seven",
    "she painted the kitchen a bright shade of yellow",
)
QUICK_IN = IN_DOMAIN[:2] + IN_DOMAIN[13:14]
QUICK_OUT = OUT_OF_DOMAIN[:1]


@dataclass(frozen=True)
class Voice:
    """A caller voice: ``engine`` (espeak-ng | flite) and its voice name."""

    engine: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.engine}:{self.name}"


VOICES = (
    Voice("espeak-ng", "en-us"),
    Voice("espeak-ng", "en-gb+f3"),
    Voice("flite", "slt"),
    Voice("flite", "rms"),
    Voice("flite", "awb"),
)
RATES = (1.0, 1.25)  # the voice's own pace, and a quarter faster


def available(voice: Voice) -> bool:
    return shutil.which(voice.engine) is not None


def synthesise(voice: Voice, text: str, rate: float) -> np.ndarray:
    """``text`` spoken by ``voice`` at ``rate`` x its pace: int16 at 16 kHz, silence trimmed."""
    if voice.engine == "espeak-ng":
        argv = ["espeak-ng", "--stdout", "-v", voice.name, "-s", str(round(175 * rate)), "--", text]
    else:
        stretch = f"duration_stretch={1 / rate:.3f}"
        argv = ["flite", "-voice", voice.name, "--setf", stretch, "-t", text, "-o", "/dev/stdout"]
    out = subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout
    with wave.open(io.BytesIO(out)) as wav:
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
        sr = wav.getframerate()
    pcm = soxr.resample(pcm, sr, 16000).astype(np.int16)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    if len(loud):
        pcm = pcm[max(0, loud[0] - 1600) : loud[-1] + 1600]
    return pcm


# --- scoring ------------------------------------------------------------------------------------
_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = [
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = {
    w: 10 * i
    for i, w in enumerate(
        ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    )
}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30,
}  # fmt: skip
_SPELLING = {"recognise": "recognize", "ok": "okay", "alright": "all right", "cannot": "can not"}
_CONTRACTIONS = {"thats": "that is", "dont": "do not", "cant": "can not", "im": "i am", "ive": "i have",
                 "id": "i would", "its": "it is", "whats": "what is", "theres": "there is"}  # fmt: skip


def normalise(text: str) -> list[str]:
    """Words to compare: lowercase, no punctuation or apostrophes, contractions and a few spellings
    unified, every number (spoken or written, cardinal or ordinal) as its digits, one a word."""
    text = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text.lower().replace("'", "").replace("\u2019", ""))
    words: list[str] = []
    for word in re.sub(r"[^a-z0-9]+", " ", text).split():
        words.extend(_CONTRACTIONS.get(word, _SPELLING.get(word, word)).split())
    out: list[str] = []
    i = 0
    while i < len(words):
        word, nxt = words[i], words[i + 1] if i + 1 < len(words) else ""
        value: int | None = None
        if word in _TENS and word != "_":
            value = _TENS[word]
            if nxt in _UNITS[1:]:
                value, i = value + _UNITS.index(nxt), i + 1
            elif nxt in _ORDINALS and _ORDINALS[nxt] < 10:
                value, i = value + _ORDINALS[nxt], i + 1
        elif word in _ORDINALS:
            value = _ORDINALS[word]
        elif word in _UNITS:
            value = _UNITS.index(word)
        elif word in _TEENS:
            value = 10 + _TEENS.index(word)
        if value is not None:
            out.extend(str(value))
        elif word.isdigit():
            out.extend(word)
        else:
            out.append(word)
        i += 1
    return out


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance (substitutions, insertions, deletions)."""
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        prev, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            cur = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, prev + (ref[i - 1] != hyp[j - 1]))
            prev = cur
    return row[len(hyp)]
