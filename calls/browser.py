"""``/api/v1/browser/conversation``: a thin adapter between a browser WebSocket and the engine.

Wire format (CONTRACTS "WebSocket envelope"): JSON ``{"type", "payload"}`` both ways (server
messages add ``session_id`` and ``ts``); binary frames are raw PCM16LE mono at the session's
input rate. This module only translates; the conversation itself is the engine's.

Limits, each answered without disturbing other sessions: a message larger than
``BROWSER_MAX_MESSAGE_BYTES`` closes with 1009; more than ``BROWSER_MAX_MESSAGES_PER_SECOND``
(sustained; a token bucket of ``WEBSOCKET_RATE_BURST_S``, :mod:`calls.ratelimit`) closes with
1008; more than ``BROWSER_MAX_CONNECTIONS`` conversations in this process are refused with
1013 (try again later); ``BROWSER_IDLE_TIMEOUT_S`` without a message ends the session cleanly
(1000). Malformed messages get an ``error`` message and the socket stays open.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from typing import Any

import numpy as np
from channels.consumer import get_handler_name
from django.conf import settings

from agents_app.sessions import db_call
from calls.asgi_ws import LeanWebSocket
from calls.ratelimit import MessageRateLimiter
from calls.relay import AudioRelayFlag, RelayQueue
from calls.wsauth import authorized, query
from voiceagent.connections import tracker
from voiceagent.conversation.engine import ENDED_BY_AGENT
from voiceagent.conversation.events import Event
from voiceagent.conversation.session import valid_session_id
from voiceagent.errors import UNAVAILABLE
from voiceagent.logging import session_id_var
from voiceagent.speech.audio import SUPPORTED_RATES, StreamResampler, rms_level

logger = logging.getLogger("calls.browser")

OVERRIDE_FIELDS = {
    "voice": str,
    "voice_style": str,
    "voice_rate": str,
    "temperature": (int, float),
    "top_p": (int, float),
    "max_tokens": int,
    "model": str,
}
CONTROL_ACTIONS = ("start", "stop", "pause", "resume", "reset")
MAX_TEXT_CHARS = 2000
RESTART_AFTER_S = 5.0  # a conversation that ended on its own starts again on audio no sooner than this


class ClientError(ValueError):
    """A bad message: answered with an ``error`` message; the socket stays open."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def envelope(session_id: str, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, "payload": payload, "session_id": session_id, "ts": round(time.time(), 3)}


def event_payload(event: Event) -> tuple[str, dict[str, Any]] | None:
    """Engine event -> (message type, payload); ``Audio`` is handled separately."""
    kind = event.kind
    if kind == "Transcript":
        return "transcript", {"text": event.text, "final": event.final, "speaker": event.speaker}
    if kind == "AgentResponse":
        return "response", {"text": event.text, "agent": event.agent, "final": event.final}
    if kind == "StopAudio":
        return "event", {"name": "barge_in", "reason": event.reason}
    if kind == "Handoff":
        return "event", {
            "name": "handoff",
            "from": event.from_agent,
            "to": event.to_agent,
            "type": event.type,
            "tool": event.tool,
        }
    if kind == "ToolCall":
        call = {
            "name": event.name,
            "args": event.arguments,
            "result": event.result,
            "duration_ms": event.duration_ms,
        }
        return "event", {
            "name": "tool_call",
            "tool": event.name,
            "args": event.arguments,
            "result": event.result,
            "duration_ms": event.duration_ms,
            "ok": event.ok,
            "agent": event.agent,
            "tool_call": call,
        }
    if kind == "StateChange":
        return "event", {"name": "state", "state": event.state, "agent": event.agent}
    if kind == "Error":
        return "error", {"code": event.code, "message": event.message}
    return None


