"""Caller speech for the acceptance suite, synthesised at test time with the espeak-ng command line.

Why not recorded fixtures or the service's own TTS: callers do not sound like the agent. Each
utterance is spoken in one of several espeak-ng voices (accents, genders, the klatt synthesiser)
at a slow or fast rate, none of them the service's own voice and rate, then converted to the wire
format of the transport that carries it: 16 kHz PCM16 (browser socket, the phone media stream in
``pcm16KMono``) or 8 kHz mu-law (AudioHook). Results are cached per process: synthesis is cheap
but twelve callers ask for the same few sentences.
"""

from __future__ import annotations

import functools
import io
import re
import subprocess
import wave
from dataclasses import dataclass

import numpy as np
import soxr

from voiceagent.speech.audio import ulaw_encode


@dataclass(frozen=True)
class Voice:
    """An espeak-ng voice (``-v``) and speaking rate in words per minute (``-s``)."""

    name: str
    wpm: int

    def __str__(self) -> str:
        return f"{self.name}@{self.wpm}"


# Not the service's voice (en-us at 175 wpm with its +3 % rate): other accents, genders, the klatt
# synthesiser, and rates on both sides of it.
VOICES = (
    Voice("en-us", 140),
    Voice("en-gb+f3", 150),
    Voice("en+m3", 190),
    Voice("en-us+klatt", 140),
    Voice("en-gb", 190),
    Voice("en-us+f2", 160),
)

# Short in-domain sentences (fixtures/dialog/banking.yaml's walk), each with the words a transcript
# of it should contain at least one of: a sanity check that the audio was heard, not a WER target.
SENTENCES = {
    "i lost my card": ("lost", "card"),
    "my card was stolen": ("card", "stolen"),
    "what is my balance": ("balance",),
    "hello": ("hello",),
}


def voice_for(index: int) -> Voice:
    """Caller ``index``'s voice: callers cycle through every voice."""
    return VOICES[index % len(VOICES)]


@functools.lru_cache(maxsize=128)
def _espeak(text: str, voice: Voice) -> tuple[np.ndarray, int]:
    """``text`` spoken by espeak-ng: int16 samples and their rate (22050 Hz for espeak's voices)."""
    out = subprocess.run(
        ["espeak-ng", "--stdout", "-v", voice.name, "-s", str(voice.wpm), "--", text],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    with wave.open(io.BytesIO(out)) as wav:
        rate = wav.getframerate()
        samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    return samples, rate


def _trim(samples: np.ndarray, rate: int, pad_ms: int = 60) -> np.ndarray:
    """Leading and trailing silence removed (espeak adds some), ``pad_ms`` kept on both sides."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > 300)
    if not len(loud):
        return samples
    pad = rate * pad_ms // 1000
    return samples[max(0, loud[0] - pad) : loud[-1] + pad]


@functools.lru_cache(maxsize=128)
def pcm16(text: str, voice: Voice, rate: int = 16000) -> bytes:
    """``text`` in ``voice`` as PCM16LE mono at ``rate`` (the browser socket, the media stream)."""
    samples, native = _espeak(text, voice)
    samples = _trim(samples, native)
    out = soxr.resample(samples.astype(np.float32) / 32768, native, rate, quality="HQ")
    return (np.clip(out, -1, 1) * 32767).astype("<i2").tobytes()


@functools.lru_cache(maxsize=128)
def mulaw8k(text: str, voice: Voice) -> bytes:
    """``text`` in ``voice`` as G.711 mu-law at 8 kHz (AudioHook's PCMU)."""
    return ulaw_encode(np.frombuffer(pcm16(text, voice, 8000), "<i2"))


def heard(transcript: str, sentence: str) -> bool:
    """Whether a transcript of ``sentence`` holds at least one of its key words."""
    words = set(re.findall(r"[a-z0-9']+", transcript.lower()))  # "Balance?" is "balance"
    return any(word in words for word in SENTENCES[sentence])
