"""Whisper's log-mel features in numpy, shared by the recogniser and the end-of-turn model.

Both models were trained on the features of OpenAI's Whisper front end (16 kHz, 25 ms Hann
window, 10 ms hop, 80 Slaney mel bands, log10 clamped 8 decades under the peak, scaled by
(x + 4) / 4). The recogniser (:mod:`voiceagent.speech.whisper_worker`) feeds them raw; Smart
Turn (:mod:`voiceagent.speech.turn_model`) was trained through Hugging Face's
``WhisperFeatureExtractor`` with ``do_normalize=True``, which first scales the waveform to zero
mean and unit variance: ``normalize=True`` does that. numpy only (this runs in worker threads
and in the recogniser's child process, never on the event loop).
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np

__all__ = ["HOP", "N_FFT", "SAMPLE_RATE", "log_mel", "mel_filters"]

SAMPLE_RATE: Final = 16000
N_FFT: Final = 400
HOP: Final = 160
_NORMALIZE_EPS: Final = 1e-7  # WhisperFeatureExtractor's variance floor


@functools.cache
def mel_filters(n_mels: int = 80) -> np.ndarray:
    """Slaney-style mel filterbank (librosa's default), as Whisper was trained with."""
    fftfreqs = np.linspace(0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return np.where(
            f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp
        )

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    edges = mel_to_hz(np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(SAMPLE_RATE / 2)), n_mels + 2))
    ramps = edges[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / np.diff(edges)[:-1, None]
    upper = ramps[2:] / np.diff(edges)[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


@functools.cache
def _hann() -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)


def log_mel(pcm16: np.ndarray, frames: int, n_mels: int = 80, *, normalize: bool = False) -> np.ndarray:
    """Whisper's log-mel features of ``pcm16`` zero-padded at the end to ``frames`` frames:
    (n_mels, frames) float32. ``normalize``: the waveform (padding included) scaled to zero mean
    and unit variance first, as ``WhisperFeatureExtractor(do_normalize=True)`` does."""
    audio = pcm16.astype(np.float32)[: frames * HOP] / 32768.0
    audio = np.pad(audio, (0, frames * HOP - len(audio)))
    if normalize:
        audio = (audio - audio.mean()) / np.sqrt(audio.var() + _NORMALIZE_EPS)
    padded = np.pad(audio, (N_FFT // 2, N_FFT // 2), mode="reflect")
    view = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:frames]
    power = np.abs(np.fft.rfft(view * _hann(), axis=1)) ** 2
    log = np.log10(np.maximum(mel_filters(n_mels) @ power.T.astype(np.float32), 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    return np.ascontiguousarray(((log + 4.0) / 4.0).astype(np.float32))
