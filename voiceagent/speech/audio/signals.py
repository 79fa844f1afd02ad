"""Synthetic int16 signals (tones, silence) for tests, benchmarks and probes."""

from __future__ import annotations

import math

import numpy as np


def _n_samples(rate: int, ms: float) -> int:
    if rate <= 0 or ms < 0:
        raise ValueError(f"need rate > 0 and ms >= 0, got rate={rate!r}, ms={ms!r}")
    return round(rate * ms / 1000)


def generate_tone(rate: int, ms: float, freq: float, amplitude: float = 0.5) -> np.ndarray:
    """Sine tone as int16; ``amplitude`` is the fraction of full scale (0..1)."""
    if not 0.0 <= amplitude <= 1.0:
        raise ValueError(f"amplitude must be in 0..1, got {amplitude!r}")
    t = np.arange(_n_samples(rate, ms), dtype=np.float64) * (2.0 * math.pi * freq / rate)
    return np.rint(np.sin(t) * (amplitude * 32767.0)).astype(np.int16)


def silence(rate: int, ms: float) -> np.ndarray:
    """Digital silence as int16."""
    return np.zeros(_n_samples(rate, ms), dtype=np.int16)
