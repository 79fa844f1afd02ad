"""The callers of bench_voice_latency and bench_head_start: lines said in voices the service does
not speak with (espeak-ng and CMU flite, bench/offline_speech_corpus.py), over a full-band wire
and through a telephone line (8 kHz mu-law and back)."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

import numpy as np
import soxr
from offline_speech_corpus import VOICES, Voice, available, synthesise

from voiceagent.speech.audio.mulaw import ulaw_decode, ulaw_encode

__all__ = ["FRAME", "FRAME_MS", "LINES", "RATE", "SPEECH_RMS", "Clip", "caller_clips", "phone_line"]

RATE, FRAME_MS = 16000, 20
FRAME = RATE * FRAME_MS // 1000  # samples
SPEECH_RMS = 300.0  # a frame louder than this (about -40 dBFS) carries the caller's words
# What callers say to the default scenario's assistant (fixtures/dialog/default.yaml): each is
# answered by a rule with a short reply, none ends the conversation or hands it over.
LINES = (
    "hello there",
    "how are you today",
    "what can you do for me",
    "tell me a joke",
    "thank you so much",
    "what time is it",
)


@dataclass
class Clip:
    line: str
    voice: str
    pcm: np.ndarray  # int16, 16 kHz, as sent

    @property
    def last_speech_frame(self) -> int:
        frames = self.pcm[: len(self.pcm) // FRAME * FRAME].reshape(-1, FRAME).astype(np.float64)
        loud = np.flatnonzero(np.sqrt((frames**2).mean(axis=1)) > SPEECH_RMS)
        return int(loud[-1]) if len(loud) else len(frames) - 1


def phone_line(pcm: np.ndarray) -> np.ndarray:
    """What a PSTN call sounds like at 16 kHz: 8 kHz mu-law and back."""
    narrow = soxr.resample(pcm, RATE, 8000).astype(np.int16)
    return soxr.resample(ulaw_decode(ulaw_encode(narrow)), 8000, RATE).astype(np.int16)


def make_clips(voices: list[Voice], lines: int, seed: int) -> dict[str, list[Clip]]:
    """Per voice, its lines in a voice-specific order (first turns differ between voices)."""
    out: dict[str, list[Clip]] = {}
    for k, voice in enumerate(voices):
        order = list(LINES)
        random.Random(seed + k).shuffle(order)
        out[voice.label] = [Clip(line, voice.label, synthesise(voice, line, 1.0)) for line in order[:lines]]
    return out


def caller_clips(lines: int, seed: int) -> tuple[list[Voice], dict[str, list[Clip]]]:
    """The callers' voices, and each voice's lines as said over both wires (``<voice>|phone``)."""
    voices = [v for v in VOICES if available(v)]
    if len(voices) < 4:
        sys.exit(f"need at least 4 caller voices (espeak-ng and flite), found {[v.label for v in voices]}")
    clips = make_clips(voices, lines, seed)
    for label, said in list(clips.items()):
        clips[f"{label}|phone"] = [Clip(c.line, c.voice, phone_line(c.pcm)) for c in said]
    return voices, clips
