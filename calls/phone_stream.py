"""What a phone call's media stream needs whatever its provider: the phone half of the codec.

ACS (:mod:`calls.media`) and Twilio Media Streams (:mod:`calls.twilio_stream`) differ in their
frames, their authentication and how they find the call; everything else about a phone call is the
same and lives here once, on top of the transport driver
(:class:`voiceagent.transport.driver.AudioSocket`): the ``TELEPHONY_MAX_*`` limits, the
conversation's start once the call is known (:meth:`PhoneStreamSocket.begin`), the
``session_started``/``session_ended`` events, the ``?events=1`` messages, dropped-message counting
(``GET /media/status``), barge-in (nothing queued plays; the provider is told to flush, under the
playback lock so nothing of the cancelled response follows), the hang-up when the agent ends the
call, and the logs. A codec fills :meth:`send_stop` (its flush message), :meth:`hang_up` and its
``decode``; :meth:`response_done` lets it mark the end of a response on its wire.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from django.conf import settings

from voiceagent.conversation.events import Event
from voiceagent.logging import session_id_var
from voiceagent.transport.driver import AudioSocket, Refused, StartFailed
from voiceagent.transport.envelope import envelope, event_payload

logger = logging.getLogger("calls.media")

TRANSPORT = "phone"
START_DEADLINE_S = 10.0  # the live engine connects to the realtime API before the first word
HANG_UP_DEADLINE_S = 10.0
# what a stream dropped, per kind, in this process since it started (``GET /media/status``)
DROP_KINDS = ("malformed", "bad_audio", "bad_dtmf", "binary", "unknown_kind")
dropped_messages: Counter[str] = Counter(dict.fromkeys(DROP_KINDS, 0))
# the engine events a ``?events=1`` stream is sent, by their names in the spec
MEDIA_EVENTS = {
    "Transcript": "transcript",
    "AgentResponse": "agent_response",
    "Handoff": "handoff",
    "ToolCall": "tool_call",
}
TOOL_CALL_FIELDS = ("args", "result", "duration_ms", "ok", "agent")


def media_payload(event: Event) -> tuple[str, dict[str, Any]] | None:
    """Engine event -> the ``?events=1`` message of a phone stream, or None: the envelope's payload
    (:func:`event_payload`) under the spec's names."""
    name = MEDIA_EVENTS.get(event.kind)
    if name is None:
        return None
    mapped = event_payload(event)
    assert mapped is not None
    payload = mapped[1]
    if name == "handoff":
        payload = {k: v for k, v in payload.items() if k != "name"}
    elif name == "tool_call":
        payload = {"name": payload["tool"], **{k: payload[k] for k in TOOL_CALL_FIELDS}}
    return name, payload