class LeanDispatchMixin:
    """Skip Channels' per-message ``aclose_old_connections`` (a thread hop for every audio frame).

    Our consumers never touch the ORM on the event loop: database work goes through
    :func:`agents_app.sessions.db_call`, which manages its own connections.
    """

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class BrowserConversationConsumer(LeanWebSocket):
    transport = "browser"

    async def connect(self) -> None:
        config = settings.CONFIG
        self.relay = RelayQueue(self.channel_layer)  # to the dashboards, off this socket's path
        self.session_id = ""
        self.registered = False
        self.conversation = None
        self.pump_task: asyncio.Task | None = None
        self.idle_task: asyncio.Task | None = None
        self.limiter = MessageRateLimiter(
            config.BROWSER_MAX_MESSAGES_PER_SECOND, config.WEBSOCKET_RATE_BURST_S
        )
        self.last_message = time.monotonic()
        self.input_rate = 16000
        self.output_rate = 24000
        self.scenario: str | None = None
        self.agent: str | None = None
        self.mode = "cascade"
        self.overrides: dict[str, Any] = {}
        self.resamplers: dict[tuple[int, int], StreamResampler] = {}
        self.last_input: bytes = b""
        self.last_output = None
        self.levels_shown: tuple[float, float] | None = None
        self.levels_sent = 0.0
        # read once: settings.CONFIG costs a lazy-object lookup, too much per 20 ms frame x hundreds
        per_second = config.BROWSER_LEVELS_PER_SECOND
        self.levels_interval = 1.0 / per_second if per_second else None
        self.max_message_bytes = config.BROWSER_MAX_MESSAGE_BYTES
        self.seq = 0
        self.closing = False
        self.store_warned = False
        self.store_error_at = -1.0
        self.restart_at = 0.0  # audio before this does not start a conversation again
        await self.accept()
        if not await authorized(self.scope):
            await self.close(code=1008, reason="unauthorized: send an API key (?api_key=) or log in")
            return
        requested = query(self.scope).get("session_id")
        if requested is not None and not valid_session_id(requested):
            await self.close(code=1008, reason="invalid session_id: 1-128 characters of A-Z a-z 0-9 _ . : -")
            return
        if tracker.active_count("browser") >= config.BROWSER_MAX_CONNECTIONS:
            await self.close(code=1013, reason="server busy: too many conversations, try again later")
            return
        tracker.opened("browser")
        self.registered = True
        from agents_app.sessions import new_session_id

        self.session_id = requested or new_session_id()
        session_id_var.set(self.session_id)
        self.audio_flag = AudioRelayFlag(self.session_id)
        self.idle_task = asyncio.get_running_loop().create_task(self._idle_watchdog())
        await self.send_message(
            "event", {"name": "session_started", "session_id": self.session_id, "transport": self.transport}
        )

    async def disconnect(self, code: int) -> None:
        for task in (self.idle_task,):
            if task is not None:
                task.cancel()
        await self._stop_conversation(reason="disconnected")
        self._release()
        self.relay.end_if_live(self.session_id, f"disconnected ({code})")
        await self.relay.close()

    def _release(self) -> None:
        if self.registered:
            tracker.closed("browser")
            self.registered = False

    # --- inbound ------------------------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closing:
            return
        size = len(bytes_data) if bytes_data is not None else len((text_data or "").encode())
        limit = self.max_message_bytes
        if size > limit:
            await self._close(1009, f"message too big: {size} bytes, the limit is {limit}")
            return
        if not self.limiter.allow():
            await self._close(1008, f"too many messages: the limit is {self.limiter.rate:g} per second")
            return
        self.last_message = time.monotonic()
        try:
            if bytes_data is not None:
                await self._audio(bytes_data, self.input_rate)
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
            "text": self._text,
        }.get(message["type"])
        if handler is None:
            raise ClientError(
                "unknown_type",
                f"unknown message type {message['type'][:40]!r}; expected "
                "audio_data, control, config or text",
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
        rate = payload.get("sample_rate", self.input_rate)
        await self._audio(pcm, self._rate(rate, "sample_rate"))

    def _rate(self, value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value not in SUPPORTED_RATES:
            raise ClientError(
                "bad_sample_rate", f"{field} must be one of {', '.join(map(str, SUPPORTED_RATES))}"
            )
        return value

    async def _audio(self, pcm: bytes, rate: int) -> None:
        if len(pcm) % 2:
            raise ClientError("bad_audio", "PCM16 audio must have an even number of bytes")
        if not pcm:
            return
        if self._ended():
            if time.monotonic() < self.restart_at:
                return  # the last one just ended on its own: a live microphone must not hammer a dead API
            await self._start_conversation()
        if self.conversation is not None:
            self.conversation.push_audio(pcm, rate)
        self.last_input = pcm
        await self._maybe_levels()

    async def _text(self, payload: dict[str, Any]) -> None:
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ClientError("bad_text", "text needs a non-empty text field")
        if len(text) > MAX_TEXT_CHARS:
            raise ClientError("bad_text", f"text is limited to {MAX_TEXT_CHARS} characters")
        if self._ended():
            await self._start_conversation()
        if self.conversation is not None:
            await self.conversation.push_text(text)

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
            await self._stop_conversation(reason="stopped by the client")
        elif action in ("pause", "resume"):
            if self.conversation is None:
                raise ClientError("not_started", f"nothing to {action}: the conversation has not started")
            await (self.conversation.pause() if action == "pause" else self.conversation.resume())
        elif action == "reset":
            await self._reset()

    async def _config(self, payload: dict[str, Any]) -> None:
        unknown = set(payload) - {
            "scenario",
            "agent",
            "sample_rate",
            "output_sample_rate",
            "overrides",
            "mode",
        }
        if unknown:
            raise ClientError("bad_config", f"unknown config field(s): {', '.join(sorted(unknown))[:200]}")
        restart = False
        if "scenario" in payload:
            scenario = payload["scenario"]
            if not isinstance(scenario, str) or not scenario:
                raise ClientError("bad_config", "scenario must be a scenario name")
            name = await db_call(self._scenario_name, scenario)
            if name is None:
                raise ClientError("unknown_scenario", f"scenario {scenario[:64]!r} does not exist")
            restart |= name != self.scenario
            self.scenario = name
        if "agent" in payload:
            agent = payload["agent"]
            if agent is not None and (not isinstance(agent, str) or len(agent) > 64):
                raise ClientError("bad_config", "agent must be an agent name")
            self.agent = agent
        if "sample_rate" in payload:
            self.input_rate = self._rate(payload["sample_rate"], "sample_rate")
        if "output_sample_rate" in payload:
            self.output_rate = self._rate(payload["output_sample_rate"], "output_sample_rate")
        if "mode" in payload:
            if payload["mode"] not in ("cascade", "live"):
                raise ClientError("bad_config", "mode must be cascade or live")
            restart |= payload["mode"] != self.mode
            self.mode = payload["mode"]
        if "overrides" in payload:
            self.overrides = self._overrides(payload["overrides"])
            await self._store_overrides()
        if restart and self.conversation is not None:
            await self._stop_conversation(reason="reconfigured")
            await self._start_conversation()

    def _scenario_name(self, name: str) -> str | None:
        """The name of a built-in scenario, or of one this session made (``POST /scenarios``): the
        conversation resolves both, so the socket must let the caller pick either."""
        from agents_app import sessions
        from agents_app.catalog import catalog

        spec = catalog.scenario(name)
        if spec is not None:
            return spec.name
        state = sessions.load_state(self.session_id)
        own = {n.lower(): n for n in (state.scenarios if state is not None else {})}
        return own.get(name.lower())

    def _overrides(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ClientError("bad_config", "overrides must be an object")
        clean: dict[str, Any] = {}
        for key, item in value.items():
            kind = OVERRIDE_FIELDS.get(key)
            if kind is None:
                raise ClientError(
                    "bad_config",
                    f"overrides.{str(key)[:40]} is not overridable; allowed: {', '.join(OVERRIDE_FIELDS)}",
                )
            if item is not None and (isinstance(item, bool) or not isinstance(item, kind)):
                raise ClientError("bad_config", f"overrides.{key} has the wrong type")
            clean[key] = item
        ranges = {"temperature": (0, 2), "top_p": (0, 1), "max_tokens": (1, 16384)}
        for key, (lo, hi) in ranges.items():
            if clean.get(key) is not None and not lo <= clean[key] <= hi:
                raise ClientError("bad_config", f"overrides.{key} must be between {lo} and {hi}")
        return clean

    async def _store_overrides(self) -> None:
        from agents_app import sessions

        def store() -> None:
            state = sessions.load_state(self.session_id)
            if state is not None:
                state.memory["_agent_overrides"] = dict(self.overrides)
                sessions.save_state(state)

        await db_call(store)

    # --- conversation ---------------------------------------------------------------------------
    async def _start_conversation(self) -> None:
        from agents_app import sessions
        from agents_app.catalog import catalog
        from voiceagent.runtime import runtime

        def prepare() -> str | None:
            state = sessions.load_state(self.session_id)
            scenario = self.scenario or (state.scenario if state else None) or "default"
            spec = catalog.scenario(scenario)
            if spec is None and not (state and scenario in state.scenarios):
                return None
            if state is None:
                state = sessions.create_session(
                    self.session_id, spec.name, spec.start_agent, transport="browser"
                )
            if self.overrides:
                state.memory["_agent_overrides"] = dict(self.overrides)
                sessions.save_state(state)
            return scenario

        scenario = await db_call(prepare)
        if scenario is None:
            raise ClientError("unknown_scenario", "no scenario to start: send config {scenario} first")
        self.scenario = scenario
        try:
            conversation = runtime.new_conversation_for(
                runtime.conversation_mode("browser", self.mode),
                self.session_id,
                scenario,
                transport="browser",
                agent=self.agent,
            )
            await conversation.start()
        except ClientError:
            raise
        except Exception as exc:  # e.g. providers not started, agent unknown
            logger.warning("could not start conversation: %s", exc)
            raise ClientError("start_failed", f"the conversation could not start: {exc}") from None
        self.conversation = conversation
        self.pump_task = asyncio.get_running_loop().create_task(self._pump(conversation))

    async def _stop_conversation(self, reason: str) -> None:
        conversation, self.conversation = self.conversation, None
        if conversation is not None:
            await conversation.close(reason)
        if self.pump_task is not None and self.pump_task is not asyncio.current_task():
            try:
                await asyncio.wait_for(self.pump_task, 2)
            except (TimeoutError, asyncio.CancelledError):
                self.pump_task.cancel()
            self.pump_task = None

    async def _reset(self) -> None:
        from agents_app.views import reset_session

        await self._stop_conversation(reason="reset")
        old = self.session_id
        new = await db_call(reset_session, old)
        await self.send_message("event", {"name": "session_ended", "reason": "reset", "session_id": old})
        if new is None:
            from agents_app.sessions import new_session_id

            new = {"session_id": new_session_id()}
        self.session_id = new["session_id"]
        session_id_var.set(self.session_id)
        self.audio_flag = AudioRelayFlag(self.session_id)
        await self.send_message(
            "event",
            {
                "name": "session_started",
                "session_id": self.session_id,
                "previous_session_id": old,
                "transport": self.transport,
            },
        )

    async def _pump(self, conversation) -> None:
        """Engine events -> wire messages, in order. A failure here ends this session only."""
        ended = False
        try:
            async for event in conversation.events():
                if event.kind == "Audio":
                    await self._send_audio(event)
                    continue
                if event.kind == "StateChange" and event.state == "ended":
                    ended = conversation.close_reason == ENDED_BY_AGENT
                    continue
                mapped = event_payload(event)
                if mapped is not None:
                    await self.send_message(*mapped)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("browser session failed while sending")
            await self.send_message(
                "error", {"code": "internal", "message": "internal error; the session ends"}
            )
            self.conversation = None
            await conversation.close("internal error")
            await self._close(1011, "internal error")
            return
        if ended and not self.closing:
            self.conversation = None
            await self.send_message("event", {"name": "session_ended", "reason": "conversation ended"})
            await self._close(1000, "conversation ended")
        elif self.conversation is conversation and not self.closing:
            # It ended on its own: the realtime API refused or dropped the connection (the caller was
            # sent its error). The socket stays; the caller's next text, control start or (after a
            # pause) audio starts the conversation again, resuming the session and its history.
            logger.info("conversation ended (%s); the next input starts it again", conversation.close_reason)
            self.conversation = None
            self.restart_at = time.monotonic() + RESTART_AFTER_S

    async def _send_audio(self, event) -> None:
        pcm = event.pcm
        if event.sample_rate != self.output_rate:
            key = (event.sample_rate, self.output_rate)
            resampler = self.resamplers.get(key)
            if resampler is None:
                resampler = self.resamplers[key] = StreamResampler(*key)
            samples = resampler.process(pcm)
        else:
            samples = np.frombuffer(pcm, dtype="<i2")
        if not len(samples):
            return
        self.seq += 1
        self.last_output = samples
        await self.send_message(
            "audio",
            {
                "data": base64.b64encode(samples.astype("<i2").tobytes()).decode(),
                "sample_rate": self.output_rate,
                "seq": self.seq,
            },
        )
        await self._maybe_levels()

    async def _maybe_levels(self) -> None:
        """At most BROWSER_LEVELS_PER_SECOND, and only when a meter would move: every message on
        this path costs loop time for each of hundreds of sockets (a meter updated 10 times a
        second reads as smooth)."""
        now = time.monotonic()
        if self.levels_interval is None or now - self.levels_sent < self.levels_interval:
            return
        self.levels_sent = now
        level_in = rms_level(np.frombuffer(self.last_input, dtype="<i2")) if self.last_input else 0.0
        level_out = rms_level(self.last_output) if self.last_output is not None else 0.0
        self.last_input, self.last_output = b"", None
        levels = (round(level_in, 2), round(level_out, 2))
        if levels == self.levels_shown:
            return
        self.levels_shown = levels
        await self.send_message("audio_levels", {"input": levels[0], "output": levels[1]})

    async def _idle_watchdog(self) -> None:
        timeout = settings.CONFIG.BROWSER_IDLE_TIMEOUT_S
        while True:
            remaining = self.last_message + timeout - time.monotonic()
            if remaining <= 0:
                await self._stop_conversation(reason="idle timeout")
                await self.send_message("event", {"name": "session_ended", "reason": "idle timeout"})
                await self._close(1000, f"idle for {timeout:g} s")
                return
            await asyncio.sleep(min(remaining, 5.0))

    # --- outbound -----------------------------------------------------------------------------------
    async def send_message(self, type_: str, payload: dict[str, Any]) -> None:
        if self.closing:
            return
        message = envelope(self.session_id, type_, payload)
        await self.send(text_data=json.dumps(message, default=str))
        if type_ == "audio":
            if self.channel_layer is not None and await self.audio_flag.wanted():
                self.relay.put(message, dashboards=False)
            return
        # meters are for whoever follows this session; everything else goes to every dashboard too
        self.relay.put(message, dashboards=type_ != "audio_levels")

    async def _close(self, code: int, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        if self.idle_task is not None and self.idle_task is not asyncio.current_task():
            self.idle_task.cancel()
        await self._stop_conversation(reason=reason)
        self._release()
        await self.close(code=code, reason=reason)
