"""What every audio socket needs, whatever its wire: the transport driver.

The browser socket, the phone media stream and the AudioHook bridge differ only in their codec:
how their frames become engine calls (``push_audio``, ``push_text``, ``push_dtmf``) and how engine
events become their frames. Everything else lives here once, in :class:`AudioSocket`:

- admission: the per-process connection limit (:meth:`take_slot`, refused with 1013 unless the
  wire says otherwise) and its release, exactly once, whatever ends the socket;
- inbound limits: message size (1009) and rate (1008, :mod:`.ratelimit`), :meth:`over_limit`;
  the idle timeout (:meth:`watch_idle`);
- the conversation: started through the runtime with an optional deadline
  (:meth:`start_conversation`), its events pumped to the codec in order (:meth:`pump`), its end
  told apart (we ended it / the agent did / it was lost) and ended with the socket: the engine
  closes it (history flushed), the pump gets two seconds to relay the last events, the relay
  (:mod:`.relay`, which keeps the live-session registry) gets its queue out;
- paced playback of agent audio for wires that play what they get (:mod:`.playback`), and the
  engine's ``Duck`` events (the caller speaks over the agent, words not known yet) applied to it:
  every frame not sent yet goes out at the duck's gain until ``Duck(0)`` or a ``StopAudio``. A
  wire without paced playback (the browser, which gets audio ahead and schedules it) hands the
  event to its peer in its codec's ``on_event`` (the envelope's ``duck`` event).
- the metrics (:mod:`voiceagent.observability.metrics`): the conversation's start (its end through
  its close hook), and each of its events but ``Audio`` on its way through the pump;
- the recording taps (:mod:`voiceagent.recording`), the same on every wire: the caller's audio
  through :meth:`push_caller`, the agent's as the pump hands it over, cut where a ``StopAudio``
  cut it and lowered where a ``Duck`` lowered it.

The codec subclasses :class:`AudioSocket` and fills the hooks (``decode``, ``on_audio``,
``on_event``, ``agent_ended``, ``conversation_lost``, ``pump_failed``, ``farewell``, ``ended``).
The hot path: a frame goes :meth:`receive` -> :meth:`over_limit` (a plain call) -> the codec's
``decode`` -> the engine, with no task, queue or copy in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from voiceagent.connections import tracker
from voiceagent.conversation.events import Event
from voiceagent.conversation.timers import AGENT_ENDINGS
from voiceagent.observability import metrics
from voiceagent.recording.recorder import Recorder
from voiceagent.transport.envelope import envelope, event_payload
from voiceagent.transport.playback import PacedPlayback
from voiceagent.transport.ratelimit import MessageRateLimiter
from voiceagent.transport.relay import RelayQueue
from voiceagent.transport.session_memory import live
from voiceagent.transport.websocket import LeanWebSocket

PUMP_GRACE_S = 2.0  # after the conversation closed, how long its last events have to go out
DRAIN_DEADLINE_S = 30.0  # the agent's goodbye still playing when it ends the conversation
# a message handled in longer than this (a conversation's start under load) excuses what queued
# meanwhile from the rate limit (MessageRateLimiter.excuse); shorter ones, even under load, excuse
# nothing (a flood of quick messages must still be closed)
SLOW_HANDLER_S = 0.25


class Refused(Exception):
    """The socket is refused: ``code`` and ``reason`` go into the close frame."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


class StartFailed(Exception):
    """The conversation could not start. ``stage``: ``create`` (no conversation could be made),
    ``start`` (its start raised), ``deadline`` (no start in time) or ``closed`` (it closed at
    once); ``detail`` says why. Each wire words it for its peer."""

    def __init__(self, stage: str, detail: str):
        super().__init__(detail)
        self.stage = stage
        self.detail = detail


