"""PCM16 conventions shared by every audio module: the sample rates the transports support,
bytes <-> ``np.int16`` without copies, and int16 <-> float32 scaling.
"""

from __future__ import annotations

import sys
from typing import Final

import numpy as np

SUPPORTED_RATES: Final = (8000, 16000, 24000, 48000)
I16_SCALE: Final = 32768.0
_INT16: Final = np.dtype(np.int16)
_LITTLE_ENDIAN: Final = sys.byteorder == "little"

PcmLike = bytes | bytearray | memoryview | np.ndarray


def pcm16_from_bytes(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode little-endian PCM16 bytes to ``np.int16`` without copying (on little-endian hosts).

    The result is a read-only view of ``data`` when ``data`` is immutable: copy it before mutating.
    """
    if len(data) % 2:
        raise ValueError(f"PCM16 payload must have an even number of bytes, got {len(data)}")
    arr = np.frombuffer(data, dtype="<i2")
    return arr if _LITTLE_ENDIAN else arr.astype(np.int16)


def pcm16_to_bytes(samples: np.ndarray) -> bytes:
    """Encode samples as little-endian PCM16 bytes (what every wire format here expects)."""
    return np.asarray(samples).astype("<i2", copy=False).tobytes()


def as_int16(pcm: PcmLike) -> np.ndarray:
    """Accept PCM16 bytes or an int16 array; anything else is a caller bug worth failing on."""
    if isinstance(pcm, np.ndarray):
        if pcm.dtype is not _INT16 and pcm.dtype != _INT16:  # identity check first: per-frame path
            raise TypeError(f"expected an int16 array, got {pcm.dtype}; use float32_to_int16() first")
        return pcm
    return pcm16_from_bytes(pcm)


def int16_to_float32(samples: PcmLike) -> np.ndarray:
    """Scale int16 to float32 in [-1, 1) (what ML models and WebAudio expect)."""
    return np.multiply(as_int16(samples), np.float32(1.0 / I16_SCALE), dtype=np.float32)


def float32_to_int16(samples: np.ndarray) -> np.ndarray:
    """Scale float [-1, 1] to int16 with rounding and saturation (clipping, never wrap-around)."""
    y = np.multiply(samples, np.float32(I16_SCALE), dtype=np.float32)
    np.rint(y, out=y)
    np.clip(y, -32768.0, 32767.0, out=y)
    return y.astype(np.int16)


def validate_rate(rate: int, *, name: str = "sample rate") -> int:
    """Reject rates the transports/codecs here were not designed for (fail at setup, not mid-call)."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or int(rate) not in SUPPORTED_RATES:
        supported = ", ".join(str(r) for r in SUPPORTED_RATES)
        raise ValueError(f"unsupported {name} {rate!r}: supported rates are {supported} Hz")
    return int(rate)
