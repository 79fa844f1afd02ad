"""The contact-center AudioHook v2 WebSocket (``/api/v1/contactcenter/stream``): its wire codec.

The AudioHook half of the socket. The transport driver
(:class:`voiceagent.transport.driver.AudioSocket`) holds the rest: the session slot, starting,
pumping and ending the conversation, paced playback, the dashboard relay. The protocol's rules
are :mod:`bridge.protocol`'s.

Wire -> engine: the ``open`` starts a live (speech-to-speech) conversation (the bridge always runs
on the realtime voice API), binary frames are mu-law 8 kHz caller audio (the external channel of
the negotiated media), ``dtmf`` digits go to ``push_dtmf``. Engine -> wire: agent audio is
downsampled to 8 kHz, mu-law encoded and sent in paced 250 ms frames; ``StopAudio`` (barge-in)
drops what is queued and sends the ``barge_in`` event so the client flushes its playback.

Session lifecycle, as the protocol wants it:

- ``open`` -> the realtime connection is made first (bounded by :data:`OPEN_DEADLINE_S`, the
  client gives up after 5 s), then ``opened``. If it cannot be made the client gets a
  ``disconnect`` (reason ``error``) right after its ``open`` and the socket closes.
- The connection probe (null conversation id) gets ``opened`` and later ``closed``, nothing else.
- Protocol errors (bad seq, wrong id, oversized or malformed messages) -> ``disconnect`` with
  reason ``error`` and an ``info``; failed authentication -> reason ``unauthorized``.
- ``close`` from the client -> ``closed`` and the socket ends; the conversation ends with it.
- The agent ending the conversation -> ``disconnect`` reason ``completed`` once the last audio
  has gone out; the realtime API dropping -> reason ``error``.

No text message goes out between ``opened`` and the first ``pong`` (strict clients check the
sequence there): a barge-in in that window only clears our queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from bridge.auth import authenticate, header_map
from bridge.protocol import (
    AudioHookSession,
    ClientMessage,
    ProtocolError,
    is_probe,
    lenient_close,
    parse_duration,
    select_media,
)
from voiceagent import appconfig
from voiceagent.conversation.core import DTMF_DIGITS
from voiceagent.conversation.events import Event
from voiceagent.errors import UNAVAILABLE, store_name
from voiceagent.speech.audio import MulawStreamEncoder, ulaw_decode
from voiceagent.transport.driver import AudioSocket, Refused, StartFailed
from voiceagent.transport.playback import PacedPlayback

logger = logging.getLogger(__name__)

TRANSPORT = "contactcenter"
SUBPROTOCOL = "audiohook-v2"
OPEN_DEADLINE_S = 4.0  # the client wants `opened` within 5 s of its `open`
CLOSE_GRACE_S = 5.0  # after our `disconnect`, how long the client has to send `close`
CHUNK_MS = 250  # outbound pacing (spec)
CHUNK_BYTES = 8000 * CHUNK_MS // 1000  # mu-law: one byte per sample
MAX_QUEUED_CHUNKS = 4 * 120  # two minutes of agent audio waiting to be played; the oldest goes
MAX_BINARY_BYTES = 64000  # 4 s of stereo mu-law; the client sends ~200 ms frames
MAX_VARIABLES = 100
MAX_VARIABLE_CHARS = 2000
PROMOTED = {
    "phoneNumber": "caller_phone",
    "emailAddress": "caller_email",
    "promptName": "contactcenter_prompt",
}
DEFAULT_SCENARIO = "default"
START_FAILED = {  # how the `disconnect` info words a conversation that could not start, by stage
    "create": "the realtime voice API is not available: {}",
    "deadline": f"the realtime voice API did not answer within {OPEN_DEADLINE_S:g} s",
    "closed": "the realtime voice API is unreachable",
    "start": "the realtime voice API could not be reached: {}",
}


class _StartFailed(Exception):
    """The session cannot start; the message goes into the `disconnect` info."""


class AudioHookConsumer(AudioSocket):
    """One AudioHook session."""

    transport = TRANSPORT
    label = "AudioHook"
    log = logger
    busy_reason = "the server is at its session limit; try again later"

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.protocol: AudioHookSession | None = None
        self.probe = False
        self.opened = False  # `opened` sent
        self.pong_sent = False  # text messages may flow (see the module docstring)
        self.channel_index, self.channel_count = 0, 1
        self.frames_in = 0
        self.frames_ignored = 0
        # agent audio -> mu-law 8 kHz in paced 250 ms chunks, one of lead; a response's last chunk
        # goes out short (mu-law needs no padding)
        self.playback = PacedPlayback(
            self._send_chunk,
            frame_bytes=CHUNK_BYTES,
            frame_ms=CHUNK_MS,
            lead_frames=1,
            max_frames=MAX_QUEUED_CHUNKS,
            pad_byte=None,
            encoder=MulawStreamEncoder,
            mulaw=True,
        )

    # --- connection ---------------------------------------------------------------------------------
    async def connect(self) -> None:
        headers = header_map(self.scope.get("headers", []))
        self.protocol = AudioHookSession(
            headers.get("audiohook-session-id"), headers.get("audiohook-organization-id")
        )
        offered = self.scope.get("subprotocols") or []
        await self.accept(SUBPROTOCOL if SUBPROTOCOL in offered else None)  # never one it did not offer
        config = settings.CONFIG
        result = authenticate(
            headers,
            path=(self.scope.get("raw_path") or self.scope.get("path", "").encode()).decode("latin-1"),
            query_string=self.scope.get("query_string", b"").decode("latin-1"),
            scheme=self.scope.get("scheme", "ws"),
            api_key=config.CONTACTCENTER_API_KEY,
            client_secret=config.CONTACTCENTER_CLIENT_SECRET,
            require_tls=config.production,
            trust_forwarded_proto=True,  # as Django's SECURE_PROXY_SSL_HEADER: a TLS proxy in front
        )
        if not result.ok:
            logger.warning("AudioHook connection refused: %s", result.reason)
            await self._disconnect("unauthorized", result.reason)
            return
        try:
            self.take_slot(config.CONTACTCENTER_MAX_SESSIONS)
        except Refused as exc:
            logger.warning(
                "AudioHook connection refused: %d sessions open", config.CONTACTCENTER_MAX_SESSIONS
            )
            await self._disconnect("error", exc.reason)

    async def ended(self, code: int) -> None:
        if self.session_id and not self.probe and self.opened:
            self.publish("event", {"name": "session_ended", "reason": "contact center closed"})
        logger.info(
            "AudioHook session %s ended: %d audio frames in, %d ignored, %d outbound chunks dropped",
            self.session_id or "-",
            self.frames_in,
            self.frames_ignored,
            self.playback.dropped,
        )

    # --- inbound ------------------------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if bytes_data is not None:
            await self._on_audio(bytes_data)
            return
        if text_data is None or self.protocol is None:
            return
        try:
            message = self.protocol.parse(text_data)
            if self.closing and message.type != "close":
                return
            handler = getattr(self, f"_on_{message.type}", None)
            if handler is None:
                logger.info("AudioHook %s: ignoring message type %r", self.session_id, message.type[:40])
                return
            await handler(message)
        except ProtocolError as exc:
            if self.closing:  # our disconnect is out: only the client's close still matters
                if (close := lenient_close(text_data)) is not None:
                    await self._on_close(close)
                return
            logger.warning("AudioHook %s: protocol error: %s", self.session_id or "-", exc.info)
            await self._disconnect(exc.reason, exc.info)

    async def _on_audio(self, data: bytes) -> None:
        if self.conversation is None or self.closing:
            self.frames_ignored += 1  # before `opened` (or after the end): nothing to feed
            return
        if len(data) > MAX_BINARY_BYTES:
            info = f"audio frame of {len(data)} bytes exceeds {MAX_BINARY_BYTES}"
            logger.warning("AudioHook %s: %s", self.session_id, info)
            await self._disconnect("error", info)
            return
        if self.channel_count > 1:  # interleaved per sample in the negotiated channel order
            usable = len(data) - len(data) % self.channel_count
            data = data[self.channel_index : usable : self.channel_count]
        if not data:
            return  # empty frames are allowed
        self.frames_in += 1
        self.conversation.push_audio(ulaw_decode(data).tobytes(), 8000)

    async def _on_open(self, message: ClientMessage) -> None:
        assert self.protocol is not None
        params = message.parameters
        self.protocol.check_open(params)
        media = select_media(params.get("media"))
        self.session_id = self.protocol.id
        if is_probe(params):
            self.probe = True
            await self._message("opened", {"media": [media] if media else [], **_languages(params)})
            self.opened = True
            return
        if media is None:
            raise ProtocolError(
                "the bridge takes PCMU at 8000 Hz with the external channel; none was offered"
            )
        self.channel_count = len(media["channels"])
        self.channel_index = media["channels"].index("external")
        variables = _input_variables(params.get("inputVariables"))
        try:
            await self._start(variables, params)
        except _StartFailed as exc:
            logger.warning("AudioHook %s could not start: %s", self.session_id, exc)
            await self._disconnect("error", str(exc))
            return
        await self._message("opened", {"media": [media], **_languages(params)})
        self.opened = True
        self.publish(
            "event", {"name": "session_started", "session_id": self.session_id, "transport": TRANSPORT}
        )
        self.run_pump()
        self.spawn(self.playback.run())

    async def _on_ping(self, message: ClientMessage) -> None:
        await self._message("pong", {})
        self.pong_sent = True

    async def _on_update(self, message: ClientMessage) -> None:
        language = message.parameters.get("language")
        if isinstance(language, str):
            logger.info("AudioHook %s: language update to %s", self.session_id, language[:20])
        await self._message("updated", {})

    async def _on_dtmf(self, message: ClientMessage) -> None:
        digit = message.parameters.get("digit")
        if not isinstance(digit, str) or digit not in DTMF_DIGITS:
            raise ProtocolError(f"dtmf digit {str(digit)[:8]!r} is not one of 0-9 * # A-D")
        if self.conversation is not None:
            self.conversation.push_dtmf(digit)

    async def _on_close(self, message: ClientMessage) -> None:
        reason = message.parameters.get("reason")
        logger.info("AudioHook %s: client closed (%s)", self.session_id, str(reason)[:20])
        self.closing = True  # the client ends it: no `disconnect` of ours follows its `close`
        self.playback.drop()
        await self.end_conversation("contact center closed the session")
        await self._message("closed", {})
        await self.close(1000, "closed")

    async def _on_error(self, message: ClientMessage) -> None:
        params = message.parameters
        code = params.get("code")
        logger.warning(
            "AudioHook %s: client error %s: %s", self.session_id, code, str(params.get("message"))[:200]
        )
        retry = parse_duration(params.get("retryAfter"))
        if code == 429 and retry:  # back off, never drop the session
            self.playback.paused_until = time.monotonic() + min(retry, 30.0)

    async def _on_paused(self, message: ClientMessage) -> None:
        """Client notices about its own audio (pause/resume, audio it dropped, our playback): logged
        under their own name, with the durations a ``resumed``/``discarded`` carries."""
        params = message.parameters
        spans = ", ".join(f"{key} {str(params[key])[:20]}" for key in ("start", "discarded") if key in params)
        logger.info("AudioHook %s: %s%s", self.session_id, message.type, f" ({spans})" if spans else "")

    _on_resumed = _on_discarded = _on_playback_started = _on_playback_completed = _on_paused

    # --- the conversation ---------------------------------------------------------------------------
    async def _start(self, variables: dict[str, str], params: dict[str, Any]) -> None:
        from voiceagent.runtime import runtime

        try:
            scenario = await self._prepare_session(variables, params)
        except UNAVAILABLE as exc:  # the session store is down: a clear refusal, not a traceback
            raise _StartFailed(f"the {store_name(exc)} is unavailable; try again later") from None
        try:
            await self.start_conversation(
                runtime.conversation_mode(TRANSPORT), scenario, deadline=OPEN_DEADLINE_S
            )
        except StartFailed as exc:
            raise _StartFailed(START_FAILED[exc.stage].format(exc.detail)) from None

    async def _prepare_session(self, variables: dict[str, str], params: dict[str, Any]) -> str:
        """Create the session: scenario from ``promptName`` when it names one, the input variables in
        working memory (verbatim, plus the promoted names agents use); a demo caller profile made for
        this session id before it opened (``POST /profiles/generate``) stays its caller."""
        from agents_app import sessions
        from agents_app.catalog import catalog
        from agents_app.profiles import profile_memory
        from agents_app.sessions import db_call

        session_id = self.session_id
        hint = variables.get("promptName", "").strip()

        def prepare() -> str:
            spec = catalog.scenario(hint) if hint else None
            spec = spec or catalog.scenario(DEFAULT_SCENARIO)
            if spec is None:
                raise _StartFailed(f"no scenario {hint or DEFAULT_SCENARIO!r} to run")
            earlier = sessions.load_state(session_id)
            state = sessions.create_session(session_id, spec.name, spec.start_agent, transport=TRANSPORT)
            caller = earlier.memory.get("caller_profile") if earlier is not None else None
            if isinstance(caller, dict):  # a demo caller made for this session id before it opened
                state.memory.update(profile_memory(caller))
            state.memory.update(variables)
            for name, promoted in PROMOTED.items():
                if variables.get(name):
                    state.memory[promoted] = variables[name]
            state.memory["contactcenter"] = {
                "conversation_id": params.get("conversationId"),
                "organization_id": params.get("organizationId"),
                "language": params.get("language") if isinstance(params.get("language"), str) else None,
            }
            sessions.save_state(state)
            return spec.name

        return await db_call(prepare)

    # --- engine events -> wire (the driver's pump) --------------------------------------------------
    async def on_event(self, event: Event) -> None:
        kind = event.kind
        if kind == "StopAudio":
            self.playback.drop()
            if self.pong_sent:
                await self._message("event", {"entities": [{"type": "barge_in", "data": {}}]})
        elif kind == "StateChange" and event.state == "listening":
            self.playback.finish_response()  # the response is complete: its last partial chunk goes too
        self.relay_event(event)

    async def agent_ended(self) -> None:
        await self._disconnect("completed", "the agent ended the conversation")

    async def conversation_lost(self, reason: str | None) -> None:
        await self._disconnect("error", f"the conversation ended: {reason}")

    async def pump_failed(self, conversation: Any) -> None:
        await self.conversation_over(conversation)  # as if it had ended: the peer hears why

    async def _send_chunk(self, chunk: bytes) -> None:
        await self.send(bytes_data=chunk)

    # --- outbound text ------------------------------------------------------------------------------
    async def _message(self, kind: str, parameters: dict[str, Any]) -> None:
        assert self.protocol is not None
        await self.send(text_data=self.protocol.message(kind, parameters))

    async def _disconnect(self, reason: str, info: str) -> None:
        """Tell the client the session is over; it answers with `close` (else the socket closes)."""
        if not await self.stop(f"disconnect: {reason}"):
            return
        await self._message("disconnect", {"reason": reason, "info": info[:500]})
        self.spawn(self._close_after_grace())

    async def _close_after_grace(self) -> None:
        await asyncio.sleep(CLOSE_GRACE_S)
        await self.close(1000, "disconnected")


def _languages(params: dict[str, Any]) -> dict[str, list[str]]:
    """``supportedLanguages`` for ``opened`` when the ``open`` asked for it (``true``): the one
    language this service is configured to listen in (``STT_LANGUAGE``, what live mode uses too)."""
    if params.get("supportedLanguages") is not True:
        return {}
    language = appconfig.get("STT_LANGUAGE")
    return {"supportedLanguages": [language] if language else []}


def _input_variables(raw: Any) -> dict[str, str]:
    """``inputVariables`` as strings (a string map per the protocol); bounded in count and size."""
    if not isinstance(raw, dict):
        return {}
    clean: dict[str, str] = {}
    for key, value in list(raw.items())[:MAX_VARIABLES]:
        if not isinstance(key, str) or not key or len(key) > 200:
            continue
        if isinstance(value, (str, int, float, bool)):
            clean[key] = str(value)[:MAX_VARIABLE_CHARS]
    return clean
