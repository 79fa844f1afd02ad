"""``/api/v1/media/stream``: the telephony provider's bidirectional media stream (ACS wire format).

The ACS wire codec over the transport driver (:class:`voiceagent.transport.driver.AudioSocket`),
like :mod:`calls.browser` and :mod:`bridge.consumer`; the conversation itself is the engine's.
Wire -> engine: ``AudioMetadata`` sets the stream's rate (16 or 24 kHz),
``AudioData`` (base64 PCM16LE, silent frames included: the engine's VAD needs the silence timing)
goes to ``push_audio``, ``DtmfData`` digits to ``push_dtmf``. Engine -> wire: agent audio is
resampled to the stream's rate, cut into 20 ms ``AudioData`` messages and sent at real time with a
small lead; ``StopAudio`` (barge-in) drops what is queued and tells the provider to flush its own
playback; nothing of the cancelled response follows it.

The call is found by ``x-ms-call-connection-id`` in :mod:`calls.callmap` (written by the REST side
when the call was placed or answered, possibly on another worker). When
``TELEPHONY_MEDIA_AUDIENCE`` is set the provider's bearer JWT is verified first
(:mod:`calls.media_auth`). Without a connection id (and only then without an audience) a
``?scenario=`` simulator stream gets a new session: test clients and local tools talk to the
real adapter that way. In production without an
audience (telephony not configured: settings refuse TELEPHONY_ENDPOINT without one) there is no
provider token to check, so the stream needs the service's API key, like the browser sockets.

Close codes: 1008 bad or missing credentials / unknown call, or more messages than
``TELEPHONY_MAX_MESSAGES_PER_SECOND`` (a token bucket, :mod:`voiceagent.transport.ratelimit`),
1013 this process is at ``TELEPHONY_MAX_STREAMS``, 1003 an unsupported sample rate, 1009 a message over
``TELEPHONY_MAX_MESSAGE_BYTES``, 1011 the conversation could not start or ended on an error, 1000
the agent ended the call (after the last audio played; the call is hung up through the telephony
client). Malformed messages get no answer (the provider expects none) but are dropped, counted
per kind in ``/media/status`` (:data:`dropped_messages`) and logged once per stream and kind: a
hostile client costs its own stream nothing but the message, and others nothing at all.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from typing import Any

from django.conf import settings

from calls import callmap
from calls.media_auth import verify_media_token
from calls.phone_stream import (
    DROP_KINDS,
    HANG_UP_DEADLINE_S,
    TRANSPORT,
    PhoneStreamSocket,
    dropped_messages,
    media_payload,
)
from calls.transfer import transfer_call
from calls.wsauth import UNAUTHORIZED, query, refused
from voiceagent.conversation.core import DTMF_DIGITS
from voiceagent.conversation.events import Event
from voiceagent.errors import UNAVAILABLE, store_name
from voiceagent.speech.audio import StreamResampler
from voiceagent.transport.driver import Refused
from voiceagent.transport.playback import PacedPlayback

__all__ = ["DROP_KINDS", "MediaStreamConsumer", "dropped_messages", "hang_up", "media_payload"]

logger = logging.getLogger("calls.media")

WEBSOCKET_PATH = "/api/v1/media/stream"
STREAM_RATES = (16000, 24000)
FRAME_MS = 20
LEAD_FRAMES = 3  # 60 ms ahead of real time: fills the provider's jitter buffer, barely delays barge-in
MAX_QUEUED_FRAMES = 120 * 1000 // FRAME_MS  # two minutes of agent audio; beyond it the oldest goes
MAX_DTMF_CHARS = 32
STOP_AUDIO = json.dumps({"kind": "StopAudio", "audioData": None, "stopAudio": {}})


# --- wire helpers -------------------------------------------------------------------------------------
def _field(obj: dict[str, Any], name: str) -> Any:
    """``name`` in either casing the provider's samples use (``audioData`` / ``AudioData``)."""
    value = obj.get(name)
    if value is None:
        value = obj.get(name[:1].upper() + name[1:])
    return value


