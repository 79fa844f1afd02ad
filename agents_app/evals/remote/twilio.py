"""An agent test over Twilio: Twilio's side of a call to a running service.

The target plays Twilio for an inbound call, as Twilio would on the wire: it posts the voice
webhook (``/twilio/voice?scenario=<name>``, form-encoded, signed with ``X-Twilio-Signature``) and
opens the Media Stream the TwiML names, its upgrade signed too (``?events=1`` added to the URL and
the signature), then ``connected``, ``start`` (the TwiML's parameters), 20 ms ``media`` frames of
mu-law 8 kHz in real time for the whole call, ``dtmf``. It signs with the service's own
``TWILIO_ACCOUNT_SID`` and ``TWILIO_AUTH_TOKEN``, read from this command's environment: only
whoever holds the token can play Twilio. The URLs it signs are the public ones the service built
from its ``BASE_URL``; it sends them to ``--url`` (the service, maybe behind that public address).

A phone has no text: ``say`` is spoken (synthesised at 8 kHz, mu-law) and ``dtmf`` is one ``dtmf``
message per key. The stream's ``?events=1`` messages are the ACS stream's, renamed the same way
(:func:`agents_app.evals.remote.phone.envelope_of`); the agent's ``state`` comes from the dashboard.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from django.conf import settings
from twilio.request_validator import RequestValidator

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
from agents_app.evals.remote.phone import envelope_of

RATE = 8000
FRAME_BYTES = RATE // 50  # 20 ms of mu-law
SILENCE = b"\xff" * FRAME_BYTES  # mu-law of 0
CALLER = "+15550109998"


def _sid(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


class TwilioTarget(RemoteTarget):
    """One inbound Twilio call to a running service, played as Twilio."""

    name = "twilio"

    def __init__(self, url: str, api_key: str | None = None) -> None:
        super().__init__(url, api_key)
        config = settings.CONFIG
        self.account_sid = config.get("TWILIO_ACCOUNT_SID") or ""
        token = config.get("TWILIO_AUTH_TOKEN") or ""
        self._validator = RequestValidator(token) if token else None
        self.call_sid = _sid("CA")
        self.stream_sid = _sid("MZ")
        self.dashboard: DashboardFeed | None = None

    async def open(
        self, scenario: str, *, seed: int | None = None, variables: dict[str, Any] | None = None
    ) -> str:
        """The call comes in: TwiML from the webhook, the demo caller (``seed``), the stream, the greeting."""
        if self._validator is None:
            raise TargetError(
                "--transport twilio signs as Twilio: set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN"
            )
        if variables:
            from agents_app.evals.runner import Skipped

            raise Skipped(f"a phone call takes no session variables ({', '.join(variables)})")
        self.begin_open()
        stream_url, parameters = await self._answer(scenario)
        self.session_id = parameters.get("session_id", "")
        await self.seed(seed, scenario, self.session_id)
        self.dashboard = await DashboardFeed.connect(self, self.session_id)
        public = stream_url + "?events=1"
        path = urlsplit(stream_url).path
        ws_path = path[len("/api/v1") :] if path.startswith("/api/v1") else path
        self.ws = await self.open_socket(
            f"{self.ws_base}{ws_path}?events=1",
            "Twilio stream",
            additional_headers={"X-Twilio-Signature": self._validator.compute_signature(public, {})},
        )
        self.start_reading()
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        start = {
            "accountSid": self.account_sid,
            "streamSid": self.stream_sid,
            "callSid": self.call_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": RATE, "channels": 1},
            "customParameters": parameters,
        }
        await self._send({"event": "start", "start": start, "streamSid": self.stream_sid})
        self.mic = Microphone(self._frame, SILENCE)
        self.mic.start()
        await self.finish_open()
        return self.session_id

    async def _answer(self, scenario: str) -> tuple[str, dict[str, str]]:
        """POST the signed voice webhook; the TwiML's stream URL and parameters."""
        assert self._validator is not None
        base = settings.CONFIG.get("BASE_URL") or self.http_base.removesuffix("/api/v1")
        public = f"{base.rstrip('/')}/api/v1/twilio/voice?scenario={quote(scenario)}"
        form = {
            "AccountSid": self.account_sid,
            "CallSid": self.call_sid,
            "From": CALLER,
            "To": "+15550001111",
            "CallStatus": "ringing",
            "Direction": "inbound",
        }
        headers = {"X-Twilio-Signature": self._validator.compute_signature(public, form)}
        async with httpx.AsyncClient(timeout=30) as http:
            try:
                response = await http.post(
                    f"{self.http_base}/twilio/voice?scenario={quote(scenario)}", data=form, headers=headers
                )
            except httpx.HTTPError as exc:
                raise TargetError(f"cannot reach the service at {self.http_base}: {exc}") from None
        if response.status_code != 200:
            raise TargetError(f"the voice webhook answered {response.status_code}: {response.text[:300]}")
        # the service under test's own TwiML, a few hundred bytes (the caller chose --url)
        stream = ET.fromstring(response.text[:65536]).find("./Connect/Stream")  # noqa: S314
        if stream is None:
            raise TargetError(f"no <Connect><Stream> in the TwiML: {response.text[:300]}")
        return stream.get("url", ""), {
            p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")
        }

    async def on_text(self, message: dict[str, Any]) -> None:
        event = message.get("event")
        if event == "media":
            payload = (message.get("media") or {}).get("payload") or ""
            self.heard_audio(len(base64.b64decode(payload)) / RATE)
        elif event == "clear":
            self.playing_until = time.monotonic()  # Twilio drops what it buffered
        elif event == "mark":
            await self._send({"event": "mark", "streamSid": self.stream_sid, "mark": message.get("mark")})
        elif (mapped := envelope_of(message)) is not None:
            if event_name(mapped) == "session_started" and self.dashboard is not None:
                self.dashboard.follow(self.session_id)
            self.received(mapped)

    async def _frame(self, mulaw: bytes) -> None:
        payload = base64.b64encode(mulaw).decode()
        await self.ws.send(
            dumps({"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}})
        )

    async def _send(self, message: dict[str, Any]) -> None:
        await self.send_json(message, "Twilio stream")

    async def send_turn(self, turn: CallerTurn) -> float:
        if turn.dtmf is not None:
            for digit in turn.dtmf:
                await self._send({"event": "dtmf", "streamSid": self.stream_sid, "dtmf": {"digit": digit}})
            return time.monotonic()
        audio = await asyncio.to_thread(speech.mulaw8k, turn.say or "")
        return await self.say_into_mic(audio, SILENCE * int(SPEECH_TAIL_S * 50))

    async def close(self) -> None:
        if self.ws is not None:  # the caller hangs up: Twilio says stop
            try:
                stop = {"accountSid": self.account_sid, "callSid": self.call_sid}
                await self._send({"event": "stop", "streamSid": self.stream_sid, "stop": stop})
            except TargetError:
                pass
        await self.close_wire()
        if self.dashboard is not None:
            await self.dashboard.close()
