"""A Pipecat frame serializer for the side-by-side bench (bench/bench_vs_pipecat.py): binary
WebSocket messages are raw PCM16LE mono (caller audio in at 16 kHz, agent audio out at the
transport's output rate), text messages carry the transport messages as JSON, as the service's
browser socket carries its events. Pipecat ships serializers only for telephony providers' and
RTVI's own wire formats; the bench's caller speaks this simpler one to both servers' audio.

Runs only in the bench's Pipecat venv (never imported by the service)."""

from __future__ import annotations

import json

from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    OutputAudioRawFrame,
    OutputTransportMessageFrame,
    OutputTransportMessageUrgentFrame,
)
from pipecat.serializers.base_serializer import FrameSerializer

INPUT_RATE = 16000


class RawPCM16Serializer(FrameSerializer):
    """Agent audio -> bytes, transport messages (RTVI's included, as Pipecat's own clients get
    them) -> JSON text; caller bytes -> one InputAudioRawFrame; caller text is ignored."""

    def __init__(self, input_rate: int = INPUT_RATE) -> None:
        super().__init__(FrameSerializer.InputParams(ignore_rtvi_messages=False))
        self.input_rate = input_rate

    async def serialize(self, frame: Frame) -> str | bytes | None:
        if isinstance(frame, OutputAudioRawFrame):
            return frame.audio
        if isinstance(frame, OutputTransportMessageFrame | OutputTransportMessageUrgentFrame):
            return json.dumps(frame.message)
        return None

    async def deserialize(self, data: str | bytes) -> Frame | None:
        if isinstance(data, bytes) and data:
            return InputAudioRawFrame(audio=data, sample_rate=self.input_rate, num_channels=1)
        return None
