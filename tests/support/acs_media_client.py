"""A test client of the telephony media stream, speaking the provider's (ACS) wire format.

It plays the provider's side of ``/api/v1/media/stream``: ``AudioMetadata`` first, then 20 ms
``AudioData`` frames of base64 PCM16LE (16 or 24 kHz) and ``DtmfData``; it collects what the
server sends: ``AudioData`` (decoded, with arrival times), ``StopAudio`` and, with ``?events=1``,
the envelope messages (``transcript``, ``agent_response``, ...). Works over a Channels
``WebsocketCommunicator`` (:func:`over_communicator`) or a real ``websockets`` connection
(:func:`over_websockets`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FRAME_MS = 20


@dataclass
class Socket:
    send_text: Callable[[str], Awaitable[None]]
    send_bytes: Callable[[bytes], Awaitable[None]]
    receive: Callable[[float], Awaitable[str | bytes | None]]  # None: the server closed
    close_info: dict = field(default_factory=dict)  # {"code", "reason"} once closed


def over_communicator(comm) -> Socket:
    socket: Socket

    async def receive(timeout: float) -> str | bytes | None:
        # not comm.receive_output(timeout): on a timeout that cancels the application
        try:
            message = await asyncio.wait_for(comm.output_queue.get(), timeout)
        except TimeoutError:
            if comm.future.done():
                comm.future.result()  # the application failed: raise its error
            raise
        if message["type"] == "websocket.close":
            socket.close_info.update(code=message.get("code", 1000), reason=message.get("reason", ""))
            return None
        return message.get("text") if message.get("text") is not None else message.get("bytes")

    socket = Socket(
        lambda text: comm.send_to(text_data=text),
        lambda data: comm.send_input({"type": "websocket.receive", "bytes": data}),
        receive,
    )
    return socket


def over_websockets(ws) -> Socket:
    from websockets.exceptions import ConnectionClosed

    socket: Socket

    async def receive(timeout: float) -> str | bytes | None:
        try:
            return await asyncio.wait_for(ws.recv(), timeout)
        except ConnectionClosed as exc:
            if exc.rcvd is not None:
                socket.close_info.update(code=exc.rcvd.code, reason=exc.rcvd.reason)
            return None

    socket = Socket(ws.send, ws.send, receive)
    return socket


def tone(ms: float, rate: int, level: int = 8000, freq: float = 440.0) -> bytes:
    n = int(rate * ms / 1000)
    return (np.sin(np.arange(n) * 2 * np.pi * freq / rate) * level).astype("<i2").tobytes()


def silence(ms: float, rate: int) -> bytes:
    return bytes(int(rate * ms / 1000) * 2)


class Receiving:
    """What every stream client does with its ``next_message`` (its own wire's decoding): wait
    for a message, an envelope event or the close, or take everything for a while."""

    socket: Socket
    closed: bool

    async def next_message(self, timeout: float = 5.0) -> dict | None:
        raise NotImplementedError

    async def collect(self, seconds: float) -> None:
        """Receive everything for ``seconds`` (or until the server closes)."""
        deadline = time.monotonic() + seconds
        while not self.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await self.next_message(remaining)
            except TimeoutError:
                return

    async def until(self, predicate: Callable[[dict], bool], timeout: float = 8.0) -> dict:
        """Receive until a message matches ``predicate``; fails on timeout or close."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.next_message(timeout)
                if message is None:
                    raise AssertionError(f"closed before the expected message: {self.socket.close_info}")
                if predicate(message):
                    return message

    async def event(self, type_: str, timeout: float = 8.0, **payload: Any) -> dict:
        """The next envelope message of ``type_`` whose payload has the given items."""
        return await self.until(
            lambda m: m.get("type") == type_ and all(m["payload"].get(k) == v for k, v in payload.items()),
            timeout,
        )

    async def wait_closed(self, timeout: float = 8.0) -> dict:
        """Drain until the server closes; returns ``{"code", "reason"}``."""
        async with asyncio.timeout(timeout):
            while await self.next_message(timeout) is not None:
                pass
        return self.socket.close_info


@dataclass
class AcsMediaClient(Receiving):
    socket: Socket
    rate: int = 16000
    capitalized: bool = False  # send ``Kind/AudioData/...`` instead of ``kind/audioData/...``
    audio: bytearray = field(default_factory=bytearray)  # AudioData received, concatenated PCM
    audio_frames: list[tuple[float, int]] = field(default_factory=list)  # (arrival time, bytes)
    stops: list[int] = field(default_factory=list)  # len(audio) when each StopAudio arrived
    events: list[dict] = field(default_factory=list)  # envelope messages (``?events=1``)
    wire: list[dict] = field(default_factory=list)  # every JSON message, in order
    closed: bool = False

    # --- sending ------------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return name[:1].upper() + name[1:] if self.capitalized else name

    async def send(self, message: dict[str, Any]) -> None:
        await self.socket.send_text(json.dumps(message))

    async def send_raw(self, text: str) -> None:
        await self.socket.send_text(text)

    async def send_binary(self, data: bytes) -> None:
        await self.socket.send_bytes(data)

    async def metadata(self, rate: int | None = None) -> None:
        rate = rate or self.rate
        self.rate = rate
        await self.send(
            {
                self._key("kind"): "AudioMetadata",
                self._key("audioMetadata"): {
                    self._key("subscriptionId"): "sub-1",
                    self._key("encoding"): "PCM",
                    self._key("sampleRate"): rate,
                    self._key("channels"): 1,
                    self._key("length"): rate * FRAME_MS // 1000 * 2,
                },
            }
        )

    async def frame(self, pcm: bytes, silent: bool = False) -> None:
        await self.send(
            {
                self._key("kind"): "AudioData",
                self._key("audioData"): {
                    self._key("timestamp"): time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                    self._key("participantRawID"): "4:+15550100",
                    self._key("data"): base64.b64encode(pcm).decode(),
                    self._key("silent"): silent,
                },
            }
        )

    async def audio_ms(self, pcm: bytes, pace: float = 0.0) -> None:
        """``pcm`` in 20 ms frames (``pace`` seconds between frames; 0: as fast as possible)."""
        size = self.rate * FRAME_MS // 1000 * 2
        for i in range(0, len(pcm), size):
            chunk = pcm[i : i + size]
            await self.frame(chunk, silent=not any(chunk))
            if pace:
                await asyncio.sleep(pace)

    async def speak(self, speech_ms: int = 200, silence_ms: int = 900) -> None:
        """A caller utterance: a tone, then enough silence for the end of turn."""
        await self.audio_ms(tone(speech_ms, self.rate))
        await self.audio_ms(silence(silence_ms, self.rate))

    async def dtmf(self, digits: str) -> None:
        await self.send({self._key("kind"): "DtmfData", self._key("dtmfData"): {self._key("data"): digits}})

    # --- receiving ----------------------------------------------------------------------------------
    async def next_message(self, timeout: float = 5.0) -> dict | None:
        """The next JSON message (AudioData/StopAudio are also recorded); None once closed."""
        if self.closed:
            return None
        raw = await self.socket.receive(timeout)
        if raw is None:
            self.closed = True
            return None
        message = json.loads(raw)
        self.wire.append(message)
        kind = message.get("kind")
        if kind == "AudioData":
            pcm = base64.b64decode(message["audioData"]["data"])
            self.audio += pcm
            self.audio_frames.append((time.monotonic(), len(pcm)))
        elif kind == "StopAudio":
            self.stops.append(len(self.audio))
        elif "type" in message:
            self.events.append(message)
        return message

    def audio_seconds(self) -> float:
        return len(self.audio) / 2 / self.rate

    def types(self) -> list[str]:
        return [m.get("kind") or m.get("type") for m in self.wire]
