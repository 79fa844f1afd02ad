"""Twilio's side of a bidirectional Media Stream (``/api/v1/twilio/stream``), for tests.

It opens the stream as Twilio does: the upgrade signed with ``X-Twilio-Signature`` (base64
HMAC-SHA1 of the auth token over the stream's URL, no parameters; computed here with the standard
library, independently of the service's validator), then ``connected`` and ``start`` (streamSid,
callSid, customParameters, mediaFormat ``audio/x-mulaw`` 8000 mono), 20 ms ``media`` frames of
base64 mu-law, ``dtmf``, ``stop``. It collects what the service sends: ``media`` (decoded to PCM16
at 8 kHz, with arrival times), ``mark`` (echoed back at once, as Twilio does once it has played
the audio before it) and ``clear``; with ``?events=1`` the envelope messages too. Works over a
Channels ``WebsocketCommunicator`` or a real ``websockets`` connection (the ACS client's sockets).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from acs_media_client import Receiving, Socket, silence, tone

from voiceagent.speech.audio import ulaw_decode, ulaw_encode

__all__ = ["TwilioMediaClient", "sign", "silence", "tone", "twilio_sid"]

RATE = 8000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000  # mu-law: one byte a sample


def twilio_sid(prefix: str) -> str:
    """A Twilio-shaped SID: two letters and 32 hex digits (CA call, MZ stream, AC account)."""
    return prefix + os.urandom(16).hex()


def sign(auth_token: str, url: str, params: dict[str, Any] | None = None) -> str:
    """Twilio's request signature: the URL, then each parameter's name and value(s) in name order."""
    data = url
    for name in sorted(params or {}):
        value = params[name]
        for item in sorted(value if isinstance(value, list | tuple) else [value]):
            data += name + str(item)
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode()


@dataclass
class TwilioMediaClient(Receiving):
    socket: Socket
    account_sid: str = field(default_factory=lambda: twilio_sid("AC"))
    call_sid: str = field(default_factory=lambda: twilio_sid("CA"))
    stream_sid: str = field(default_factory=lambda: twilio_sid("MZ"))
    echo_marks: bool = True  # answer each mark as Twilio does once it has played up to it
    audio: bytearray = field(default_factory=bytearray)  # media received, PCM16 at 8 kHz
    audio_frames: list[tuple[float, int]] = field(default_factory=list)  # (arrival time, bytes)
    clears: list[int] = field(default_factory=list)  # len(audio) when each clear arrived
    marks: list[tuple[str, int]] = field(default_factory=list)  # (name, len(audio)) as each arrived
    events: list[dict] = field(default_factory=list)  # envelope messages (``?events=1``)
    wire: list[dict] = field(default_factory=list)  # every JSON message, in order
    closed: bool = False
    sequence: int = 0
    chunk: int = 0

    # --- sending ------------------------------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        self.sequence += 1
        await self.socket.send_text(json.dumps({**message, "sequenceNumber": str(self.sequence)}))

    async def send_raw(self, text: str) -> None:
        await self.socket.send_text(text)

    async def connected(self) -> None:
        await self.socket.send_text(
            json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        )

    async def start(self, parameters: dict[str, str], media_format: dict[str, Any] | None = None) -> None:
        await self.send(
            {
                "event": "start",
                "start": {
                    "accountSid": self.account_sid,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": media_format
                    or {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": parameters,
                },
                "streamSid": self.stream_sid,
            }
        )

    async def begin(self, parameters: dict[str, str]) -> None:
        """``connected`` then ``start``, as Twilio opens every stream."""
        await self.connected()
        await self.start(parameters)

    async def frame(self, mulaw: bytes, stream_sid: str | None = None) -> None:
        self.chunk += 1
        await self.send(
            {
                "event": "media",
                "streamSid": stream_sid or self.stream_sid,
                "media": {
                    "track": "inbound",
                    "chunk": str(self.chunk),
                    "timestamp": str(self.chunk * FRAME_MS),
                    "payload": base64.b64encode(mulaw).decode(),
                },
            }
        )

    async def audio_ms(self, pcm: bytes, pace: float = 0.0) -> None:
        """PCM16 at 8 kHz in 20 ms mu-law frames (``pace`` seconds between frames; 0: at once)."""
        encoded = ulaw_encode(np.frombuffer(pcm, dtype="<i2"))
        for i in range(0, len(encoded), FRAME_BYTES):
            await self.frame(encoded[i : i + FRAME_BYTES])
            if pace:
                await asyncio.sleep(pace)

    async def speak(self, speech_ms: int = 200, silence_ms: int = 900, pace: float = 0.0) -> None:
        """A caller utterance: a tone, then enough silence for the end of turn."""
        await self.audio_ms(tone(speech_ms, RATE), pace)
        await self.audio_ms(silence(silence_ms, RATE), pace)

    async def dtmf(self, digit: str) -> None:
        await self.send(
            {
                "event": "dtmf",
                "streamSid": self.stream_sid,
                "dtmf": {"track": "inbound_track", "digit": digit},
            }
        )

    async def stop(self) -> None:
        await self.send(
            {
                "event": "stop",
                "streamSid": self.stream_sid,
                "stop": {"accountSid": self.account_sid, "callSid": self.call_sid},
            }
        )

    # --- receiving ----------------------------------------------------------------------------------
    async def next_message(self, timeout: float = 5.0) -> dict | None:
        """The next JSON message (media, mark and clear are also recorded); None once closed."""
        if self.closed:
            return None
        raw = await self.socket.receive(timeout)
        if raw is None:
            self.closed = True
            return None
        message = json.loads(raw)
        self.wire.append(message)
        event = message.get("event")
        if event == "media":
            pcm = ulaw_decode(base64.b64decode(message["media"]["payload"])).tobytes()
            self.audio += pcm
            self.audio_frames.append((time.monotonic(), len(pcm)))
        elif event == "clear":
            self.clears.append(len(self.audio))
        elif event == "mark":
            self.marks.append((message["mark"]["name"], len(self.audio)))
            if self.echo_marks:
                await self.send({"event": "mark", "streamSid": self.stream_sid, "mark": message["mark"]})
        elif "type" in message:
            self.events.append(message)
        return message

    def audio_seconds(self) -> float:
        return len(self.audio) / 2 / RATE
