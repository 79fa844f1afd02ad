"""``/api/v1/media/stream``: the telephony provider's bidirectional media stream (ACS wire format).

A transport adapter like :mod:`calls.browser` and :mod:`bridge.consumer`; the conversation itself
is the engine's. Wire -> engine: ``AudioMetadata`` sets the stream's rate (16 or 24 kHz),
``AudioData`` (base64 PCM16LE, silent frames included: the engine's VAD needs the silence timing)
goes to ``push_audio``, ``DtmfData`` digits to ``push_dtmf``. Engine -> wire: agent audio is
resampled to the stream's rate, cut into 20 ms ``AudioData`` messages and sent at real time with a
small lead; ``StopAudio`` (barge-in) drops what is queued and tells the provider to flush its own
playback; nothing of the cancelled response follows it.

The call is found by ``x-ms-call-connection-id`` in :mod:`calls.callmap` (written by the REST side
when the call was placed or answered, possibly on another worker). When
``TELEPHONY_MEDIA_AUDIENCE`` is set the provider's bearer JWT is verified first. Without a
connection id (and only then without an audience) a ``?scenario=`` simulator stream gets a new
session: test clients and local tools talk to the real adapter that way. In production without an
audience (telephony not configured: settings refuse TELEPHONY_ENDPOINT without one) there is no
provider token to check, so the stream needs the service's API key, like the browser sockets.

Close codes: 1008 bad or missing credentials / unknown call, or more messages than
``TELEPHONY_MAX_MESSAGES_PER_SECOND`` (a token bucket, :mod:`calls.ratelimit`), 1013 this process
is at ``TELEPHONY_MAX_STREAMS``, 1003 an unsupported sample rate, 1009 a message over
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
import contextlib
import json
import logging
from collections import Counter
from typing import Any

import jwt
import numpy as np
from django.conf import settings

from calls import callmap
from calls.asgi_ws import LeanWebSocket
from calls.browser import envelope, event_payload
from calls.playback import PacedPlayback
from calls.ratelimit import MessageRateLimiter
from calls.relay import RelayQueue
from calls.wsauth import authorized, query
from voiceagent.connections import tracker
from voiceagent.conversation.engine import DTMF_DIGITS, ENDED_BY_AGENT
from voiceagent.conversation.events import Event
from voiceagent.errors import UNAVAILABLE, store_name
from voiceagent.logging import session_id_var
from voiceagent.speech.audio import StreamResampler

logger = logging.getLogger("calls.media")

TRANSPORT = "phone"
WEBSOCKET_PATH = "/api/v1/media/stream"
ISSUER = "https://acscallautomation.communication.azure.com"
STREAM_RATES = (16000, 24000)
FRAME_MS = 20
LEAD_FRAMES = 3  # 60 ms ahead of real time: fills the provider's jitter buffer, barely delays barge-in
MAX_QUEUED_FRAMES = 120 * 1000 // FRAME_MS  # two minutes of agent audio; beyond it the oldest goes
MAX_TOKEN_CHARS = 16384
MAX_DTMF_CHARS = 32
START_DEADLINE_S = 10.0  # the live engine connects to the realtime API before the first word
TOKEN_DEADLINE_S = 10.0
HANG_UP_DEADLINE_S = 10.0
DRAIN_DEADLINE_S = 30.0  # the agent's goodbye still playing when it ends the call
STOP_AUDIO = json.dumps({"kind": "StopAudio", "audioData": None, "stopAudio": {}})
# what a stream dropped, per kind, in this process since it started (``GET /media/status``)
DROP_KINDS = ("malformed", "bad_audio", "bad_dtmf", "binary", "unknown_kind")
dropped_messages: Counter[str] = Counter(dict.fromkeys(DROP_KINDS, 0))

_jwks_clients: dict[str, jwt.PyJWKClient] = {}


# --- provider authentication ------------------------------------------------------------------------
def _jwks_client(url: str) -> jwt.PyJWKClient:
    """One caching key client per URL and process: the keys are fetched once an hour, not per call."""
    client = _jwks_clients.get(url)
    if client is None:
        client = _jwks_clients[url] = jwt.PyJWKClient(url, cache_keys=True, lifespan=3600, timeout=5)
    return client


def _verify(token: str, audience: str, jwks_url: str) -> None:
    """Blocking (the key fetch uses urllib): run in a thread."""
    key = _jwks_client(jwks_url).get_signing_key_from_jwt(token)
    jwt.decode(
        token,
        key.key,
        algorithms=["RS256"],
        audience=audience,
        issuer=ISSUER,
        leeway=60,
        options={"require": ["exp", "iss", "aud"]},
    )


async def verify_media_token(authorization: str | None, audience: str, jwks_url: str) -> str | None:
    """Check the provider's ``Authorization: Bearer <JWT>``; None when valid, else a reason that is
    safe to log and to send as the close reason (it never contains the token)."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return "unauthorized: Authorization: Bearer <JWT> required"
    if len(token) > MAX_TOKEN_CHARS:
        return "unauthorized: bearer token too long"
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        return "unauthorized: malformed bearer token"
    if header.get("alg") != "RS256":
        return "unauthorized: bearer token must be signed with RS256"
    try:
        async with asyncio.timeout(TOKEN_DEADLINE_S):
            await asyncio.to_thread(_verify, token, audience, jwks_url)
    except TimeoutError:
        return "unauthorized: signing keys unavailable (timeout)"
    except jwt.PyJWKClientConnectionError:
        return "unauthorized: signing keys unavailable"
    except jwt.PyJWKClientError:
        return "unauthorized: no signing key matches the token"
    except jwt.ExpiredSignatureError:
        return "unauthorized: bearer token expired"
    except jwt.InvalidAudienceError:
        return "unauthorized: bearer token has the wrong audience"
    except jwt.InvalidIssuerError:
        return "unauthorized: bearer token has the wrong issuer"
    except jwt.InvalidTokenError as exc:
        return f"unauthorized: invalid bearer token ({type(exc).__name__})"
    return None


