"""G.711 mu-law: table encode/decode (bit-exact with the classic Sun/CCITT reference: BIAS 0x84,
CLIP 32635) and the per-call telephony chains, 8 kHz mu-law <-> PCM16 at the engine rate.

The chains run 50 times a second per call in each direction, so they call the resampler's chunk
method and the tables directly rather than going through the public one-shot functions.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .pcm import PcmLike, as_int16
from .resampling import DEFAULT_QUALITY, StreamResampler

_ULAW_BIAS: Final = 0x84
_ULAW_CLIP: Final = 32635


def _build_ulaw_encode_table() -> np.ndarray:
    """65536-entry table indexed by the int16 sample viewed as uint16.

    That layout also makes ``table.take(int16_samples)`` correct without a view: negative indices
    count from the end, so -k lands on 65536 - k, the uint16 view of -k.
    """
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), _ULAW_CLIP) + _ULAW_BIAS  # 132..32767
    # Segment (exponent) = bit length of (mag >> 7) minus one, 0 for the first segment; frexp is exact.
    _, bit_len = np.frexp((mag >> 7).astype(np.float64))
    exponent = np.maximum(bit_len - 1, 0)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


def _build_ulaw_decode_table() -> np.ndarray:
    """256-entry table: mu-law byte -> int16 sample."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


_ULAW_ENCODE: Final = _build_ulaw_encode_table()
_ULAW_DECODE: Final = _build_ulaw_decode_table()
_ULAW_ENCODE.flags.writeable = False
_ULAW_DECODE.flags.writeable = False
ULAW_SILENCE_BYTE: Final = 0xFF  # encode(0); pad mu-law frames with this, not 0x00 (= -32124)


def ulaw_decode(payload: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Decode G.711 mu-law bytes (or a uint8 array) to int16 with one table lookup."""
    codes = payload if isinstance(payload, np.ndarray) else np.frombuffer(payload, dtype=np.uint8)
    if codes.dtype != np.uint8:
        raise TypeError(f"expected uint8 mu-law codes, got {codes.dtype}")
    return _ULAW_DECODE.take(codes)


def ulaw_encode(samples: PcmLike) -> bytes:
    """Encode int16 samples (or PCM16 bytes) to G.711 mu-law bytes with one table lookup."""
    return _ULAW_ENCODE.take(as_int16(samples)).tobytes()


# --------------------------------------------------------------------------------------------------
# Codec chains used by telephony transports (G.711 mu-law at 8 kHz <-> PCM16 at the engine rate)
# --------------------------------------------------------------------------------------------------


def ulaw8k_to_pcm16(payload: bytes | bytearray | memoryview, resampler: StreamResampler) -> np.ndarray:
    """Decode an 8 kHz mu-law payload and resample it to ``resampler.out_rate`` (int16)."""
    if resampler.in_rate != 8000 or resampler.channels != 1:
        raise ValueError(f"mu-law input needs a mono resampler with in_rate=8000, got {resampler!r}")
    return resampler.process(_ULAW_DECODE.take(np.frombuffer(payload, dtype=np.uint8)))


def pcm16_to_ulaw8k(samples: PcmLike, resampler: StreamResampler) -> bytes:
    """Resample int16 audio to 8 kHz and encode it as mu-law bytes (length varies per call)."""
    if resampler.out_rate != 8000 or resampler.channels != 1:
        raise ValueError(f"mu-law output needs a mono resampler with out_rate=8000, got {resampler!r}")
    return _ULAW_ENCODE.take(resampler.process(samples)).tobytes()


class MulawStreamDecoder:
    """Per-call inbound chain: 8 kHz mu-law payloads -> int16 PCM at ``out_rate``."""

    __slots__ = ("_chunk", "resampler")

    def __init__(self, out_rate: int, quality: str = DEFAULT_QUALITY):
        self.resampler = StreamResampler(8000, out_rate, quality=quality)
        self._chunk = self.resampler._chunk

    def decode(self, payload: bytes | bytearray | memoryview) -> np.ndarray:
        """Decode and resample one payload (any size)."""
        # Same result as ulaw8k_to_pcm16() with fewer numpy/Python steps: runs 50 times/s per call.
        codes = np.frombuffer(payload, dtype=np.uint8)
        if self._chunk is None:
            return _ULAW_DECODE.take(codes)
        return self._chunk(_ULAW_DECODE.take(codes.reshape(-1, 1)), False).reshape(-1)

    def flush(self) -> np.ndarray:
        """Return the resampler tail (end of stream)."""
        return self.resampler.flush()

    def reset(self) -> None:
        """Forget buffered audio (e.g. stream restarted)."""
        self.resampler.reset()


class MulawStreamEncoder:
    """Per-call outbound chain: int16 PCM at ``in_rate`` -> 8 kHz mu-law bytes."""

    __slots__ = ("_chunk", "resampler")

    def __init__(self, in_rate: int, quality: str = DEFAULT_QUALITY):
        self.resampler = StreamResampler(in_rate, 8000, quality=quality)
        self._chunk = self.resampler._chunk

    def encode(self, samples: PcmLike) -> bytes:
        """Resample and encode one chunk; output size varies, frame it with FrameChunker(160)."""
        x = as_int16(samples)
        if self._chunk is not None:
            x = self._chunk(x.reshape(-1, 1), False)  # (n, 1) from soxr; take/tobytes don't care
        return _ULAW_ENCODE.take(x).tobytes()

    def flush(self) -> bytes:
        """Encode the resampler tail (end of a TTS response)."""
        return ulaw_encode(self.resampler.flush())

    def reset(self) -> None:
        """Drop buffered audio (barge-in: the interrupted response's tail must not leak out)."""
        self.resampler.reset()
