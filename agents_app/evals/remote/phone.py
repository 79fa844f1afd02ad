"""An agent test over the phone: the telephony provider's side of the ACS media stream
``/api/v1/media/stream?events=1``.

The call is placed first as the acceptance suite does (``POST /calls/initiate``: the service makes
the session and its call map entry, so a seeded demo caller can be made for it before the call
connects); the target then plays the provider, connecting the stream with the call's
``x-ms-call-connection-id``, ``AudioMetadata`` (16 kHz ``pcm16KMono``) and 20 ms ``AudioData`` frames
in real time for the whole call, silence included. On a service without telephony configured it
opens a simulator stream (``?scenario=``) instead, which has no session before it connects: a
test with a ``seed`` cannot run there. A service that verifies the provider's JWT
(``TELEPHONY_MEDIA_AUDIENCE``) cannot be reached by a test client at all.

A phone has no text: ``say`` is always spoken (synthesised speech, then a second of silence), with
or without ``audio``; ``dtmf`` is a ``DtmfData`` message. The stream's ``?events=1`` messages
(``transcript``, ``agent_response``, ``handoff``, ``tool_call``) are renamed to the browser's
envelope for the recorder; the agent's ``state`` (back to ``listening``), which the stream does not
carry, comes from the dashboard relay of the session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from agents_app.evals.observe import CallerTurn
from agents_app.evals.remote import speech
from agents_app.evals.remote.base import (
    SPEECH_TAIL_S,
    Microphone,
    RemoteTarget,
    TargetError,
    dumps,
    event_name,
)
from agents_app.evals.remote.dashboard import DashboardFeed

RATE = 16000
FRAME_BYTES = RATE // 50 * 2
TEST_NUMBER = "+15550109999"
_TELEPHONY: dict[str, bool] = {}  # service REST base -> it places calls


def envelope_of(message: dict[str, Any]) -> dict[str, Any] | None:
    """A ``?events=1`` message -> the browser's envelope (what the recorder reads), or None."""
    kind, payload = message.get("type"), message.get("payload") or {}
    if kind in ("transcript", "event"):
        return message
    if kind == "agent_response":
        return {**message, "type": "response"}
    if kind == "handoff":
        return {**message, "type": "event", "payload": {"name": "handoff", **payload}}
    if kind == "tool_call":
        call = {k: v for k, v in payload.items() if k != "name"}
        return {
            **message,
            "type": "event",
            "payload": {"name": "tool_call", "tool": payload.get("name"), **call},
        }
    return None


