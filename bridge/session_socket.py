"""What every AudioHook v2 socket shares, bot or monitor: :class:`AudioHookSocket`.

The bot (:mod:`bridge.consumer`, ``/contactcenter/stream``) and the receive-only monitor
(:mod:`bridge.monitor`, ``/contactcenter/monitor``) speak the same protocol over the same
transport driver (:class:`voiceagent.transport.driver.AudioSocket`). This half holds it once:

- ``connect``: the same authentication (:mod:`bridge.auth`: API key, request signature, TLS in
  production) and the per-process session limit; a refusal is a ``disconnect`` (reason
  ``unauthorized`` or ``error``), never a bare close;
- ``receive``: every text message checked by :mod:`bridge.protocol` and dispatched to
  ``_on_<type>``; a protocol error is a ``disconnect`` with reason ``error`` and an ``info``;
- the messages both answer alike: ``ping`` -> ``pong``, ``update`` -> ``updated``, ``close`` ->
  ``closed``, the client's ``error`` (a 429 backs off), its notices (paused, resumed, ...);
- the session's preparation (scenario from ``promptName``, ``inputVariables`` in memory) and its
  start within :data:`OPEN_DEADLINE_S` (the client gives up after 5 s);
- ``supportedLanguages`` for ``opened`` when asked.

A codec adds ``_on_open`` and ``_on_audio`` (and whatever else its side of the call needs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

from django.conf import settings

from bridge.auth import authenticate, header_map
from bridge.protocol import (
    AudioHookSession,
    ClientMessage,
    ProtocolError,
    is_probe,
    lenient_close,
    parse_duration,
)
from voiceagent import appconfig
from voiceagent.errors import UNAVAILABLE, store_name
from voiceagent.transport.driver import AudioSocket, Refused, StartFailed

logger = logging.getLogger(__name__)

TRANSPORT = "contactcenter"
SUBPROTOCOL = "audiohook-v2"
OPEN_DEADLINE_S = 4.0  # the client wants `opened` within 5 s of its `open`
CLOSE_GRACE_S = 5.0  # after our `disconnect`, how long the client has to send `close`
MAX_BINARY_BYTES = 64000  # 4 s of stereo mu-law; the client sends ~200 ms frames
MAX_VARIABLES = 100
MAX_VARIABLE_CHARS = 2000
PROMOTED = {
    "phoneNumber": "caller_phone",
    "emailAddress": "caller_email",
    "promptName": "contactcenter_prompt",
}
DEFAULT_SCENARIO = "default"


class SessionStartFailed(Exception):
    """The session cannot start; the message goes into the `disconnect` info."""


class AudioHookSocket(AudioSocket):
    """One AudioHook session's protocol half (a codec subclass adds its side of the call)."""

    transport = TRANSPORT
    label = "AudioHook"
    log = logger
    busy_reason = "the server is at its session limit; try again later"
    limit_setting: ClassVar[str] = "CONTACTCENTER_MAX_SESSIONS"  # sessions per process
    start_failed: ClassVar[dict[str, str]] = {}  # the `disconnect` info by StartFailed stage

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.protocol: AudioHookSession | None = None
        self.probe = False
        self.opened = False  # `opened` sent
        self.pong_sent = False  # text messages may flow (strict clients check the seq before it)
        self.frames_in = 0
        self.frames_ignored = 0

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
            logger.warning("%s connection refused: %s", self.label, result.reason)
            await self._disconnect("unauthorized", result.reason)
            return
        limit = getattr(config, self.limit_setting)
        try:
            self.take_slot(limit)
        except Refused as exc:
            logger.warning("%s connection refused: %d sessions open", self.label, limit)
            await self._disconnect("error", exc.reason)

    async def ended(self, code: int) -> None:
        if self.session_id and not self.probe and self.opened:
            self.publish("event", {"name": "session_ended", "reason": "contact center closed"})
        logger.info(
            "%s session %s ended: %d audio frames in, %d ignored, %d outbound chunks dropped",
            self.label,
            self.session_id or "-",
            self.frames_in,
            self.frames_ignored,
            self.playback.dropped if self.playback is not None else 0,
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
        """A binary frame (the codec's)."""
        self.frames_ignored += 1

    def audio_frame_refused(self, data: bytes) -> str | None:
        """Why a binary frame ends the session (too big), else None."""
        if len(data) > MAX_BINARY_BYTES:
            return f"audio frame of {len(data)} bytes exceeds {MAX_BINARY_BYTES}"
        return None

    async def _on_ping(self, message: ClientMessage) -> None:
        await self._message("pong", {})
        self.pong_sent = True

    async def _on_update(self, message: ClientMessage) -> None:
        language = message.parameters.get("language")
        if isinstance(language, str):
            logger.info("AudioHook %s: language update to %s", self.session_id, language[:20])
        await self._message("updated", {})

    async def _on_close(self, message: ClientMessage) -> None:
        reason = message.parameters.get("reason")
        logger.info("AudioHook %s: client closed (%s)", self.session_id, str(reason)[:20])
        self.closing = True  # the client ends it: no `disconnect` of ours follows its `close`
        if self.playback is not None:
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
        if code == 429 and retry and self.playback is not None:  # back off, never drop the session
            self.playback.paused_until = time.monotonic() + min(retry, 30.0)

    async def _on_paused(self, message: ClientMessage) -> None:
        """Client notices about its own audio (pause/resume, audio it dropped, our playback): logged
        under their own name, with the durations a ``resumed``/``discarded`` carries."""
        self._log_notice(message)

    _on_resumed = _on_discarded = _on_playback_started = _on_playback_completed = _on_paused

    def _log_notice(self, message: ClientMessage) -> None:
        params = message.parameters
        spans = ", ".join(f"{key} {str(params[key])[:20]}" for key in ("start", "discarded") if key in params)
        logger.info("AudioHook %s: %s%s", self.session_id, message.type, f" ({spans})" if spans else "")

    # --- the session --------------------------------------------------------------------------------
    async def _open_media(
        self, message: ClientMessage, select: Callable[[Any], dict[str, Any] | None], refusal: str
    ) -> dict[str, Any] | None:
        """An ``open``'s checks: the organization, the session id, the media ``select`` takes (a
        protocol error saying ``refusal`` when none). The probe is answered here (None then)."""
        assert self.protocol is not None
        params = message.parameters
        self.protocol.check_open(params)
        media = select(params.get("media"))
        self.session_id = self.protocol.id
        if is_probe(params):
            self.probe = True
            await self._message("opened", {"media": [media] if media else [], **languages(params)})
            self.opened = True
            return None
        if media is None:
            raise ProtocolError(refusal)
        return media

    async def _start(self, mode: str, params: dict[str, Any]) -> bool:
        """Prepare the session and start its conversation in ``mode``; False (the client has its
        ``disconnect``) when it cannot start."""
        try:
            variables = input_variables(params.get("inputVariables"))
            try:
                scenario = await self._prepare_session(variables, params)
            except UNAVAILABLE as exc:  # the session store is down: a clear refusal, not a traceback
                raise SessionStartFailed(f"the {store_name(exc)} is unavailable; try again later") from None
            try:
                await self.start_conversation(mode, scenario, deadline=OPEN_DEADLINE_S)
            except StartFailed as exc:
                raise SessionStartFailed(self.start_failed[exc.stage].format(exc.detail)) from None
        except SessionStartFailed as exc:
            logger.warning("%s %s could not start: %s", self.label, self.session_id, exc)
            await self._disconnect("error", str(exc))
            return False
        return True

    async def _opened(self, media: dict[str, Any], params: dict[str, Any], **started: Any) -> None:
        """The conversation runs: ``opened``, the dashboards told, its events pumped."""
        await self._message("opened", {"media": [media], **languages(params)})
        self.opened = True
        event = {"name": "session_started", "session_id": self.session_id, "transport": TRANSPORT}
        self.publish("event", {**event, **started})
        self.run_pump()

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
                raise SessionStartFailed(f"no scenario {hint or DEFAULT_SCENARIO!r} to run")
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

    # --- outbound text ------------------------------------------------------------------------------
    async def _message(self, kind: str, parameters: dict[str, Any]) -> None:
        assert self.protocol is not None
        await self.send(text_data=self.protocol.message(kind, parameters))

    async def _disconnect(
        self, reason: str, info: str, output_variables: dict[str, str] | None = None
    ) -> None:
        """Tell the client the session is over; it answers with `close` (else the socket closes).
        ``output_variables``: a string map for the contact centre's flow (a transfer to a person)."""
        if not await self.stop(f"disconnect: {reason}"):
            return
        parameters: dict[str, Any] = {"reason": reason, "info": info[:500]}
        if output_variables:
            parameters["outputVariables"] = output_variables
        await self._message("disconnect", parameters)
        self.spawn(self._close_after_grace())

    async def _close_after_grace(self) -> None:
        await asyncio.sleep(CLOSE_GRACE_S)
        await self.close(1000, "disconnected")


def languages(params: dict[str, Any]) -> dict[str, list[str]]:
    """``supportedLanguages`` for ``opened`` when the ``open`` asked for it (``true``): the one
    language this service is configured to listen in (``STT_LANGUAGE``, what live mode uses too)."""
    if params.get("supportedLanguages") is not True:
        return {}
    language = appconfig.get("STT_LANGUAGE")
    return {"supportedLanguages": [language] if language else []}


def input_variables(raw: Any) -> dict[str, str]:
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
