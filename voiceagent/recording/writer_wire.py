"""How a recording item travels to the writer process: one frame per item on its standard input.

A frame is a fixed header (name length, kind, value, time, payload length), the recording's name
and the payload (PCM16 bytes; the manifest as JSON for ``open``). Plain bytes, no pickling: the
server's side is one ``struct.pack`` and a join per item on the event loop.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

__all__ = ["HEADER", "KINDS", "encode", "read_item"]

HEADER = struct.Struct("<HBddI")  # name bytes, kind, value (rate or gain dB), monotonic time, payload bytes
KINDS = ("open", "close", "caller", "agent", "cut", "gain")
_CODE = {kind: i for i, kind in enumerate(KINDS)}


def encode(item: tuple[str, str, Any, float, float]) -> bytes:
    """One :data:`~voiceagent.recording.writer.Item` as a frame."""
    name, kind, data, value, t = item
    payload = json.dumps(data).encode() if kind == "open" else bytes(data or b"")
    raw_name = name.encode()
    return HEADER.pack(len(raw_name), _CODE[kind], float(value), float(t), len(payload)) + raw_name + payload


def _exactly(stream: BinaryIO, size: int) -> bytes | None:
    """``size`` bytes, or None at the end of the stream (a frame cut short ends it too)."""
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_item(stream: BinaryIO) -> tuple[str, str, Any, float, float] | None:
    """The next item on ``stream``; None when it ended."""
    header = _exactly(stream, HEADER.size)
    if header is None:
        return None
    name_len, code, value, t, payload_len = HEADER.unpack(header)
    body = _exactly(stream, name_len + payload_len)
    if body is None:
        return None
    kind = KINDS[code]
    payload = body[name_len:]
    data: Any = json.loads(payload) if kind == "open" else payload
    return body[:name_len].decode(), kind, data, value, t