class PhoneTarget(RemoteTarget):
    """One phone call's media stream of a running service, played as the telephony provider."""

    name = "phone"

    def __init__(self, url: str, api_key: str | None = None) -> None:
        super().__init__(url, api_key)
        self.ws: Any = None
        self.mic: Microphone | None = None
        self.connection_id: str | None = None
        self.dashboard: DashboardFeed | None = None
        self._reader: asyncio.Task | None = None

    async def open(
        self, scenario: str, *, seed: int | None = None, variables: dict[str, Any] | None = None
    ) -> str:
        """Place the call, make its demo caller (``seed``), connect the stream, hear the greeting."""
        if variables:  # no session API takes them on this wire: the test cannot run here
            from agents_app.evals.runner import Skipped

            raise Skipped(
                f"a phone call takes no session variables ({', '.join(variables)})"
                "; run it with --transport engine or audiohook"
            )
        self.begin_open()
        placed = await self._place(scenario)
        if placed is None and seed is not None:
            raise TargetError(
                "a seeded test over the phone needs telephony configured on the service "
                "(POST /calls/initiate makes the session before the call connects)"
            )
        query = "events=1" + (f"&api_key={quote(self.api_key)}" if self.api_key else "")
        headers = {}
        if placed is not None:
            self.session_id, self.connection_id = placed["session_id"], placed["connection_id"]
            await self.seed(seed, scenario, self.session_id)
            headers = {
                "x-ms-call-connection-id": self.connection_id,
                "x-ms-call-correlation-id": str(uuid.uuid4()),
            }
        else:
            query += f"&scenario={quote(scenario)}"
        self.dashboard = await DashboardFeed.connect(self, self.session_id or None)
        self.ws = await self.open_socket(
            f"{self.ws_base}/media/stream?{query}",
            "media stream",
            additional_headers=headers,
        )
        self.start_reading()
        await self._send(
            {
                "kind": "AudioMetadata",
                "audioMetadata": {
                    "subscriptionId": str(uuid.uuid4()),
                    "encoding": "PCM",
                    "sampleRate": RATE,
                    "channels": 1,
                    "length": FRAME_BYTES,
                },
            }
        )
        self.mic = Microphone(self._frame, bytes(FRAME_BYTES))
        self.mic.start()
        await self.until_started(lambda: bool(self.session_id), "media stream")
        await self.finish_open()
        return self.session_id

    async def _place(self, scenario: str) -> dict[str, Any] | None:
        """``POST /calls/initiate``; None when the service has no telephony (a simulator stream then)."""
        body = {"phone_number": TEST_NUMBER, "scenario": scenario}
        async with httpx.AsyncClient(timeout=30, headers=self.headers) as http:
            try:
                if not await self._telephony(http):
                    return None
                response = await http.post(f"{self.http_base}/calls/initiate", json=body)
            except httpx.HTTPError as exc:
                raise TargetError(f"cannot reach the service at {self.http_base}: {exc}") from None
        if response.status_code == 202:
            return response.json()
        if response.status_code in (401, 403):
            raise TargetError(
                f"the service refused the API key ({response.status_code}): {response.text[:200]}"
            )
        if response.status_code == 400:
            raise TargetError(f"POST /calls/initiate refused the call: {response.text[:300]}")
        return None  # 503: telephony not configured

    async def _telephony(self, http: httpx.AsyncClient) -> bool:
        """Whether the service places calls (``/readiness``: its ``telephony`` check is configured),
        asked once per service: a refused ``/calls/initiate`` would be an ERROR line in its log."""
        known = _TELEPHONY.get(self.http_base)
        if known is None:
            response = await http.get(f"{self.http_base}/readiness")
            checks = response.json().get("checks", []) if response.status_code in (200, 503) else []
            telephony = next((c for c in checks if c.get("component") == "telephony"), {})
            known = _TELEPHONY[self.http_base] = telephony.get("status", "not_configured") != "not_configured"
        return known

    async def on_text(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        if kind == "AudioData":
            data = (message.get("audioData") or {}).get("data") or ""
            self.heard_audio(len(base64.b64decode(data)) / 2 / RATE)
        elif kind == "StopAudio":
            self.playing_until = time.monotonic()  # the provider flushes what it holds
        elif (mapped := envelope_of(message)) is not None:
            if event_name(mapped) == "session_started" and not self.session_id:
                self.session_id = mapped["payload"].get("session_id") or ""
                if self.dashboard is not None:
                    self.dashboard.follow(self.session_id)
            self.received(mapped)

    async def _frame(self, pcm: bytes) -> None:
        await self.ws.send(
            dumps(
                {
                    "kind": "AudioData",
                    "audioData": {"data": base64.b64encode(pcm).decode(), "silent": not any(pcm)},
                }
            )
        )

    async def _send(self, message: dict[str, Any]) -> None:
        await self.send_json(message, "media stream")

    async def send_turn(self, turn: CallerTurn) -> float:
        if turn.dtmf is not None:
            await self._send({"kind": "DtmfData", "dtmfData": {"data": turn.dtmf}})
            return time.monotonic()
        audio = await asyncio.to_thread(speech.pcm16, turn.say or "", RATE)  # a phone has no text
        return await self.say_into_mic(audio, bytes(int(RATE * SPEECH_TAIL_S) * 2))

    async def close(self) -> None:
        await self.close_wire()
        if self.dashboard is not None:
            await self.dashboard.close()
        if self.connection_id:  # hang up as the caller; the call may have ended already
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient(timeout=10, headers=self.headers) as http:
                    await http.post(
                        f"{self.http_base}/calls/terminate", json={"connection_id": self.connection_id}
                    )
