"""``/api/v1/twilio/stream``: Twilio Media Streams, the second phone wire (a codec on the driver).

Everything a phone call needs is :class:`calls.phone_stream.PhoneStreamSocket`'s; this module is
Twilio's framing. The upgrade must carry ``X-Twilio-Signature`` over the stream's public URL
(``BASE_URL`` as ``ws``/``wss`` + path + query, no parameters; :mod:`calls.twilio_signature`).
Then, as Twilio documents the bidirectional stream:

- ``connected`` (nothing to do), then ``start``: ``streamSid``, ``callSid`` (the call must be in
  the call map: our voice webhook put it there), ``customParameters`` (its ``session_id`` must be
  the call's) and ``mediaFormat`` (``audio/x-mulaw`` at 8000 Hz, mono); the conversation starts
  on the call's mode (``VOICE_LIVE``: live, else cascade).
- ``media``: base64 mu-law 8 kHz, decoded with the G.711 table to the engine (``push_caller``);
  ``dtmf``: the digit to the engine (both engines take it); ``mark``: Twilio has played our audio
  up to that mark (counted); ``stop``: the call ended (nothing to hang up).
- Out: agent audio encoded to mu-law 8 kHz (``MulawStreamEncoder``) in paced 20 ms ``media``
  messages on the ``streamSid``; a ``mark`` after each response's audio; ``clear`` on a barge-in
  (Twilio drops what it buffered), under the playback lock so no frame of the cancelled response
  follows it.

Close codes: 1008 a missing or wrong signature, Twilio not configured, an unknown call or session,
a frame before ``start`` or a second ``start``, a frame on another ``streamSid``, or more messages
than ``TELEPHONY_MAX_MESSAGES_PER_SECOND``; 1003 a media format other than mu-law 8 kHz mono, or a
binary frame; 1007 a message that is not a JSON object with an ``event``, or a ``media`` payload
that is not base64; 1009 a message over ``TELEPHONY_MAX_MESSAGE_BYTES``; 1013 this process is at
``TELEPHONY_MAX_STREAMS``; 1011 the conversation could not start or ended on an error; 1000 the
agent ended the call (after its last audio played; the call is hung up through Twilio's API) or
Twilio's ``stop``. Unknown events are dropped and counted (``unknown_kind`` in ``/media/status``).
Each close ends only its own stream.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
from typing import Any

from django.conf import settings

from calls import callmap
from calls.callbacks import end_call
from calls.phone_stream import HANG_UP_DEADLINE_S, PhoneStreamSocket
from calls.transfer import transfer_twilio_call
from calls.twilio_signature import HEADER, public_url, valid_signature
from calls.wsauth import query
from voiceagent.conversation.core import DTMF_DIGITS
from voiceagent.conversation.events import Event
from voiceagent.errors import UNAVAILABLE, store_name
from voiceagent.speech.audio import MulawStreamEncoder, ulaw_decode
from voiceagent.speech.audio.mulaw import ULAW_SILENCE_BYTE
from voiceagent.transport.driver import Refused
from voiceagent.transport.playback import PacedPlayback

__all__ = ["TwilioStreamConsumer"]

logger = logging.getLogger("calls.twilio")

FRAME_MS = 20
FRAME_BYTES = 8000 * FRAME_MS // 1000  # mu-law: one byte a sample
LEAD_FRAMES = 3
MAX_QUEUED_FRAMES = 120 * 1000 // FRAME_MS  # two minutes of agent audio; beyond it the oldest goes
MAX_ID_CHARS = 64
STREAM_SID = re.compile(r"[A-Za-z0-9]{1,64}\Z")  # Twilio's are MZ + 32 hex digits
MEDIA_FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


def _text(obj: Any, key: str) -> str | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS else None


def _transfer_failed(parameters: dict[str, Any]) -> str:
    """The stream's ``transfer_failed`` parameter (set by the ``<Dial>`` report): why, or ""."""
    why = parameters.get("transfer_failed")
    return why[:200] if isinstance(why, str) else ""


