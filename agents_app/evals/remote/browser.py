"""An agent test over the browser socket ``/api/v1/browser/conversation``, as the web page talks to it.

The page's wire: the API key as ``?api_key=`` (browsers cannot set headers on a WebSocket), then
``config`` ``{scenario, sample_rate: 16000}`` and ``control start``; the server sends the envelope
as is. The microphone stays open for the whole conversation (20 ms PCM16 frames of silence between
turns, as a page with its microphone on does). ``say`` is a ``text`` message, or with ``audio``
synthesised speech in real time followed by a second of silence; ``dtmf`` is the page keypad's
``dtmf`` message.

Unless ``realtime``, the test caller does not hear the agent's audio out: once the agent is back to
listening (its audio all sent before that state), it sends ``control played`` and goes on, so the
service counts the audio as heard and the next words are a new turn. Its speech still goes at real
time: the service's end of turn is counted in the caller's audio.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from typing import Any
from urllib.parse import quote

from agents_app.evals.observe import CallerTurn
from agents_app.evals.remote import speech
from agents_app.evals.remote.base import (
    SPEECH_TAIL_S,
    Microphone,
    RemoteTarget,
    TargetError,
    event_name,
)

RATE = 16000
SILENCE = bytes(RATE // 50 * 2)  # one 20 ms frame


class BrowserTarget(RemoteTarget):
    """The web page's conversation socket of a running service."""

    name = "browser"

    def __init__(self, url: str, api_key: str | None = None, *, realtime: bool = False) -> None:
        super().__init__(url, api_key)
        self.realtime = realtime
        self.ws: Any = None
        self.mic: Microphone | None = None
        self._reader: asyncio.Task | None = None

    async def open(
        self, scenario: str, *, seed: int | None = None, variables: dict[str, Any] | None = None
    ) -> str:
        """Connect, make the demo caller for the session (``seed``), start the conversation on
        ``scenario`` and hear the greeting out. ``variables`` have no place on this wire (the page
        sends none): a test with them is skipped, not run without them."""
        if variables:  # no session API takes them on this wire: the test cannot run here
            from agents_app.evals.runner import Skipped

            raise Skipped(
                f"the browser socket takes no session variables ({', '.join(variables)})"
                "; run it with --transport engine or audiohook"
            )
        self.begin_open()
        self.session_id = f"eval-{time.time_ns():x}"
        await self.seed(seed, scenario, self.session_id)
        query = f"session_id={self.session_id}"
        if self.api_key:
            query += f"&api_key={quote(self.api_key)}"
        self.ws = await self.open_socket(
            f"{self.ws_base}/browser/conversation?{query}",
            "browser socket",
        )
        self.start_reading()
        await self.until_started(
            lambda: any(event_name(m) == "session_started" for m in self.messages), "browser socket"
        )
        await self._send({"type": "config", "payload": {"scenario": scenario, "sample_rate": RATE}})
        await self._send({"type": "control", "payload": {"action": "start"}})
        self.mic = Microphone(self.ws.send, SILENCE)
        self.mic.start()
        await self.finish_open()
        return self.session_id

    async def on_text(self, message: dict[str, Any]) -> None:
        if message.get("type") == "audio":
            payload = message.get("payload") or {}
            samples = len(base64.b64decode(payload.get("data") or "")) / 2
            self.heard_audio(samples / (payload.get("sample_rate") or 24000))
        elif message.get("type") != "audio_levels":
            self.received(message)

    async def _send(self, message: dict[str, Any]) -> None:
        await self.send_json(message, "browser socket")

    async def send_turn(self, turn: CallerTurn) -> float:
        if turn.dtmf is not None:
            await self._send({"type": "dtmf", "payload": {"digits": turn.dtmf}})
            return time.monotonic()
        text = turn.say or ""
        if not turn.audio:
            await self._send({"type": "text", "payload": {"text": text}})
            return time.monotonic()
        audio = await asyncio.to_thread(speech.pcm16, text, RATE)
        return await self.say_into_mic(audio, bytes(int(RATE * SPEECH_TAIL_S) * 2))

    async def _played(self) -> None:
        """Heard out in real time, or (by default) said to be played: the agent's audio all came
        before its ``listening`` state."""
        if self.realtime:
            await super()._played()
            return
        if self.closed is None and not self.recorder.observation.ended:
            with contextlib.suppress(TargetError):  # it closed meanwhile: nothing is playing then
                await self._send({"type": "control", "payload": {"action": "played"}})
        self.playing_until = time.monotonic()

    async def close(self) -> None:
        await self.close_wire()
