"""``/api/v1/browser/conversation``: the browser's wire codec over the transport driver.

Wire format (CONTRACTS "WebSocket envelope"): JSON ``{"type", "payload"}`` both ways (server
messages add ``session_id`` and ``ts``); binary frames are raw PCM16LE mono at the session's
input rate. This module only translates (messages -> engine calls, engine events -> messages);
admission, limits, the idle timeout, the relay and the conversation's lifecycle are the driver's
(:class:`voiceagent.transport.driver.AudioSocket`), the conversation itself is the engine's.

Limits, each answered without disturbing other sessions: a message larger than
``BROWSER_MAX_MESSAGE_BYTES`` closes with 1009; more than ``BROWSER_MAX_MESSAGES_PER_SECOND``
(sustained; a token bucket of ``WEBSOCKET_RATE_BURST_S``, :mod:`voiceagent.transport.ratelimit`)
closes with 1008; more than ``BROWSER_MAX_CONNECTIONS`` conversations in this process are refused
with 1013 (try again later); ``BROWSER_IDLE_TIMEOUT_S`` without a message ends the session cleanly
(1000). Malformed messages get an ``error`` message and the socket stays open.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from typing import Any

import numpy as np
from django.conf import settings

from agents_app.sessions import db_call
from calls.browser_config import ClientError, SessionConfig, sample_rate
from calls.wsauth import query, refused
from voiceagent.conversation.core import DTMF_DIGITS
from voiceagent.conversation.events import Event
from voiceagent.conversation.session import valid_session_id
from voiceagent.errors import UNAVAILABLE
from voiceagent.logging import session_id_var
from voiceagent.speech.audio import StreamResampler, frame_level
from voiceagent.transport.driver import AudioSocket, Refused, StartFailed
from voiceagent.transport.envelope import envelope, event_payload
from voiceagent.transport.relay import AudioRelayFlag

logger = logging.getLogger("calls.browser")

CONTROL_ACTIONS = ("start", "stop", "pause", "resume", "reset", "played")
MAX_TEXT_CHARS = 2000
MAX_DTMF_CHARS = 32  # one keypad entry: a code, an account number; as the phone media stream allows
RESTART_AFTER_S = 5.0  # a conversation that ended on its own starts again on audio no sooner than this


class BrowserConversationConsumer(AudioSocket):
    transport = "browser"
    label = "browser session"
    log = logger
    busy_reason = "server busy: too many conversations, try again later"
    gone_reason = "disconnected"

    async def connect(self) -> None:
        config = settings.CONFIG
        self.limit_messages(
            config.BROWSER_MAX_MESSAGE_BYTES,
            config.BROWSER_MAX_MESSAGES_PER_SECOND,
            config.WEBSOCKET_RATE_BURST_S,
        )
        self.config = SessionConfig()
        self.resamplers: dict[tuple[int, int], StreamResampler] = {}
        self.last_input: bytes = b""
        self.last_output: bytes | None = None
        self.levels_shown: tuple[float, float] | None = None
        self.levels_sent = 0.0
        # read once: settings.CONFIG costs a lazy-object lookup, too much per 20 ms frame x hundreds
        per_second = config.BROWSER_LEVELS_PER_SECOND
        self.levels_interval = 1.0 / per_second if per_second else None
        self.seq = 0
        self.store_warned = False
        self.store_error_at = -1.0
        self.restart_at = 0.0  # audio before this does not start a conversation again
        # a start that failed (no realtime API, an unknown agent) is not retried by each audio frame
        # (a WARNING and an error 50 times a second): only by the client's next explicit step
        self.start_refused = False
        await self.accept()
        try:
            if reason := await refused(self.scope):
                raise Refused(1008, reason)
            requested = query(self.scope).get("session_id")
            if requested is not None and not valid_session_id(requested):
                raise Refused(1008, "invalid session_id: 1-128 characters of A-Z a-z 0-9 _ . : -")
            self.take_slot(config.BROWSER_MAX_CONNECTIONS)
        except Refused as exc:
            await self.close(code=exc.code, reason=exc.reason)
            return
        from agents_app.sessions import new_session_id

        self._begin_session(requested or new_session_id())
        self.watch_idle(config.BROWSER_IDLE_TIMEOUT_S)
        await self.send_message(
            "event", {"name": "session_started", "session_id": self.session_id, "transport": self.transport}
        )

    def _begin_session(self, session_id: str) -> None:
        self.session_id = session_id
        session_id_var.set(session_id)
        self.audio_flag = AudioRelayFlag(session_id)

    async def ended(self, code: int) -> None:
        self.relay.end_if_live(self.session_id, f"disconnected ({code})")

    # --- inbound ------------------------------------------------------------------------------------
    async def decode(self, text_data: str | None, bytes_data: bytes | None) -> None:
        try:
            if bytes_data is not None:
                await self._audio(bytes_data, self.config.input_rate)
            else:
                await self._json(text_data or "")
        except ClientError as exc:
            await self.send_message("error", {"code": exc.code, "message": str(exc)})
        except UNAVAILABLE as exc:  # the session cache or database is down: the message fails, not the socket
            await self._store_unavailable(exc)

    async def _store_unavailable(self, exc: Exception) -> None:
        """A message that needed the shared store (a conversation to start, overrides to save) while
        it is down: an ``error`` at most once a second and one WARNING per socket; a conversation
        already running goes on (issue 12: this closed the socket with 1011)."""
        if not self.store_warned:
            self.store_warned = True
            why = f"{type(exc).__name__}: {exc}"
            logger.warning("session store unavailable (%s); the socket stays open", why)
        now = time.monotonic()
        if now - self.store_error_at >= 1.0:
            self.store_error_at = now
            message = "the session store is unavailable; try again in a few seconds"
            await self.send_message("error", {"code": "store_unavailable", "message": message})

    async def _json(self, text: str) -> None:
        try:
            message = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise ClientError("bad_json", "message is not valid JSON") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise ClientError("bad_message", 'expected {"type": "<type>", "payload": {...}}')
        payload = message.get("payload", {})
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise ClientError("bad_message", "payload must be an object")
        handler = {
            "audio_data": self._audio_data,
            "control": self._control,
            "config": self._config,
            "dtmf": self._dtmf,
            "text": self._text,
        }.get(message["type"])
        if handler is None:
            raise ClientError(
                "unknown_type",
                f"unknown message type {message['type'][:40]!r}; expected "
                "audio_data, control, config, dtmf or text",
            )
        await handler(payload)

    async def _audio_data(self, payload: dict[str, Any]) -> None:
        data = payload.get("data")
        if not isinstance(data, str) or not data:
            raise ClientError("bad_audio", "audio_data needs data: base64 PCM16LE")
        try:
            pcm = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ClientError("bad_audio", "audio_data.data is not valid base64") from None
        rate = payload.get("sample_rate", self.config.input_rate)
        await self._audio(pcm, sample_rate(rate, "sample_rate"))

    async def _audio(self, pcm: bytes, rate: int) -> None:
        if len(pcm) % 2:
            raise ClientError("bad_audio", "PCM16 audio must have an even number of bytes")
        if not pcm:
            return
        if self._ended():
            if time.monotonic() < self.restart_at:
                return  # the last one just ended on its own: a live microphone must not hammer a dead API
            if self.start_refused:
                return  # the client was told (start_failed); its microphone must not retry per frame
            await self._start_conversation()
        if self.conversation is not None:
            self.push_caller(pcm, rate)
        self.last_input = pcm
        if self._levels_due():
            await self._send_levels()

    async def _text(self, payload: dict[str, Any]) -> None:
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ClientError("bad_text", "text needs a non-empty text field")
        if len(text) > MAX_TEXT_CHARS:
            raise ClientError("bad_text", f"text is limited to {MAX_TEXT_CHARS} characters")
        if "\x00" in text:  # as the HTTP API refuses it (voiceagent.parsers): no NUL in a history
            raise ClientError("bad_text", "text must not contain NUL characters")
        if self._ended():
            await self._start_conversation()
        if self.conversation is not None:
            await self.conversation.push_text(text)

    async def _dtmf(self, payload: dict[str, Any]) -> None:
        """Keypad digits (the web page's keypad): each goes to ``push_dtmf`` as a phone's tone would,
        so the engine gathers them until ``#`` or a short pause into one "Keypad entry: N" turn."""
        digits = payload.get("digits")
        if not isinstance(digits, str) or not 1 <= len(digits) <= MAX_DTMF_CHARS:
            raise ClientError("bad_dtmf", f"dtmf needs digits: 1-{MAX_DTMF_CHARS} keypad characters")
        bad = sorted({ch for ch in digits if ch not in DTMF_DIGITS})
        if bad:
            shown = "".join(bad)[:8]
            raise ClientError("bad_dtmf", f"dtmf.digits may hold only 0-9 * # A B C D, not {shown!r}")
        if self._ended():
            await self._start_conversation()
        if self.conversation is not None:
            for digit in digits:
                self.conversation.push_dtmf(digit)

    def _ended(self) -> bool:
        """No conversation, or it has ended on its own and its events are still being sent out: the
        caller's next input starts a new one (input pushed to an ended one would vanish)."""
        return self.conversation is None or self.conversation.closed

    async def _control(self, payload: dict[str, Any]) -> None:
        action = payload.get("action")
        if action not in CONTROL_ACTIONS:
            raise ClientError("bad_control", f"control.action must be one of {', '.join(CONTROL_ACTIONS)}")
        if action == "start":
            if self._ended():
                await self._start_conversation()
        elif action == "stop":
            await self.end_conversation("stopped by the client")
        elif action in ("pause", "resume"):
            if self.conversation is None:
                raise ClientError("not_started", f"nothing to {action}: the conversation has not started")
            await (self.conversation.pause() if action == "pause" else self.conversation.resume())
        elif action == "reset":
            await self._reset()
        elif action == "played" and self.conversation is not None:
            self.conversation.played_out()  # the client heard every audio message already

    async def _config(self, payload: dict[str, Any]) -> None:
        restart = await self.config.apply(self.session_id, payload)
        if restart and self.conversation is not None:
            await self.end_conversation("reconfigured")
            await self._start_conversation()

    # --- conversation ---------------------------------------------------------------------------
    async def _start_conversation(self) -> None:
        from voiceagent.runtime import runtime

        config = self.config
        scenario = await config.prepare(self.session_id)
        try:
            mode = runtime.conversation_mode("browser", config.mode)
            await self.start_conversation(mode, scenario, agent=config.agent, refuse_closed=False)
        except (ValueError, StartFailed) as exc:  # e.g. providers not started, agent unknown
            self.start_refused = True
            logger.warning("could not start conversation: %s", exc)
            raise ClientError("start_failed", f"the conversation could not start: {exc}") from None
        self.start_refused = False
        self.run_pump()

    async def _reset(self) -> None:
        from agents_app.views import reset_session

        await self.end_conversation("reset")
        old = self.session_id
        new = await db_call(reset_session, old)
        await self.send_message("event", {"name": "session_ended", "reason": "reset", "session_id": old})
        if new is None:
            from agents_app.sessions import new_session_id

            new = {"session_id": new_session_id()}
        self._begin_session(new["session_id"])
        await self.send_message(
            "event",
            {
                "name": "session_started",
                "session_id": self.session_id,
                "previous_session_id": old,
                "transport": self.transport,
            },
        )

    # --- engine events -> messages (the driver's pump) --------------------------------------------
    async def on_event(self, event: Event) -> None:
        if event.kind == "StateChange" and event.state == "ended":
            return  # told as session_ended, or not at all when it starts again
        mapped = event_payload(event)
        if mapped is not None:
            await self.send_message(*mapped)

    async def agent_ended(self) -> None:
        self.conversation = None
        await self.send_message("event", {"name": "session_ended", "reason": "conversation ended"})
        await self.finish(1000, "conversation ended")

    async def conversation_lost(self, reason: str | None) -> None:
        # The realtime API refused or dropped the connection (the caller was sent its error). The
        # socket stays; the caller's next text, control start or (after a pause) audio starts the
        # conversation again, resuming the session and its history.
        logger.info("conversation ended (%s); the next input starts it again", reason)
        self.conversation = None
        self.restart_at = time.monotonic() + RESTART_AFTER_S

    async def pump_failed(self, conversation: Any) -> None:
        await self.send_message("error", {"code": "internal", "message": "internal error; the session ends"})
        await self.finish(1011, "internal error")

    async def on_idle(self, timeout: float) -> None:
        await self.end_conversation("idle timeout")
        await self.send_message("event", {"name": "session_ended", "reason": "idle timeout"})
        await self.finish(1000, f"idle for {timeout:g} s")

    async def on_audio(self, event: Event) -> None:
        pcm, output_rate = event.pcm, self.config.output_rate
        if event.sample_rate != output_rate:
            key = (event.sample_rate, output_rate)
            resampler = self.resamplers.get(key)
            if resampler is None:
                resampler = self.resamplers[key] = StreamResampler(*key)
            samples = resampler.process(pcm)
            pcm = samples.astype("<i2").tobytes()
        else:
            samples = np.frombuffer(pcm, dtype="<i2")  # a view: no copy on the common path
        if not len(samples):
            return
        self.seq += 1
        self.last_output = pcm
        await self._send_audio(base64.b64encode(pcm).decode(), output_rate)
        if self._levels_due():
            await self._send_levels()

    async def _send_audio(self, data: str, rate: int) -> None:
        """An ``audio`` message, its JSON written directly: ``json.dumps`` scans every character of
        the base64 payload for escapes (~25 us per 100 ms chunk, hundreds of sockets at once) and
        base64 needs none. The same text ``send_message`` would send."""
        if self.closing:
            return
        ts = round(time.time(), 3)
        session = json.dumps(self.session_id)
        await self.send(
            text_data=f'{{"type": "audio", "payload": {{"data": "{data}", "sample_rate": {rate}, '
            f'"seq": {self.seq}}}, "session_id": {session}, "ts": {ts}}}'
        )
        if self.channel_layer is not None and await self.audio_flag.wanted():
            payload = {"data": data, "sample_rate": rate, "seq": self.seq}
            self.relay.put(envelope(self.session_id, "audio", payload), dashboards=False)

    def _levels_due(self) -> bool:
        """At most BROWSER_LEVELS_PER_SECOND: every message on this path costs loop time for each
        of hundreds of sockets (a meter updated 10 times a second reads as smooth). Checked before
        any coroutine is made: it runs for every frame in and out."""
        interval = self.levels_interval
        return interval is not None and time.monotonic() - self.levels_sent >= interval

    async def _send_levels(self) -> None:
        """The meters, only when one would move."""
        self.levels_sent = time.monotonic()
        level_in = frame_level(self.last_input) if self.last_input else 0.0
        level_out = frame_level(self.last_output) if self.last_output is not None else 0.0
        self.last_input, self.last_output = b"", None
        levels = (round(level_in, 2), round(level_out, 2))
        if levels == self.levels_shown:
            return
        self.levels_shown = levels
        await self.send_message("audio_levels", {"input": levels[0], "output": levels[1]})

    # --- outbound -----------------------------------------------------------------------------------
    async def send_message(self, type_: str, payload: dict[str, Any]) -> None:
        if self.closing:
            return
        message = envelope(self.session_id, type_, payload)
        await self.send(text_data=json.dumps(message, default=str))
        # meters are for whoever follows this session; everything else goes to every dashboard too
        self.relay.put(message, dashboards=type_ != "audio_levels")