class TwilioStreamConsumer(PhoneStreamSocket):
    """One Twilio call's bidirectional Media Stream."""

    label = "Twilio stream"
    log = logger

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.stream_sid: str | None = None
        self.transferred = False  # the call went to a person (<Dial>): its record stays open
        self._transfer: asyncio.Task | None = None  # a transfer under way
        self.marks_sent = 0
        self.marks_played = 0
        self._unmarked = False  # agent audio queued since the last mark
        self.playback = PacedPlayback(
            self._send_frame,
            frame_bytes=FRAME_BYTES,
            frame_ms=FRAME_MS,
            lead_frames=LEAD_FRAMES,
            max_frames=MAX_QUEUED_FRAMES,
            pad_byte=ULAW_SILENCE_BYTE,
            encoder=MulawStreamEncoder,
            mulaw=True,
            send_mark=self._send_mark,
        )

    # --- connection ---------------------------------------------------------------------------------
    async def connect(self) -> None:
        await self.accept()
        try:
            self._admit()
        except Refused as exc:
            await self.refuse(exc)

    def _admit(self) -> None:
        """The upgrade is Twilio's (signed with our auth token over the public stream URL)."""
        config = settings.CONFIG
        if not config.get("TWILIO_AUTH_TOKEN"):
            raise Refused(1008, "Twilio is not configured: set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN")
        signature = None
        for key, value in self.scope.get("headers", []):
            if key.decode("latin-1").lower() == HEADER:
                signature = value.decode("latin-1").strip()
                break
        raw_query = self.scope.get("query_string", b"").decode("latin-1")
        url = public_url(self.scope["path"], raw_query, websocket=True)
        if not valid_signature(url, {}, signature):
            raise Refused(1008, "missing or invalid X-Twilio-Signature")
        self.events_wanted = query(self.scope).get("events", "").lower() in ("1", "true", "yes")
        self.take_slot(config.TELEPHONY_MAX_STREAMS)

    # --- inbound ------------------------------------------------------------------------------------
    async def decode(self, text_data: str | None, bytes_data: bytes | None) -> None:
        if bytes_data is not None:
            await self.finish(1003, "binary frames are not part of a Twilio Media Stream")
            return
        try:
            message = json.loads(text_data or "")
        except (ValueError, RecursionError):
            message = None
        event = message.get("event") if isinstance(message, dict) else None
        if not isinstance(event, str):
            await self.finish(1007, "a message that is not a JSON object with an event")
            return
        if event == "connected":
            return
        if event == "start":
            await self._on_start(message)
            return
        if event not in ("media", "dtmf", "mark", "stop"):
            self.drop("unknown_kind", f"an event of unknown kind {event[:40]!r}", level=logging.INFO)
            return
        if self.stream_sid is None:
            await self.finish(1008, f"{event} before start")
            return
        if message.get("streamSid") != self.stream_sid:
            await self.finish(1008, "unknown streamSid")
            return
        if event == "media":
            await self._on_media(message.get("media"))
        elif event == "dtmf":
            self._on_dtmf(message.get("dtmf"))
        elif event == "mark":
            self.marks_played += 1
        else:
            await self._on_stop()

    async def _on_start(self, message: dict[str, Any]) -> None:
        if self.stream_sid is not None:
            await self.finish(1008, "a second start on this stream")
            return
        start = message.get("start")
        stream_sid = _text(message, "streamSid") or _text(start, "streamSid")
        call_sid = _text(start, "callSid")
        if stream_sid is None or call_sid is None or not STREAM_SID.match(stream_sid):
            await self.finish(1008, "start without a valid streamSid and callSid")
            return
        media_format = start.get("mediaFormat")
        if not isinstance(media_format, dict) or any(
            media_format.get(k) != v for k, v in MEDIA_FORMAT.items()
        ):
            await self.finish(1003, "unsupported mediaFormat: expected audio/x-mulaw at 8000 Hz, mono")
            return
        self.stream_sid = stream_sid
        try:
            info = await callmap.lookup(call_sid)
        except UNAVAILABLE as exc:
            await self.refuse(Refused(1013, f"the {store_name(exc)} is unavailable; try again later"))
            return
        if info is None:
            await self.refuse(Refused(1008, "unknown call"))
            return
        parameters = start.get("customParameters")
        if not isinstance(parameters, dict) or parameters.get("session_id") != info.session_id:
            await self.refuse(Refused(1008, "the stream's session_id is not the call's"))
            return
        self.connection_id = call_sid
        logger.info("Twilio stream %s for call %s, session %s", stream_sid, call_sid, info.session_id)
        mode = "live" if info.mode == "VOICE_LIVE" else "cascade"
        if await self.begin(info.session_id, info.scenario, mode) and (why := _transfer_failed(parameters)):
            self.conversation.transfer_failed(why)  # back from a <Dial> nobody answered: the caller is told

    async def _on_media(self, media: Any) -> None:
        payload = media.get("payload") if isinstance(media, dict) else None
        if not isinstance(payload, str):
            await self.finish(1007, "media without a payload")
            return
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            await self.finish(1007, "media payload is not base64")
            return
        if media.get("track", "inbound") != "inbound" or not data or self.conversation is None:
            return
        self.frames_in += 1
        self.push_caller(ulaw_decode(data).tobytes(), 8000)

    def _on_dtmf(self, body: Any) -> None:
        digit = body.get("digit") if isinstance(body, dict) else None
        if not isinstance(digit, str) or digit not in DTMF_DIGITS:
            self.drop("bad_dtmf", "a dtmf event without a digit (0-9 * # A-D)")
            return
        if self.conversation is not None:
            self.conversation.push_dtmf(digit)

    async def _on_stop(self) -> None:
        """The call ended (or left our TwiML): the conversation ends; nothing to hang up. A call
        that went to a person keeps its record open: it may come back (:mod:`calls.transfer`)."""
        transfer = self._transfer
        if transfer is not None and not transfer.done():
            # Twilio left for the <Dial> before its API answered us: the transfer is noted first
            await asyncio.wait({transfer}, timeout=HANG_UP_DEADLINE_S)
        self.call_over = True
        if self.connection_id and not self.transferred:
            from agents_app import sessions

            await sessions.db_call(end_call, self.connection_id, "disconnected")
        await self.finish(1000, "the call ended")

    # --- engine events -> wire ----------------------------------------------------------------------
    async def on_audio(self, event: Event) -> None:
        self._unmarked = True
        await super().on_audio(event)

    def response_done(self) -> None:
        """The response's last frame, then a ``mark`` Twilio echoes once it has played it."""
        super().response_done()
        if self._unmarked:
            self._unmarked = False
            self.marks_sent += 1
            self.playback.mark(f"response-{self.marks_sent}")

    async def on_transfer(self, event: Event) -> None:
        self._transfer = asyncio.current_task()  # the driver runs it as a task of its own
        if not await transfer_twilio_call(self, event):
            await super().on_transfer(event)

    async def send_stop(self) -> None:
        self._unmarked = False
        await self.send(text_data=json.dumps({"event": "clear", "streamSid": self.stream_sid}))

    async def _send_frame(self, frame: bytes) -> None:
        data = base64.b64encode(frame).decode()
        await self.send(
            text_data='{"event":"media","streamSid":"'
            + self.stream_sid
            + '","media":{"payload":"'
            + data
            + '"}}'
        )

    async def _send_mark(self, name: str) -> None:
        message = {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}
        await self.send(text_data=json.dumps(message))

    async def hang_up(self) -> None:
        from calls import twilio_api

        client = twilio_api.twilio_client()
        if client is None or not self.connection_id:
            return
        try:
            async with asyncio.timeout(HANG_UP_DEADLINE_S):
                await client.hang_up(self.connection_id)
        except Exception as exc:
            logger.warning("Twilio stream %s: hang-up failed: %s", self.connection_id, type(exc).__name__)

    async def ended(self, code: int) -> None:
        await super().ended(code)
        logger.info(
            "Twilio stream %s: %d marks sent, %d played",
            self.stream_sid or "-",
            self.marks_sent,
            self.marks_played,
        )
