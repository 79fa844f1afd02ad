"""Vectorised audio utilities shared by every transport.

Everything here works on whole buffers with numpy (no per-sample Python loops) because a single
process serves many concurrent calls and each one moves 50 frames per second in each direction.

Conventions:
- PCM is signed 16-bit little-endian ("PCM16"), interleaved when multi-channel. In memory it is an
  ``np.int16`` array.
- G.711 mu-law is one ``uint8`` per sample at 8 kHz (telephony).
- Supported sample rates are :data:`SUPPORTED_RATES` (8, 16, 24 and 48 kHz), which covers telephony,
  speech recognisers, TTS engines and browsers.

One module per job: :mod:`.pcm` (PCM16 layout, rates), :mod:`.mulaw` (G.711 and the telephony
chains), :mod:`.resampling`, :mod:`.framing`, :mod:`.pacing`, :mod:`.levels` and :mod:`.signals`,
:mod:`.upsampling` (doubling a live stream's rate without block buffering); this ``__init__`` is the
public face the transports and providers import from.
"""

from __future__ import annotations

from .framing import FrameChunker, frame_bytes_for
from .levels import LEVEL_FLOOR_DB, frame_dbfs, frame_level, peak_level, rms_dbfs, rms_level
from .mulaw import (
    ULAW_SILENCE_BYTE,
    MulawStreamDecoder,
    MulawStreamEncoder,
    pcm16_to_ulaw8k,
    ulaw8k_to_pcm16,
    ulaw_decode,
    ulaw_encode,
)
from .pacing import Pacer
from .pcm import (
    SUPPORTED_RATES,
    PcmLike,
    float32_to_int16,
    int16_to_float32,
    pcm16_from_bytes,
    pcm16_to_bytes,
    validate_rate,
)
from .resampling import DEFAULT_QUALITY, QUALITIES, StreamResampler, resample, resample_file
from .signals import generate_tone, silence
from .upsampling import HalfbandUpsampler, stream_resampler

__all__ = [
    "DEFAULT_QUALITY",
    "LEVEL_FLOOR_DB",
    "QUALITIES",
    "SUPPORTED_RATES",
    "ULAW_SILENCE_BYTE",
    "FrameChunker",
    "HalfbandUpsampler",
    "MulawStreamDecoder",
    "MulawStreamEncoder",
    "Pacer",
    "PcmLike",
    "StreamResampler",
    "float32_to_int16",
    "frame_bytes_for",
    "frame_dbfs",
    "frame_level",
    "generate_tone",
    "int16_to_float32",
    "pcm16_from_bytes",
    "pcm16_to_bytes",
    "pcm16_to_ulaw8k",
    "peak_level",
    "resample",
    "resample_file",
    "rms_dbfs",
    "rms_level",
    "silence",
    "stream_resampler",
    "ulaw8k_to_pcm16",
    "ulaw_decode",
    "ulaw_encode",
    "validate_rate",
]