class AudioSocket(LeanWebSocket):
    """The transport-generic half of an audio socket; a codec subclass adds its wire."""

    transport = ""  # the connection tracker's kind and the session's transport
    label = "socket"  # how the logs name one of these sockets
    log = logging.getLogger(__name__)  # the codec's logger
    busy_reason = "server busy: try again later"
    gone_reason = "socket closed ({code})"  # the conversation's close reason when the client goes

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.session_id = ""
        self.conversation: Any = None
        self.counted = False
        self.closing = False  # our end of the socket has begun (or the client has gone)
        self.pump_task: asyncio.Task | None = None
        self.tasks: list[asyncio.Task] = []
        self.relay = RelayQueue(self.channel_layer)  # to the dashboards, off this socket's path
        self.playback: PacedPlayback | None = None
        self.recorder: Recorder | None = None  # set when the conversation is recorded
        self._cut_rid = 0  # agent audio of responses up to this id was cut (barge-in): not recorded
        self.limiter: MessageRateLimiter | None = None
        self.max_message_bytes = 0
        self.last_message = time.monotonic()

    # --- admission and inbound limits ---------------------------------------------------------------
    def limit_messages(self, max_bytes: int, per_second: float, burst_s: float) -> None:
        """Size and rate limits of inbound messages (read once per socket, not per frame)."""
        self.max_message_bytes = max_bytes
        self.limiter = MessageRateLimiter(per_second, burst_s)

    def take_slot(self, limit: int) -> None:
        """Count this socket open, or refuse it (1013) when this process is at ``limit``."""
        if tracker.active_count(self.transport) >= limit:
            raise Refused(1013, self.busy_reason)
        tracker.opened(self.transport)
        self.counted = True

    def release_slot(self) -> None:
        if self.counted:
            self.counted = False
            tracker.closed(self.transport)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Every inbound message: nothing once the socket is ending, the limits, then the codec."""
        if self.closing:
            return
        if (refusal := self.over_limit(text_data, bytes_data)) is not None:
            await self.finish(*refusal)
            return
        began = time.monotonic()
        await self.decode(text_data, bytes_data)
        if self.limiter is not None:  # what queued while we were busy here is not the client's burst
            self.limiter.excuse(time.monotonic() - began - SLOW_HANDLER_S)

    def over_limit(self, text_data: str | None, bytes_data: bytes | None) -> tuple[int, str] | None:
        """(close code, reason) when this message breaks the size or rate limit, else None."""
        if bytes_data is not None:
            size = len(bytes_data)
        else:
            text = text_data or ""
            size = len(text) if text.isascii() else len(text.encode())
        if size > self.max_message_bytes:
            return 1009, f"message too big: {size} bytes, the limit is {self.max_message_bytes}"
        limiter = self.limiter
        if limiter is not None and not limiter.allow():
            return 1008, f"too many messages: the limit is {limiter.rate:g} per second"
        self.last_message = time.monotonic()
        return None

    # --- the dashboards -----------------------------------------------------------------------------
    def publish(self, type_: str, payload: dict[str, Any], *, dashboards: bool = True) -> dict[str, Any]:
        """A server message of this session to the dashboards (queued, never awaited); returned."""
        message = envelope(self.session_id, type_, payload)
        self.relay.put(message, dashboards=dashboards)
        return message

    def relay_event(self, event: Event) -> None:
        """An engine event to the dashboards, in the envelope's terms."""
        mapped = event_payload(event)
        if mapped is not None:
            self.relay.put(envelope(self.session_id, *mapped))

    # --- the conversation ---------------------------------------------------------------------------
    async def start_conversation(
        self,
        mode: str,
        scenario: str,
        *,
        agent: str | None = None,
        deadline: float | None = None,
        refuse_closed: bool = True,
    ) -> None:
        """Make and start the session's conversation (:class:`StartFailed` when it cannot);
        :meth:`run_pump` then relays its events."""
        from voiceagent.runtime import runtime

        try:
            conversation = runtime.new_conversation_for(
                mode, self.session_id, scenario, transport=self.transport, agent=agent
            )
        except Exception as exc:  # providers not started, no realtime API, unknown agent ...
            raise StartFailed("create", str(exc)) from None
        try:
            async with asyncio.timeout(deadline):
                await conversation.start()
        except TimeoutError:
            await conversation.close("start deadline")
            raise StartFailed("deadline", f"no start within {deadline:g} s") from None
        except Exception as exc:
            with contextlib.suppress(Exception):
                await conversation.close("start failed")
            raise StartFailed("start", str(exc)) from None
        if refuse_closed and conversation.closed:
            raise StartFailed("closed", f"it closed at once: {conversation.close_reason}")
        self.conversation = conversation
        if self.recorder is not None:  # the last one ended on its own; the socket stayed (the browser)
            self.recorder.close()
        self.recorder, self._cut_rid = None, 0  # a new conversation numbers its responses from 1
        if getattr(conversation, "recording", False):
            self.recorder = Recorder(self.session_id, self.transport)  # the greeting is queued: recorded
        live.add(self.session_id, conversation)  # memory written from outside reaches it (a profile)
        metrics.conversation_started(conversation, self.transport, mode)

    def push_caller(self, pcm: bytes, rate: int) -> None:
        """The caller's audio (PCM16 at ``rate``) to the conversation, and to the recording."""
        if self.recorder is not None:
            self.recorder.caller(pcm, rate)
        self.conversation.push_audio(pcm, rate)

    def run_pump(self) -> None:
        """Start relaying the conversation's events (after the codec has announced the session)."""
        self.pump_task = asyncio.get_running_loop().create_task(self.pump(self.conversation))

    async def end_conversation(self, reason: str) -> None:
        """Close the conversation (the engine saves it), then give the pump time to relay its last
        events; a pump still busy after :data:`PUMP_GRACE_S` is cancelled."""
        conversation, self.conversation = self.conversation, None
        if conversation is not None:
            try:
                await conversation.close(reason)
            except Exception:
                self.log.exception("%s %s: closing the conversation failed", self.label, self.session_id)
        pump, self.pump_task = self.pump_task, None
        if pump is not None and pump is not asyncio.current_task() and not pump.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(PUMP_GRACE_S):
                    await asyncio.shield(pump)
            pump.cancel()
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            recorder.close()

    async def pump(self, conversation: Any) -> None:
        """Engine events -> the codec, in order; then the end as the conversation ended."""
        on_audio, on_event = self.on_audio, self.on_event
        count, transport = metrics.count_event, self.transport  # every event but Audio: one dict lookup
        try:
            async for event in conversation.events():
                if event.kind == "Audio":
                    if self.recorder is not None and not 0 < event.response_id <= self._cut_rid:
                        self.recorder.agent(event.pcm, event.sample_rate)
                    await on_audio(event)
                else:
                    count(event, transport)
                    if self.recorder is not None:
                        self._record_event(event)
                    if event.kind == "Duck" and self.playback is not None:
                        self.playback.set_gain(event.gain_db)  # what is not sent yet, from now
                    elif event.kind == "TransferRequested":
                        self.spawn(self.on_transfer(event))  # it may wait for the line to play
                    await on_event(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.log.exception("%s %s failed while relaying", self.label, self.session_id or "-")
            await self.pump_failed(conversation)
            return
        await self.conversation_over(conversation)

    def _record_event(self, event: Event) -> None:
        """A barge-in cuts the agent's recorded audio as it cut what was heard; a duck lowers it;
        any other event sends what the recorder gathered."""
        assert self.recorder is not None
        if event.kind == "StopAudio":
            self._cut_rid = max(self._cut_rid, event.response_id)
            self.recorder.cut()
        elif event.kind == "Duck":
            self.recorder.gain(event.gain_db)
        else:
            self.recorder.flush()  # the agent audio gathered so far is due (a response ended, ...)

    async def conversation_over(self, conversation: Any) -> None:
        """The events ended. Unless we ended it: the agent did (its last words play out), or the
        conversation was lost (the realtime API dropped, an engine error)."""
        if self.closing or conversation is not self.conversation:
            return  # we ended it
        if conversation.close_reason in AGENT_ENDINGS:  # its tool, a silent caller, the time limit
            if self.playback is not None:
                self.playback.finish_response()
                await self.playback.drained(DRAIN_DEADLINE_S)
            await self.agent_ended()
        else:
            await self.conversation_lost(conversation.close_reason)

    # --- ending -------------------------------------------------------------------------------------
    def spawn(self, coro) -> asyncio.Task:
        """A task of this socket, cancelled when it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.append(task)
        return task

    def cancel_tasks(self) -> None:
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    async def stop(self, reason: str) -> bool:
        """Begin our end of the socket, once: the conversation ends and nothing queued plays.
        False when it has begun already."""
        if self.closing:
            return False
        self.closing = True
        await self.end_conversation(reason)
        if self.playback is not None:
            self.playback.drop()
        return True

    async def finish(self, code: int, reason: str) -> None:
        """We end the socket: the conversation, the codec's :meth:`farewell`, the slot, then the
        close frame with ``code`` and ``reason``."""
        if not await self.stop(reason):
            return
        await self.farewell(code, reason)
        self.release_slot()
        await self.close(code, reason)
        self.cancel_tasks()

    async def disconnect(self, code: int) -> None:
        """The client has gone (or a hook failed): end the conversation, release, drain the relay."""
        self.closing = True
        if self.playback is not None:
            self.playback.drop()  # nobody to play it to: a pump waiting for it to drain goes on
        await self.end_conversation(self.gone_reason.format(code=code))
        self.cancel_tasks()
        self.release_slot()
        await self.ended(code)
        await self.relay.close()

    # --- idle timeout -------------------------------------------------------------------------------
    def watch_idle(self, timeout: float) -> None:
        """:meth:`on_idle` once no message has arrived for ``timeout`` seconds."""
        self.spawn(self._idle_watchdog(timeout))

    async def _idle_watchdog(self, timeout: float) -> None:
        while True:
            remaining = self.last_message + timeout - time.monotonic()
            if remaining <= 0:
                await self.on_idle(timeout)
                return
            await asyncio.sleep(min(remaining, 5.0))

    # --- the codec's hooks --------------------------------------------------------------------------
    async def decode(self, text_data: str | None, bytes_data: bytes | None) -> None:
        """One inbound message within the limits -> engine calls (the wire codec's job)."""

    async def on_audio(self, event: Event) -> None:
        """Agent audio -> the wire (paced wires: into :attr:`playback`)."""
        self.playback.push_pcm(event.pcm, event.sample_rate)

    async def on_event(self, event: Event) -> None:
        """Any other engine event -> the wire and the dashboards."""
        self.relay_event(event)

    async def on_transfer(self, event: Event) -> None:
        """The agent asked for a person (``escalate_to_human``). Here (the browser, a wire with no
        transfer of its own): the dashboards are asked for a person to take the conversation over,
        and the conversation goes on meanwhile. Phone and contact centre transfer the call."""
        payload = {"name": "takeover_requested", "reason": event.reason, "priority": event.priority}
        self.publish("event", {**payload, "reference": event.reference})
        conversation = self.conversation
        if conversation is not None and isinstance(memory := conversation.state.memory.get("transfer"), dict):
            conversation.remember({"transfer": {**memory, "status": "dashboard"}})

    async def agent_ended(self) -> None:
        """The agent ended the conversation (its audio has played)."""
        await self.finish(1000, "the agent ended the conversation")

    async def conversation_lost(self, reason: str | None) -> None:
        await self.finish(1011, f"the conversation ended: {reason}")

    async def pump_failed(self, conversation: Any) -> None:
        await self.finish(1011, "internal error")

    async def on_idle(self, timeout: float) -> None:
        await self.finish(1000, f"idle for {timeout:g} s")

    async def farewell(self, code: int, reason: str) -> None:
        """Last words of :meth:`finish` before the close frame (a hang-up, a session_ended)."""

    async def ended(self, code: int) -> None:
        """The socket is gone and released: what the codec still owes the dashboards, its log."""