class _Resampler(StreamResampler):
    """Agent audio -> the stream's rate, as the playback's encoder."""

    __slots__ = ()
    encode = StreamResampler.process


async def hang_up(connection_id: str) -> None:
    """Hang the call up through the telephony client; never raises (the stream is ending anyway)."""
    from calls import acs

    client = acs.telephony_client()
    if client is None:
        logger.info("media stream %s: telephony not configured, cannot hang up", connection_id)
        return
    try:
        async with asyncio.timeout(HANG_UP_DEADLINE_S):
            await client.hang_up(connection_id)
    except Exception as exc:
        logger.warning("media stream %s: hang-up failed: %s", connection_id, type(exc).__name__)


class MediaStreamConsumer(PhoneStreamSocket):
    """One phone call's media stream (ACS)."""

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.rate = 16000
        # agent audio -> wire: 20 ms AudioData messages at real time, a few frames ahead
        self.playback = PacedPlayback(
            self._send_frame,
            frame_bytes=self._frame_bytes(),
            frame_ms=FRAME_MS,
            lead_frames=LEAD_FRAMES,
            max_frames=MAX_QUEUED_FRAMES,
            pad_byte=0,
            encoder=self._encoder,
        )

    def _frame_bytes(self) -> int:
        return self.rate * FRAME_MS // 1000 * 2

    def _encoder(self, rate: int) -> _Resampler | None:
        return None if rate == self.rate else _Resampler(rate, self.rate)

    # --- connection ---------------------------------------------------------------------------------
    async def connect(self) -> None:
        await self.accept()
        try:
            session_id, scenario, engine_mode = await self._admit()
        except UNAVAILABLE as exc:  # the call map or a new session needs the store: try again later
            await self.refuse(Refused(1013, f"the {store_name(exc)} is unavailable; try again later"))
            return
        except Refused as exc:
            await self.refuse(exc)
            return
        self.rate = 24000 if engine_mode == "live" else 16000  # until AudioMetadata says otherwise
        self.playback.set_frame_bytes(self._frame_bytes())
        await self.begin(session_id, scenario, engine_mode)

    async def _admit(self) -> tuple[str, str, str]:
        """Authenticate, count, find (or, for a simulator, create) the call's session."""
        from voiceagent.runtime import runtime

        config = settings.CONFIG
        headers: dict[str, str] = {}
        for key, value in self.scope.get("headers", []):
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1").strip())
        params = query(self.scope)
        self.events_wanted = params.get("events", "").lower() in ("1", "true", "yes")
        audience = config.TELEPHONY_MEDIA_AUDIENCE
        if audience:
            problem = await verify_media_token(
                headers.get("authorization"), audience, config.TELEPHONY_MEDIA_JWKS_URL
            )
            if problem:
                raise Refused(1008, problem)
        elif settings.PRODUCTION and (reason := await refused(self.scope)):
            if reason == UNAUTHORIZED:
                reason = "unauthorized: send an API key (?api_key=) or set TELEPHONY_MEDIA_AUDIENCE"
            raise Refused(1008, reason)
        self.take_slot(config.TELEPHONY_MAX_STREAMS)
        self.connection_id = headers.get("x-ms-call-connection-id") or None
        if self.connection_id:
            info = await callmap.lookup(self.connection_id)
            if info is None:
                raise Refused(1008, "unknown call connection")
            logger.info(
                "media stream for call %s (correlation %s), session %s",
                self.connection_id[:64],
                headers.get("x-ms-call-correlation-id", "-")[:64],
                info.session_id,
            )
            if info.mode:  # the call's own mode (fixed when it started) wins over today's setting
                return info.session_id, info.scenario, "live" if info.mode == "VOICE_LIVE" else "cascade"
            return info.session_id, info.scenario, runtime.conversation_mode(TRANSPORT)
        if audience:
            raise Refused(1008, "missing x-ms-call-connection-id header")
        session_id, scenario = await self._simulator_session(params.get("scenario", ""))
        return session_id, scenario, runtime.conversation_mode(TRANSPORT)

    async def _simulator_session(self, name: str) -> tuple[str, str]:
        from agents_app import sessions
        from agents_app.catalog import catalog

        if not name:
            raise Refused(1008, "missing x-ms-call-connection-id header (or ?scenario= for a simulator)")

        def create() -> tuple[str, str] | None:
            spec = catalog.scenario(name)
            if spec is None:
                return None
            session_id = sessions.new_session_id()
            sessions.create_session(session_id, spec.name, spec.start_agent, transport=TRANSPORT)
            return session_id, spec.name

        created = await sessions.db_call(create)
        if created is None:
            raise Refused(1008, f"unknown scenario {name[:64]!r}")
        return created

    async def hang_up(self) -> None:
        assert self.connection_id
        await hang_up(self.connection_id)

    # --- inbound ------------------------------------------------------------------------------------
    async def decode(self, text_data: str | None, bytes_data: bytes | None) -> None:
        if bytes_data is not None:
            self.drop("binary", "binary frames are not part of the media stream")
            return
        try:
            message = json.loads(text_data or "")
        except (ValueError, RecursionError):
            message = None
        kind = message.get("kind", message.get("Kind")) if isinstance(message, dict) else None
        if not isinstance(kind, str):
            self.drop("malformed", "a message that is not {kind, ...} JSON")
            return
        kind = kind.lower()
        if kind == "audiodata":
            self._on_audio(_field(message, "audioData"))
        elif kind == "audiometadata":
            await self._on_metadata(_field(message, "audioMetadata"))
        elif kind == "dtmfdata":
            self._on_dtmf(_field(message, "dtmfData"))
        else:
            self.drop("unknown_kind", f"a message of unknown kind {kind[:40]!r}", level=logging.INFO)

    def _on_audio(self, body: Any) -> None:
        data = _field(body, "data") if isinstance(body, dict) else None
        if not isinstance(data, str):
            self.drop("bad_audio", "AudioData without data")
            return
        try:
            pcm = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            self.drop("bad_audio", "AudioData data is not base64")
            return
        if len(pcm) % 2:
            self.drop("bad_audio", "AudioData is not whole PCM16 samples")
            return
        if not pcm or self.conversation is None:
            return
        self.frames_in += 1
        self.push_caller(pcm, self.rate)  # silent frames too: the VAD times the pause

    async def _on_metadata(self, body: Any) -> None:
        rate = _field(body, "sampleRate") if isinstance(body, dict) else None
        if isinstance(rate, float) and rate.is_integer():
            rate = int(rate)  # JSON's 24000.0 is 24000; frames are counted in whole bytes
        if not isinstance(rate, int) or isinstance(rate, bool) or rate not in STREAM_RATES:
            await self.finish(1003, f"unsupported sampleRate {str(rate)[:16]}: expected 16000 or 24000")
            return
        if rate != self.rate:
            self.rate = rate
            self.playback.set_frame_bytes(self._frame_bytes())

    def _on_dtmf(self, body: Any) -> None:
        digits = _field(body, "data") if isinstance(body, dict) else None
        if not isinstance(digits, str):
            self.drop("bad_dtmf", "DtmfData without data (a string of digits)")
            return
        if self.conversation is None:
            return
        for digit in digits[:MAX_DTMF_CHARS]:
            if digit in DTMF_DIGITS:
                self.conversation.push_dtmf(digit)

    # --- engine events -> wire (the driver's pump) --------------------------------------------------
    async def on_transfer(self, event: Event) -> None:
        if not await transfer_call(self, event):
            await super().on_transfer(event)

    async def send_stop(self) -> None:
        await self.send(text_data=STOP_AUDIO)

    async def _send_frame(self, frame: bytes) -> None:
        data = base64.b64encode(frame).decode()
        await self.send(text_data='{"kind":"AudioData","audioData":{"data":"' + data + '"},"stopAudio":null}')
