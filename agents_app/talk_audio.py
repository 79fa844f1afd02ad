"""The microphone and speaker of ``manage.py talk --mic``, through PortAudio (``sounddevice``).

Why a module of its own: it is the only code that touches a sound device, and a machine without
one (a server, CI) must get one clear sentence, never a traceback: :class:`NoSoundDevice` from
:meth:`Microphone.open` / :meth:`Speaker.open`. Audio moves between PortAudio's
thread and the event loop with ``call_soon_threadsafe`` (capture) and a bounded buffer (playback).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

RATE = 16000
BLOCK = 320  # 20 ms at 16 kHz
PLAY_BUFFER_S = 30.0  # agent audio waiting to be played; beyond it the oldest is dropped


class NoSoundDevice(Exception):
    """No PortAudio library, or no device of the kind asked for: said in one sentence."""


def _sounddevice(kind: str) -> Any:
    """The ``sounddevice`` module when a ``kind`` ("input"/"output") device exists, else
    :class:`NoSoundDevice` saying what is missing."""
    try:
        import sounddevice
    except (ImportError, OSError) as exc:  # OSError: the PortAudio library is not installed
        raise NoSoundDevice(
            f"--mic needs a sound device, and PortAudio is not available here ({exc})"
        ) from None
    try:
        sounddevice.query_devices(kind=kind)
    except Exception as exc:  # PortAudioError / ValueError: no such device
        raise NoSoundDevice(f"--mic needs a sound device: no {kind} device found ({exc})") from None
    return sounddevice


class Microphone:
    """16 kHz mono capture, each 20 ms block pushed into the conversation on the loop."""

    def __init__(self, sounddevice: Any):
        self._sd = sounddevice

    @classmethod
    def open(cls) -> Microphone:
        return cls(_sounddevice("input"))

    async def run(self, target: Any) -> None:
        """Until Ctrl-C (cancellation), the end of the conversation, or the input stream stops
        (the device went away)."""
        loop = asyncio.get_running_loop()
        conversation = target.conversation

        def captured(data: Any, frames: int, when: Any, status: Any) -> None:
            if not conversation.closed:
                loop.call_soon_threadsafe(conversation.push_audio, bytes(data), RATE)

        with self._sd.RawInputStream(
            samplerate=RATE, channels=1, dtype="int16", blocksize=BLOCK, callback=captured
        ) as stream:
            while not conversation.closed and stream.active:
                await asyncio.sleep(0.2)  # the stream runs on PortAudio's thread; this only watches


class Speaker:
    """The agent's audio played as it arrives (the output stream opened at its first rate)."""

    def __init__(self, sounddevice: Any):
        self._sd = sounddevice
        self._stream: Any = None
        self._rate = 0
        self._buffer: collections.deque[bytes] = collections.deque()
        self._pending = b""
        self._bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def open(cls) -> Speaker:
        return cls(_sounddevice("output"))

    def play(self, pcm: bytes, rate: int) -> None:
        if self._stream is None:
            self._rate = rate
            self._stream = self._sd.RawOutputStream(
                samplerate=rate, channels=1, dtype="int16", callback=self._fill
            )
            self._stream.start()
        with self._lock:
            self._buffer.append(pcm)
            self._bytes += len(pcm)
            while self._bytes > PLAY_BUFFER_S * self._rate * 2 and self._buffer:
                self._bytes -= len(self._buffer.popleft())

    def _fill(self, out: Any, frames: int, when: Any, status: Any) -> None:
        need = frames * 2
        with self._lock:
            data = self._pending
            while len(data) < need and self._buffer:
                chunk = self._buffer.popleft()
                self._bytes -= len(chunk)
                data += chunk
            self._pending = data[need:]
        out[:] = data[:need].ljust(need, b"\0")

    def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