class PhoneStreamSocket(AudioSocket):
    """One phone call's media stream; a provider's codec subclasses it."""

    transport = TRANSPORT
    label = "media stream"
    log = logger
    busy_reason = "server busy: too many media streams, try again later"
    gone_reason = "media stream closed ({code})"

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.connection_id: str | None = None
        self.started = False  # session_started published; session_ended is owed
        self.call_over = False  # the provider said the call ended: nothing to hang up
        self.events_wanted = False
        self.frames_in = 0
        self.dropped: Counter[str] = Counter()  # this stream's share of dropped_messages
        config = settings.CONFIG
        self.limit_messages(
            config.TELEPHONY_MAX_MESSAGE_BYTES,
            config.TELEPHONY_MAX_MESSAGES_PER_SECOND,
            config.WEBSOCKET_RATE_BURST_S,
        )
        self._warned: set[str] = set()
        self._stopped_rid = 0  # audio of responses up to this id was cancelled (barge-in)

    # --- the codec's hooks --------------------------------------------------------------------------
    async def send_stop(self) -> None:
        """Tell the provider to flush the audio it holds (called under the playback lock)."""
        raise NotImplementedError

    async def hang_up(self) -> None:
        """Hang :attr:`connection_id`'s call up through the provider; never raises."""

    def response_done(self) -> None:
        """A response is complete: its last partial frame is queued (a wire may mark it)."""
        self.playback.finish_response()

    # --- the start ----------------------------------------------------------------------------------
    async def refuse(self, exc: Refused) -> None:
        self.log.warning("%s refused (%d): %s", self.label, exc.code, exc.reason)
        await self.finish(exc.code, exc.reason)

    async def begin(self, session_id: str, scenario: str, engine_mode: str) -> bool:
        """The call is known: start its conversation, announce it, relay it, play to it. False
        (the stream closed 1011) when the conversation could not start."""
        self.session_id = session_id
        session_id_var.set(session_id)
        try:
            await self.start_conversation(engine_mode, scenario, deadline=START_DEADLINE_S)
        except StartFailed as exc:
            self.log.warning("%s %s: the conversation could not start: %s", self.label, session_id, exc)
            await self.finish(1011, f"the conversation could not start: {exc}")
            return False
        self.started = True
        await self._session_event("session_started", {"session_id": session_id, "transport": TRANSPORT})
        self.run_pump()
        self.spawn(self.playback.run())
        return True

    # --- the end ------------------------------------------------------------------------------------
    async def farewell(self, code: int, reason: str) -> None:
        """A conversation that ended (1000, 1011) hangs the call up; a refused stream does not."""
        if code in (1000, 1011) and self.connection_id and not self.call_over:
            await self.hang_up()
        await self._session_ended(reason)

    async def ended(self, code: int) -> None:
        """The provider hung up (or the socket dropped); the driver ended the conversation."""
        await self._session_ended("media stream closed")
        self.log.info(
            "%s %s ended: %d frames in, %d inbound dropped%s, %d outbound dropped",
            self.label,
            self.session_id or "-",
            self.frames_in,
            self.dropped.total(),
            f" ({', '.join(f'{k} {n}' for k, n in sorted(self.dropped.items()))})" if self.dropped else "",
            self.playback.dropped,
        )

    async def _session_ended(self, reason: str) -> None:
        if self.started:
            self.started = False
            await self._session_event("session_ended", {"reason": reason, "session_id": self.session_id})

    async def conversation_lost(self, reason: str | None) -> None:
        self.log.warning("%s %s: the conversation ended: %s", self.label, self.session_id, reason or "closed")
        await self.finish(1011, f"the conversation ended: {reason or 'closed'}")

    async def agent_ended(self) -> None:
        await self.finish(1000, "the agent ended the call")

    # --- inbound ------------------------------------------------------------------------------------
    def drop(self, kind: str, what: str, level: int = logging.WARNING) -> None:
        """An inbound message is dropped: counted, and logged the first time per stream and kind."""
        self.dropped[kind] += 1
        dropped_messages[kind] += 1
        if kind not in self._warned:
            self._warned.add(kind)
            self.log.log(
                level,
                "%s %s: %s was dropped (counted in /media/status; said once per stream)",
                self.label,
                self.session_id or "-",
                what,
            )

    # --- engine events -> wire (the driver's pump) --------------------------------------------------
    async def on_audio(self, event: Event) -> None:
        if event.response_id and event.response_id <= self._stopped_rid:
            return  # audio of a cancelled response the engine had already handed over
        try:
            self.playback.push_pcm(event.pcm, event.sample_rate)
        except ValueError:
            if "rate" not in self._warned:
                self._warned.add("rate")
                self.log.warning(
                    "%s %s: agent audio at %d Hz cannot be resampled; dropped",
                    self.label,
                    self.session_id or "-",
                    event.sample_rate,
                )

    async def on_event(self, event: Event) -> None:
        kind = event.kind
        if kind == "StopAudio":
            await self._barge_in(event.response_id)
        elif kind == "StateChange" and event.state in ("listening", "ended"):
            self.response_done()
        self.relay_event(event)
        if self.events_wanted and (wire := media_payload(event)) is not None:
            await self._send_json(envelope(self.session_id, *wire))

    async def _barge_in(self, response_id: int) -> None:
        """Nothing queued plays; the provider flushes what it holds. Dropped before sending, under the
        playback lock, so no frame of the cancelled response can follow the flush message."""
        self._stopped_rid = max(self._stopped_rid, response_id)
        async with self.playback.lock:
            self.playback.drop()
            await self.send_stop()

    # --- outbound text ------------------------------------------------------------------------------
    async def _send_json(self, message: dict[str, Any]) -> None:
        text = json.dumps(message, default=str)
        async with self.playback.lock:
            await self.send(text_data=text)

    async def _session_event(self, name: str, payload: dict[str, Any]) -> None:
        message = self.publish("event", {"name": name, **payload})
        if self.events_wanted:
            await self._send_json(message)
