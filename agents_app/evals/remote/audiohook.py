"""An agent test over the contact-center bridge: an AudioHook v2 client of
``/api/v1/contactcenter/stream``, as a contact center talks to it.

The session id (``Audiohook-Session-Id``, a UUID) is ours, so the seeded demo caller is made for it
before ``open``; ``open`` offers PCMU 8 kHz mono and names the scenario as ``promptName`` (with
the test's ``variables`` as further ``inputVariables``), then a ``ping`` lets the server send text.
The caller's line is 20 ms mu-law frames in real time, silence included; ``say`` is always spoken
(the wire has no text), ``dtmf`` one ``dtmf`` message per digit. The AudioHook wire carries no
transcripts or events: they come from the dashboard relay of the session.

The bridge runs the live (realtime voice) loop only: the service needs a realtime API configured.
The API key goes as ``X-API-KEY`` (the service's ``CONTACTCENTER_API_KEY`` when it sets one) and to
the dashboard relay (``API_KEYS``); ``contactcenter_key`` sets the first on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from websockets.exceptions import ConnectionClosed

from agents_app.evals.observe import CallerTurn
from agents_app.evals.remote import speech
from agents_app.evals.remote.base import (
    CONNECT_TIMEOUT_S,
    SPEECH_TAIL_S,
    Microphone,
    RemoteTarget,
    TargetError,
    dumps,
)
from agents_app.evals.remote.dashboard import DashboardFeed

ORGANIZATION = "6c0e1ee4-6a1f-4c53-9a58-6d0a2d5b7e10"  # any UUID: the bridge records it
MEDIA = {"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000}
SILENCE = b"\xff" * 160  # 20 ms of mu-law silence
CLOSE_WAIT_S = 10.0


class AudioHookTarget(RemoteTarget):
    """One AudioHook v2 session of a running service, played as the contact center."""

    name = "audiohook"

    def __init__(self, url: str, api_key: str | None = None, contactcenter_key: str | None = None) -> None:
        super().__init__(url, api_key)
        self.contactcenter_key = contactcenter_key if contactcenter_key is not None else self.api_key
        self.ws: Any = None
        self.mic: Microphone | None = None
        self.dashboard: DashboardFeed | None = None
        self.seq = 0
        self.server_seq = 0
        self.wire: list[dict[str, Any]] = []  # the AudioHook messages the server sent
        self._reader: asyncio.Task | None = None
        self._wire_changed = asyncio.Event()

    async def open(
        self, scenario: str, *, seed: int | None = None, variables: dict[str, Any] | None = None
    ) -> str:
        """Make the demo caller (``seed``) for a new session id, ``open`` the session, hear the greeting."""
        self.begin_open()
        self.session_id = str(uuid.uuid4())
        await self.seed(seed, scenario, self.session_id)
        self.dashboard = await DashboardFeed.connect(self, self.session_id, everything=True)
        headers = {
            "Audiohook-Organization-Id": ORGANIZATION,
            "Audiohook-Session-Id": self.session_id,
            "Audiohook-Correlation-Id": str(uuid.uuid4()),
        }
        if self.contactcenter_key:
            headers["X-API-KEY"] = self.contactcenter_key
        self.ws = await self.open_socket(
            f"{self.ws_base}/contactcenter/stream",
            "AudioHook socket",
            subprotocols=["audiohook-v2"],
            additional_headers=headers,
        )
        self.start_reading()
        inputs = {str(k): str(v) for k, v in (variables or {}).items()}
        await self._send(
            "open",
            {
                "organizationId": ORGANIZATION,
                "conversationId": str(uuid.uuid4()),
                "participant": {
                    "id": str(uuid.uuid4()),
                    "ani": "+15550109999",
                    "aniName": "Agent test",
                    "dnis": "",
                },
                "media": [MEDIA],
                "language": "en-US",
                "inputVariables": {**inputs, "promptName": scenario},
            },
        )
        answer = await self._expect(("opened", "disconnect"))
        if answer["type"] == "disconnect":
            params = answer.get("parameters") or {}
            raise TargetError(
                f"the bridge refused the session ({params.get('reason')}): {params.get('info')}"
            )
        await self._send("ping", {})
        self.mic = Microphone(self._audio, SILENCE)
        self.mic.start()
        await self.finish_open()
        return self.session_id

    async def _send(self, kind: str, parameters: dict[str, Any]) -> None:
        self.seq += 1
        message = {
            "version": "2",
            "id": self.session_id,
            "type": kind,
            "seq": self.seq,
            "serverseq": self.server_seq,
            "position": "PT0S",
            "parameters": parameters,
        }
        try:
            await self.ws.send(dumps(message))
        except ConnectionClosed as exc:
            raise TargetError(f"the AudioHook socket closed: {exc}") from None

    async def _audio(self, frame: bytes) -> None:
        await self.ws.send(frame)

    async def _expect(self, kinds: tuple[str, ...]) -> dict[str, Any]:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                while True:
                    for message in self.wire:
                        if message.get("type") in kinds:
                            return message
                    if self.closed is not None:
                        raise TargetError(f"the AudioHook socket closed: {self.closed}")
                    self._wire_changed.clear()
                    await self._wire_changed.wait()
        except TimeoutError:
            raise TargetError(
                f"no {'/'.join(kinds)} from the bridge within {CONNECT_TIMEOUT_S:g} s"
            ) from None

    def on_binary(self, data: bytes) -> None:
        self.heard_audio(len(data) / 8000)  # mu-law: one byte per sample

    async def on_text(self, message: dict[str, Any]) -> None:
        self.server_seq = max(self.server_seq, int(message.get("seq") or 0))
        self.wire.append(message)
        self._wire_changed.set()
        if message.get("type") == "disconnect":  # the agent (or an error) ended it: close
            params = message.get("parameters") or {}
            self.lost(f"disconnect {params.get('reason')}: {params.get('info')}")
            with contextlib.suppress(TargetError):
                await self._send("close", {"reason": "disconnected"})

    def lost(self, why: str) -> None:
        super().lost(why)
        self._wire_changed.set()

    async def send_turn(self, turn: CallerTurn) -> float:
        if turn.dtmf is not None:
            for digit in turn.dtmf:
                await self._send("dtmf", {"digit": digit})
            return time.monotonic()
        audio = await asyncio.to_thread(speech.mulaw8k, turn.say or "")  # the wire has no text
        return await self.say_into_mic(audio, SILENCE * int(SPEECH_TAIL_S * 50))

    async def close(self) -> None:
        if self.mic is not None:
            await self.mic.stop()
        if self.ws is not None:
            if self.closed is None:  # an open session ends properly: close -> closed
                with contextlib.suppress(TargetError, ConnectionClosed):
                    await self._send("close", {"reason": "end"})
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(CLOSE_WAIT_S):
                            while (
                                not any(m.get("type") == "closed" for m in self.wire) and self.closed is None
                            ):
                                self._wire_changed.clear()
                                await self._wire_changed.wait()
            with contextlib.suppress(ConnectionClosed):
                await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.dashboard is not None:
            await self.dashboard.close()