# --- wire helpers -------------------------------------------------------------------------------------
def _field(obj: dict[str, Any], name: str) -> Any:
    """``name`` in either casing the provider's samples use (``audioData`` / ``AudioData``)."""
    value = obj.get(name)
    if value is None:
        value = obj.get(name[:1].upper() + name[1:])
    return value


def _close_reason(text: str) -> str:
    """A WebSocket close reason is limited to 123 bytes of UTF-8."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


def media_payload(event: Event) -> tuple[str, dict[str, Any]] | None:
    """Engine event -> the ``?events=1`` message of this socket (the spec's names), or None."""
    kind = event.kind
    if kind == "Transcript":
        return "transcript", {"text": event.text, "final": event.final, "speaker": event.speaker}
    if kind == "AgentResponse":
        return "agent_response", {"text": event.text, "agent": event.agent, "final": event.final}
    if kind == "Handoff":
        return "handoff", {
            "from": event.from_agent,
            "to": event.to_agent,
            "type": event.type,
            "tool": event.tool,
        }
    if kind == "ToolCall":
        return "tool_call", {
            "name": event.name,
            "args": event.arguments,
            "result": event.result,
            "duration_ms": event.duration_ms,
            "ok": event.ok,
            "agent": event.agent,
        }
    return None


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


class _Refused(Exception):
    """The stream is refused: ``code`` and ``reason`` go into the close frame."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


class MediaStreamConsumer(LeanWebSocket):
    """One phone call's media stream."""

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.connection_id: str | None = None
        self.session_id = ""
        self.conversation = None
        self.counted = False
        self.started = False  # session_started published; session_ended is owed
        self.finishing = False
        self.events_wanted = False
        self.rate = 16000
        self.frames_in = 0
        self.dropped: Counter[str] = Counter()  # this stream's share of dropped_messages
        config = settings.CONFIG
        self.limiter = MessageRateLimiter(
            config.TELEPHONY_MAX_MESSAGES_PER_SECOND, config.WEBSOCKET_RATE_BURST_S
        )
        self._warned: set[str] = set()
        self.relay = RelayQueue(self.channel_layer)  # to the dashboards, off this stream's path
        self._tasks: list[asyncio.Task] = []
        self._pump_task: asyncio.Task | None = None
        # agent audio -> wire: 20 ms AudioData messages at real time, a few frames ahead
        self._resamplers: dict[int, StreamResampler] = {}
        self._playback = PacedPlayback(
            self._send_frame,
            frame_bytes=self._frame_bytes(),
            frame_ms=FRAME_MS,
            lead_frames=LEAD_FRAMES,
            max_frames=MAX_QUEUED_FRAMES,
            pad_byte=0,
        )
        self._stopped_rid = 0  # audio of responses up to this id was cancelled (barge-in)

    def _frame_bytes(self) -> int:
        return self.rate * FRAME_MS // 1000 * 2

    # --- connection ---------------------------------------------------------------------------------
    async def connect(self) -> None:
        await self.accept()
        try:
            session_id, scenario, engine_mode = await self._admit()
        except UNAVAILABLE as exc:  # the call map or a new session needs the store: try again later
            exc = _Refused(1013, f"the {store_name(exc)} is unavailable; try again later")
            logger.warning("media stream refused (%d): %s", exc.code, exc.reason)
            await self._finish(exc.code, exc.reason, hang=False)
            return
        except _Refused as exc:
            logger.warning("media stream refused (%d): %s", exc.code, exc.reason)
            await self._finish(exc.code, exc.reason, hang=False)
            return
        self.session_id = session_id
        session_id_var.set(session_id)
        self.rate = 24000 if engine_mode == "live" else 16000  # until AudioMetadata says otherwise
        self._playback.set_frame_bytes(self._frame_bytes())
        try:
            await self._start_conversation(engine_mode, scenario)
        except Exception as exc:
            logger.warning("media stream %s: the conversation could not start: %s", session_id, exc)
            await self._finish(1011, f"the conversation could not start: {exc}", hang=True)
            return
        self.started = True
        await self._session_event("session_started", {"session_id": session_id, "transport": TRANSPORT})
        loop = asyncio.get_running_loop()
        self._pump_task = loop.create_task(self._pump(self.conversation))
        self._tasks += [self._pump_task, loop.create_task(self._playback.run())]

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
                raise _Refused(1008, problem)
        elif settings.PRODUCTION and not await authorized(self.scope):
            raise _Refused(1008, "unauthorized: send an API key (?api_key=) or set TELEPHONY_MEDIA_AUDIENCE")
        if tracker.active_count(TRANSPORT) >= config.TELEPHONY_MAX_STREAMS:
            raise _Refused(1013, "server busy: too many media streams, try again later")
        tracker.opened(TRANSPORT)
        self.counted = True
        self.connection_id = headers.get("x-ms-call-connection-id") or None
        if self.connection_id:
            info = await callmap.lookup(self.connection_id)
            if info is None:
                raise _Refused(1008, "unknown call connection")
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
            raise _Refused(1008, "missing x-ms-call-connection-id header")
        session_id, scenario = await self._simulator_session(params.get("scenario", ""))
        return session_id, scenario, runtime.conversation_mode(TRANSPORT)

    async def _simulator_session(self, name: str) -> tuple[str, str]:
        from agents_app import sessions
        from agents_app.catalog import catalog

        if not name:
            raise _Refused(1008, "missing x-ms-call-connection-id header (or ?scenario= for a simulator)")

        def create() -> tuple[str, str] | None:
            spec = catalog.scenario(name)
            if spec is None:
                return None
            session_id = sessions.new_session_id()
            sessions.create_session(session_id, spec.name, spec.start_agent, transport=TRANSPORT)
            return session_id, spec.name

        created = await sessions.db_call(create)
        if created is None:
            raise _Refused(1008, f"unknown scenario {name[:64]!r}")
        return created

    async def disconnect(self, code: int) -> None:
        """The provider hung up (or the socket dropped): end the conversation; the engine saves it."""
        self.finishing = True
        await self._end_conversation(f"media stream closed ({code})")
        pump, current = self._pump_task, asyncio.current_task()
        if pump is not None and pump is not current and not pump.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(2):
                    await asyncio.shield(pump)
        for task in self._tasks:
            if task is not current:
                task.cancel()
        await self._ended("media stream closed")
        await self.relay.close()
        logger.info(
            "media stream %s ended: %d frames in, %d inbound dropped%s, %d outbound dropped",
            self.session_id or "-",
            self.frames_in,
            self.dropped.total(),
            f" ({', '.join(f'{k} {n}' for k, n in sorted(self.dropped.items()))})" if self.dropped else "",
            self._playback.dropped,
        )

    def _release(self) -> None:
        if self.counted:
            self.counted = False
            tracker.closed(TRANSPORT)

    async def _ended(self, reason: str) -> None:
        self._release()
        if self.started:
            self.started = False
            await self._session_event("session_ended", {"reason": reason, "session_id": self.session_id})

    async def _finish(self, code: int, reason: str, *, hang: bool) -> None:
        """We end the stream: the conversation, optionally the call, then the socket."""
        if self.finishing:
            return
        self.finishing = True
        await self._end_conversation(reason)
        self._drop_playback()
        if hang and self.connection_id:
            await hang_up(self.connection_id)
        await self._ended(reason)
        await self.close(code, _close_reason(reason))
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    # --- inbound ------------------------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.finishing:
            return
        text = text_data or ""
        if bytes_data is not None:
            size = len(bytes_data)
        else:
            size = len(text) if text.isascii() else len(text.encode())
        limit = settings.CONFIG.TELEPHONY_MAX_MESSAGE_BYTES
        if size > limit:
            await self._finish(1009, f"message too big: {size} bytes, the limit is {limit}", hang=False)
            return
        if not self.limiter.allow():
            rate = f"{self.limiter.rate:g}"
            await self._finish(1008, f"too many messages: the limit is {rate} per second", hang=False)
            return
        if bytes_data is not None:
            self._drop("binary", "binary frames are not part of the media stream")
            return
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):
            message = None
        kind = message.get("kind", message.get("Kind")) if isinstance(message, dict) else None
        if not isinstance(kind, str):
            self._drop("malformed", "a message that is not {kind, ...} JSON")
            return
        kind = kind.lower()
        if kind == "audiodata":
            self._on_audio(_field(message, "audioData"))
        elif kind == "audiometadata":
            await self._on_metadata(_field(message, "audioMetadata"))
        elif kind == "dtmfdata":
            self._on_dtmf(_field(message, "dtmfData"))
        else:
            self._drop("unknown_kind", f"a message of unknown kind {kind[:40]!r}", level=logging.INFO)

    def _on_audio(self, body: Any) -> None:
        data = _field(body, "data") if isinstance(body, dict) else None
        if not isinstance(data, str):
            self._bad_audio("AudioData without data")
            return
        try:
            pcm = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            self._bad_audio("AudioData data is not base64")
            return
        if len(pcm) % 2:
            self._bad_audio("AudioData is not whole PCM16 samples")
            return
        if not pcm or self.conversation is None:
            return
        self.frames_in += 1
        self.conversation.push_audio(pcm, self.rate)  # silent frames too: the VAD times the pause

    def _bad_audio(self, what: str) -> None:
        self._drop("bad_audio", what)

    async def _on_metadata(self, body: Any) -> None:
        rate = _field(body, "sampleRate") if isinstance(body, dict) else None
        if isinstance(rate, bool) or rate not in STREAM_RATES:
            await self._finish(
                1003, f"unsupported sampleRate {str(rate)[:16]}: expected 16000 or 24000", hang=False
            )
            return
        if rate != self.rate:
            self.rate = rate
            self._resamplers.clear()
            self._playback.set_frame_bytes(self._frame_bytes())

    def _on_dtmf(self, body: Any) -> None:
        digits = _field(body, "data") if isinstance(body, dict) else None
        if not isinstance(digits, str):
            self._drop("bad_dtmf", "DtmfData without data (a string of digits)")
            return
        if self.conversation is None:
            return
        for digit in digits[:MAX_DTMF_CHARS]:
            if digit in DTMF_DIGITS:
                self.conversation.push_dtmf(digit)

    def _drop(self, kind: str, what: str, level: int = logging.WARNING) -> None:
        """An inbound message is dropped: counted, and logged the first time per stream and kind."""
        self.dropped[kind] += 1
        dropped_messages[kind] += 1
        if kind not in self._warned:
            self._warned.add(kind)
            logger.log(
                level,
                "media stream %s: %s was dropped (counted in /media/status; said once per stream)",
                self.session_id or "-",
                what,
            )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("media stream %s: %s", self.session_id or "-", message)

    # --- the conversation ---------------------------------------------------------------------------
    async def _start_conversation(self, engine_mode: str, scenario: str) -> None:
        from voiceagent.runtime import runtime

        conversation = runtime.new_conversation_for(
            engine_mode, self.session_id, scenario, transport=TRANSPORT
        )
        try:
            async with asyncio.timeout(START_DEADLINE_S):
                await conversation.start()
        except TimeoutError:
            await conversation.close("start deadline")
            raise RuntimeError(f"no start within {START_DEADLINE_S:g} s") from None
        except BaseException:
            with contextlib.suppress(Exception):
                await conversation.close("start failed")
            raise
        if conversation.closed:
            raise RuntimeError(f"it closed at once: {conversation.close_reason}")
        self.conversation = conversation

    async def _end_conversation(self, reason: str) -> None:
        conversation, self.conversation = self.conversation, None
        if conversation is not None:
            try:
                await conversation.close(reason)
            except Exception:
                logger.exception("media stream %s: closing the conversation failed", self.session_id)

    async def _pump(self, conversation) -> None:
        """Engine events -> the wire and the dashboards, in order; then end the stream as it ended."""
        try:
            async for event in conversation.events():
                kind = event.kind
                if kind == "Audio":
                    self._queue_audio(event.pcm, event.sample_rate, event.response_id)
                    continue
                if kind == "StopAudio":
                    await self._barge_in(event.response_id)
                elif kind == "StateChange" and event.state in ("listening", "ended"):
                    self._flush_audio()  # the response is complete: its last partial frame goes too
                mapped = event_payload(event)
                if mapped is not None:
                    self.relay.put(envelope(self.session_id, *mapped))
                if self.events_wanted and (wire := media_payload(event)) is not None:
                    await self._send_json(envelope(self.session_id, *wire))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("media stream %s failed while relaying", self.session_id)
            await self._finish(1011, "internal error", hang=True)
            return
        if self.finishing or conversation is not self.conversation:
            return  # we ended it
        reason = conversation.close_reason or "closed"
        if reason == ENDED_BY_AGENT:
            self._flush_audio()
            await self._playback.drained(DRAIN_DEADLINE_S)
            await self._finish(1000, "the agent ended the call", hang=True)
        else:
            logger.warning("media stream %s: the conversation ended: %s", self.session_id, reason)
            await self._finish(1011, f"the conversation ended: {reason}", hang=True)

    # --- agent audio -> wire ------------------------------------------------------------------------
    def _queue_audio(self, pcm: bytes, rate: int, response_id: int) -> None:
        if response_id and response_id <= self._stopped_rid:
            return  # audio of a cancelled response the engine had already handed over
        samples: np.ndarray | bytes = pcm
        if rate != self.rate:
            resampler = self._resamplers.get(rate)
            if resampler is None:
                try:
                    resampler = self._resamplers[rate] = StreamResampler(rate, self.rate)
                except ValueError:
                    self._warn_once("rate", f"agent audio at {rate} Hz cannot be resampled; dropped")
                    return
            samples = resampler.process(pcm)
        self._playback.push(samples)

    def _flush_audio(self) -> None:
        for resampler in self._resamplers.values():
            self._playback.push(resampler.flush())
        self._playback.flush()

    def _drop_playback(self) -> None:
        self._playback.clear()
        for resampler in self._resamplers.values():
            resampler.reset()

    async def _barge_in(self, response_id: int) -> None:
        """Nothing queued plays; the provider flushes what it holds. Dropped before sending, under the
        playback lock, so no frame of the cancelled response can follow the ``StopAudio``."""
        self._stopped_rid = max(self._stopped_rid, response_id)
        async with self._playback.lock:
            self._drop_playback()
            await self.send(text_data=STOP_AUDIO)

    async def _send_frame(self, frame: bytes) -> None:
        data = base64.b64encode(frame).decode()
        await self.send(text_data='{"kind":"AudioData","audioData":{"data":"' + data + '"},"stopAudio":null}')

    # --- outbound text ------------------------------------------------------------------------------
    async def _send_json(self, message: dict[str, Any]) -> None:
        text = json.dumps(message, default=str)
        async with self._playback.lock:
            await self.send(text_data=text)

    async def _session_event(self, name: str, payload: dict[str, Any]) -> None:
        message = envelope(self.session_id, "event", {"name": name, **payload})
        self.relay.put(message)
        if self.events_wanted:
            await self._send_json(message)
