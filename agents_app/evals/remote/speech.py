"""The caller's voice for agent tests over a running service: ``say`` turns with ``audio: true``
(and every phone/AudioHook ``say``: those wires carry no text) are synthesised offline with the
espeak-ng command line, then converted to the transport's wire format.

espeak-ng rather than the service's own TTS: the test caller must not sound like the agent, and the
command is a small system package with no model to load. Results are cached per process.
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import wave

import numpy as np
import soxr

from voiceagent.speech.audio import ulaw_encode

VOICE = "en-us"
WPM = 150
PAD_MS = 60


class SpeechUnavailable(RuntimeError):
    """espeak-ng is not installed (``apt-get install espeak-ng``)."""


@functools.lru_cache(maxsize=256)
def _espeak(text: str) -> tuple[np.ndarray, int]:
    if shutil.which("espeak-ng") is None:
        raise SpeechUnavailable("spoken turns need espeak-ng on this machine (apt-get install espeak-ng)")
    out = subprocess.run(
        ["espeak-ng", "--stdout", "-v", VOICE, "-s", str(WPM), "--", text],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    with wave.open(io.BytesIO(out)) as wav:
        rate = wav.getframerate()
        samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > 300)  # espeak pads with silence
    if len(loud):
        pad = rate * PAD_MS // 1000
        samples = samples[max(0, loud[0] - pad) : loud[-1] + pad]
    return samples, rate


@functools.lru_cache(maxsize=256)
def pcm16(text: str, rate: int = 16000) -> bytes:
    """``text`` spoken, as PCM16LE mono at ``rate`` (browser socket, phone media stream)."""
    samples, native = _espeak(text)
    out = soxr.resample(samples.astype(np.float32) / 32768, native, rate, quality="HQ")  # espeak: 22050 Hz
    return (np.clip(out, -1, 1) * 32767).astype("<i2").tobytes()


def mulaw8k(text: str) -> bytes:
    """``text`` spoken, as G.711 mu-law at 8 kHz (AudioHook's PCMU)."""
    return ulaw_encode(np.frombuffer(pcm16(text, 8000), "<i2"))
