"""Fixed-size frames out of arbitrary-size chunks: what wire formats and VADs need."""

from __future__ import annotations

import numpy as np


def frame_bytes_for(rate: int, ms: float, sample_width: int = 2, channels: int = 1) -> int:
    """Bytes in one frame of ``ms`` milliseconds (e.g. 8 kHz mu-law 20 ms -> 160 with width 1)."""
    samples = rate * ms / 1000
    if samples <= 0 or samples != int(samples):
        raise ValueError(f"{ms} ms at {rate} Hz is not a whole, positive number of samples")
    return int(samples) * sample_width * channels


class FrameChunker:
    """Re-cut arbitrary-size byte chunks into exact ``frame_bytes`` frames, keeping the remainder.

    Transports receive/produce audio in whatever sizes the network or TTS engine uses, but wire
    formats and VADs want fixed frames (20 ms is typical).
    """

    __slots__ = ("_buf", "frame_bytes")

    def __init__(self, frame_bytes: int):
        if not isinstance(frame_bytes, int) or frame_bytes <= 0:
            raise ValueError(f"frame_bytes must be a positive int, got {frame_bytes!r}")
        self.frame_bytes = frame_bytes
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet make a full frame."""
        return len(self._buf)

    def push(self, data: bytes | bytearray | memoryview | np.ndarray) -> list[bytes]:
        """Add a chunk (bytes, or an array taken as its raw bytes) and return every complete frame."""
        if isinstance(data, np.ndarray):
            # memoryview, not the array: ``bytearray += ndarray`` would dispatch to numpy's add.
            data = memoryview(np.ascontiguousarray(data)).cast("B")
        self._buf += data
        fb = self.frame_bytes
        n = len(self._buf) // fb
        if not n:
            return []
        with memoryview(self._buf) as mv:
            frames = [mv[i : i + fb].tobytes() for i in range(0, n * fb, fb)]
        del self._buf[: n * fb]
        return frames

    def flush(self, pad_byte: int | None = 0) -> bytes:
        """Return the remainder padded to a full frame with ``pad_byte`` (``None``: unpadded).

        Pad PCM16 with 0 and mu-law with ``ULAW_SILENCE_BYTE`` (0xFF). Returns b"" when empty.
        """
        rest = bytes(self._buf)
        self._buf.clear()
        if rest and pad_byte is not None:
            rest += bytes([pad_byte]) * (self.frame_bytes - len(rest))
        return rest

    def clear(self) -> None:
        """Drop the remainder (barge-in)."""
        self._buf.clear()
