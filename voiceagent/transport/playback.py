"""Agent audio on its way to a telephony-style peer: cut into wire frames, queued, sent at real time.

The phone media stream (20 ms PCM frames) and the contact-center bridge (250 ms mu-law frames)
both hand the engine's audio to a peer that plays what it receives, so both need the same thing:
frames of an exact size, a bounded queue (the oldest frame goes when it is full; counted), one
task that sends at real time with a small lead (:class:`~voiceagent.speech.audio.Pacer`), a
barge-in that drops everything queued, and a way to wait for the last words to play before
hanging up. The wire's codec comes in as ``encoder``: one per source rate, made on first use
(``push_pcm``), flushed at the end of a response and reset at a barge-in with the queue.

A ``Duck`` event (the caller speaks over the agent, their words not known yet) lowers the gain of
every frame sent from then on (:meth:`set_gain`, PCM16 or mu-law as the wire carries), so it takes
effect within the lead; ``Duck(0)`` restores it and a barge-in (:meth:`drop`) ends it.

A wire whose peer reports what it has played (Twilio's ``mark``) queues a :class:`Mark` after a
response's last frame (:meth:`mark`): it goes to ``send_mark`` in order, as soon as the frame before
it was sent (no pacing of its own), and a barge-in drops it with the frames.

``lock`` is held while a frame is handed to the socket: a transport that must send a control
message (``StopAudio``) after a barge-in takes it around :meth:`clear` and its send, so no frame
of the cancelled response can slip in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

import numpy as np

from voiceagent.speech.audio import FrameChunker, Pacer
from voiceagent.speech.audio.mulaw import ulaw_decode, ulaw_encode

__all__ = ["Mark", "PacedPlayback", "WireEncoder"]
_UNSEEN = object()


class Mark(str):
    """A named point in the queue (after a response's audio), not a frame."""

    __slots__ = ()


class WireEncoder(Protocol):
    """Agent PCM16 at one rate -> the wire's audio (resampled, maybe companded), streaming."""

    def encode(self, pcm: bytes) -> bytes | np.ndarray: ...
    def flush(self) -> bytes | np.ndarray: ...
    def reset(self) -> None: ...


class PacedPlayback:
    def __init__(
        self,
        send: Callable[[bytes], Awaitable[None]],
        *,
        frame_bytes: int,
        frame_ms: int,
        lead_frames: int,
        max_frames: int,
        pad_byte: int | None,
        encoder: Callable[[int], WireEncoder | None] | None = None,
        mulaw: bool = False,
        send_mark: Callable[[str], Awaitable[None]] | None = None,
    ):
        self._send = send
        self._send_mark = send_mark
        self._encoder_for = encoder  # source rate -> its encoder (None: the wire's own format)
        self._encoders: dict[int, WireEncoder | None] = {}
        self._chunker = FrameChunker(frame_bytes)
        self._frame_ms = frame_ms
        self._lead_frames = lead_frames
        self._max_frames = max_frames
        self._pad_byte = pad_byte  # how a response's last partial frame is completed (None: sent short)
        self._queue: deque[bytes | Mark] = deque()
        self._ready = asyncio.Event()
        self.lock = asyncio.Lock()
        self._mulaw = mulaw  # the frames are G.711 mu-law (else PCM16 little-endian)
        self.gain = 1.0  # applied to each frame as it is sent (a Duck event lowers it)
        self.paused_until = 0.0  # time.monotonic() before which nothing is sent (the peer asked)
        self.dropped = 0  # frames dropped because the queue was full
        self.stopped = False

    def __len__(self) -> int:
        return len(self._queue)

    def set_frame_bytes(self, frame_bytes: int) -> None:
        """The wire's frame size changed (a new sample rate): what is buffered is dropped, and the
        encoders, made for the old rate, go too."""
        self.clear()
        self._encoders.clear()
        self._chunker = FrameChunker(frame_bytes)

    def push_pcm(self, pcm: bytes, rate: int) -> None:
        """Agent PCM16 at ``rate``, through its encoder (made now the first time; a rate it cannot
        take raises ``ValueError`` and is not kept)."""
        encoders = self._encoders
        encoder = encoders.get(rate, _UNSEEN)
        if encoder is _UNSEEN:
            encoder = encoders[rate] = self._encoder_for(rate) if self._encoder_for else None
        self._enqueue(self._chunker.push(pcm if encoder is None else encoder.encode(pcm)))

    def finish_response(self) -> None:
        """The response is complete: the encoders' tails, then its last partial frame, are queued."""
        for encoder in self._encoders.values():
            if encoder is not None:
                self.push(encoder.flush())
        self.flush()

    def set_gain(self, gain_db: float) -> None:
        """A ``Duck`` event: the frames not sent yet go out at ``gain_db`` (0 or more: as they are)."""
        self.gain = 1.0 if gain_db >= 0.0 else 10.0 ** (gain_db / 20.0)

    def drop(self) -> None:
        """Barge-in or the end: nothing queued or buffered in an encoder will be sent; a duck ends
        (what plays next, a resumed or new answer, is at full gain)."""
        self.gain = 1.0
        self.clear()
        for encoder in self._encoders.values():
            if encoder is not None:
                encoder.reset()

    def push(self, data: bytes | np.ndarray) -> None:
        """Wire-format audio of any length; complete frames are queued."""
        self._enqueue(self._chunker.push(data))

    def flush(self) -> None:
        """The response is complete: its last partial frame is queued too."""
        rest = self._chunker.flush(pad_byte=self._pad_byte)
        if rest:
            self._enqueue([rest])

    def mark(self, name: str) -> None:
        """Queue a :class:`Mark` after what is queued (a wire with ``send_mark`` only)."""
        if self._send_mark is not None:
            self._enqueue([Mark(name)])

    def clear(self) -> None:
        """Barge-in: nothing queued will be sent."""
        self._queue.clear()
        self._chunker.clear()

    def _enqueue(self, frames: list) -> None:
        if not frames:
            return
        queue = self._queue
        for frame in frames:
            if len(queue) >= self._max_frames:
                queue.popleft()
                self.dropped += 1
            queue.append(frame)
        self._ready.set()

    async def run(self) -> None:
        """Send queued frames at real time until :meth:`stop` (one task per conversation)."""
        pacer = Pacer(self._frame_ms, lead_frames=self._lead_frames)
        queue, ready = self._queue, self._ready
        while not self.stopped:
            if not queue:
                ready.clear()
                await ready.wait()
                late = pacer.lateness()
                if late is None or late > pacer.frame_s:
                    # The queue ran dry for more than a frame past the schedule: a new response, or
                    # the source fell behind and the peer has played everything. A new schedule,
                    # with its lead, refills the peer's buffer. Otherwise (a source faster than real
                    # time, between its deltas) the schedule holds: no burst.
                    pacer.reset()
                continue
            pause = self.paused_until - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
                pacer.reset()
                continue
            if type(queue[0]) is Mark:  # the frames before it are sent: at once, unpaced
                async with self.lock:
                    if queue and type(queue[0]) is Mark:
                        await self._send_mark(queue.popleft())
                continue
            await pacer.wait()
            async with self.lock:
                if queue:  # a barge-in may have emptied it meanwhile
                    frame = queue.popleft()
                    if type(frame) is Mark:
                        await self._send_mark(frame)
                    else:
                        await self._send(frame if self.gain == 1.0 else self._scaled(frame))

    def _scaled(self, frame: bytes) -> bytes:
        """``frame`` at :attr:`gain` (one vectorised pass; mu-law through its tables)."""
        if self._mulaw:
            return ulaw_encode((ulaw_decode(frame) * self.gain).astype(np.int16))
        samples = np.frombuffer(frame, dtype="<i2") * self.gain
        return samples.astype("<i2").tobytes()

    def stop(self) -> None:
        self.stopped = True
        self._ready.set()

    async def drained(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until everything queued has been sent."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._queue and not self.stopped:
                    await asyncio.sleep(self._frame_ms / 1000)
