"""A strict AudioHook v2 client for tests: what a contact center sends, checked the way it checks us.

It numbers its messages, acknowledges ours (``serverseq``), and asserts on every server message it
reads: version, session id, our ``seq`` counting 1, 2, 3 ... and ``clientseq``. It runs over any
socket given as three coroutines (Channels' ``WebsocketCommunicator`` in process, or a real
``websockets`` connection to a server process); see :func:`over_communicator` and
:func:`over_websockets`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

NULL_UUID = "00000000-0000-0000-0000-000000000000"
ORG = "d7934305-0972-4844-938e-9060eef73d05"
MONO = {"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000}
STEREO = {"type": "audio", "format": "PCMU", "channels": ["external", "internal"], "rate": 8000}


@dataclass
class Socket:
    send_text: Callable[[str], Awaitable[None]]
    send_bytes: Callable[[bytes], Awaitable[None]]
    receive: Callable[[float], Awaitable[str | bytes | None]]  # None: the socket closed


def over_communicator(comm) -> Socket:
    async def receive(timeout: float) -> str | bytes | None:
        # not comm.receive_output(timeout): on a timeout that cancels the application
        try:
            message = await asyncio.wait_for(comm.output_queue.get(), timeout)
        except TimeoutError:
            if comm.future.done():
                comm.future.result()  # the application failed: raise its error
            raise
        if message["type"] == "websocket.close":
            return None
        return message.get("text") if message.get("text") is not None else message.get("bytes")

    return Socket(
        lambda text: comm.send_to(text_data=text),
        lambda data: comm.send_input({"type": "websocket.receive", "bytes": data}),  # b"" included
        receive,
    )


def over_websockets(ws) -> Socket:
    from websockets.exceptions import ConnectionClosed

    async def receive(timeout: float) -> str | bytes | None:
        try:
            return await asyncio.wait_for(ws.recv(), timeout)
        except ConnectionClosed:
            return None

    return Socket(ws.send, ws.send, receive)


@dataclass
class AudioHookClient:
    socket: Socket
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    seq: int = 0
    server_seq: int = 0
    audio: bytearray = field(default_factory=bytearray)  # binary frames received
    audio_frames: list[tuple[float, int]] = field(default_factory=list)  # (arrival time, bytes)
    messages: list[dict] = field(default_factory=list)  # text messages received, in order
    closed: bool = False

    def envelope(self, kind: str, parameters: dict | None = None, **extra: Any) -> dict:
        self.seq += 1
        return {
            "version": "2",
            "id": self.session_id,
            "type": kind,
            "seq": self.seq,
            "serverseq": self.server_seq,
            "position": "PT0S",
            "parameters": parameters if parameters is not None else {},
            **extra,
        }

    async def send(self, kind: str, parameters: dict | None = None, **extra: Any) -> None:
        await self.socket.send_text(json.dumps(self.envelope(kind, parameters, **extra)))

    async def send_raw(self, text: str) -> None:
        await self.socket.send_text(text)

    async def send_audio(self, data: bytes) -> None:
        await self.socket.send_bytes(data)

    async def open(
        self,
        *,
        media: list | None = None,
        conversation_id: str | None = None,
        input_variables: dict | None = None,
        organization_id: str = ORG,
        participant_id: str | None = None,
        extra: dict | None = None,
    ) -> None:
        await self.send(
            "open",
            {
                "organizationId": organization_id,
                "conversationId": conversation_id or str(uuid.uuid4()),
                "participant": {
                    "id": participant_id or str(uuid.uuid4()),
                    "ani": "+15551230000",
                    "aniName": "Test Caller",
                    "dnis": "+15559870000",
                },
                "media": [MONO] if media is None else media,
                "language": "en-US",
                "inputVariables": input_variables or {},
                **(extra or {}),
            },
        )

    async def probe(self) -> None:
        await self.open(conversation_id=NULL_UUID, participant_id=NULL_UUID)

    async def next_message(self, timeout: float = 5.0) -> dict | None:
        """The next text message (binary frames on the way are collected); None once closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("no AudioHook message in time")
            frame = await self.socket.receive(remaining)
            if frame is None:
                self.closed = True
                return None
            if isinstance(frame, bytes):
                self.audio += frame
                self.audio_frames.append((loop.time(), len(frame)))
                continue
            message = json.loads(frame)
            self._check(message)
            self.messages.append(message)
            return message

    async def expect(self, kind: str, timeout: float = 5.0) -> dict:
        """Read until a message of ``kind`` arrives (others are kept in ``messages``)."""
        while True:
            message = await self.next_message(timeout)
            if message is None:
                raise AssertionError(f"the socket closed while waiting for {kind}: {self.types()}")
            if message["type"] == kind:
                return message

    async def collect_audio(self, seconds: float) -> None:
        """Read for ``seconds`` (audio and text alike)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (left := end - loop.time()) > 0:
            try:
                if await self.next_message(left) is None:
                    return
            except TimeoutError:
                return

    async def wait_closed(self, timeout: float = 8.0) -> None:
        while not self.closed:
            await self.next_message(timeout)

    def types(self) -> list[str]:
        return [m["type"] for m in self.messages]

    def _check(self, message: dict) -> None:
        assert message.get("version") == "2", message
        assert isinstance(message.get("parameters"), dict), message
        if message["type"] != "disconnect" or message["id"] != NULL_UUID:
            assert message.get("id") == self.session_id, f"id {message.get('id')} != {self.session_id}"
        assert message.get("seq") == self.server_seq + 1, (
            f"server seq {message.get('seq')} after {self.server_seq}"
        )
        assert message.get("clientseq") <= self.seq, message
        self.server_seq = message["seq"]
