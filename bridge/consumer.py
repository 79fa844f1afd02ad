"""The contact-center AudioHook v2 WebSocket (``/api/v1/contactcenter/stream``): its wire codec.

The AudioHook half of the socket. The transport driver
(:class:`voiceagent.transport.driver.AudioSocket`) holds the rest: the session slot, starting,
pumping and ending the conversation, paced playback, the dashboard relay; what the bot shares
with the monitor (authentication, the protocol's replies, the session's start) is
:class:`bridge.session_socket.AudioHookSocket`; the protocol's rules are :mod:`bridge.protocol`'s.

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

import logging
from typing import Any

from bridge.protocol import ClientMessage, ProtocolError, select_media
from bridge.session_socket import OPEN_DEADLINE_S, TRANSPORT, AudioHookSocket
from voiceagent.conversation.core import DTMF_DIGITS
from voiceagent.conversation.events import Event
from voiceagent.speech.audio import MulawStreamEncoder, ulaw_decode
from voiceagent.transport.driver import DRAIN_DEADLINE_S
from voiceagent.transport.playback import PacedPlayback

logger = logging.getLogger(__name__)

CHUNK_MS = 250  # outbound pacing (spec)
CHUNK_BYTES = 8000 * CHUNK_MS // 1000  # mu-law: one byte per sample
MAX_QUEUED_CHUNKS = 4 * 120  # two minutes of agent audio waiting to be played; the oldest goes
START_FAILED = {  # how the `disconnect` info words a conversation that could not start, by stage
    "create": "the realtime voice API is not available: {}",
    "deadline": f"the realtime voice API did not answer within {OPEN_DEADLINE_S:g} s",
    "closed": "the realtime voice API is unreachable",
    "start": "the realtime voice API could not be reached: {}",
}


class AudioHookConsumer(AudioHookSocket):
    """One AudioHook session with the bot on it."""

    start_failed = START_FAILED

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.channel_index, self.channel_count = 0, 1
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

    # --- inbound ------------------------------------------------------------------------------------
    async def _on_audio(self, data: bytes) -> None:
        if self.conversation is None or self.closing:
            self.frames_ignored += 1  # before `opened` (or after the end): nothing to feed
            return
        if (info := self.audio_frame_refused(data)) is not None:
            logger.warning("AudioHook %s: %s", self.session_id, info)
            await self._disconnect("error", info)
            return
        if self.channel_count > 1:  # interleaved per sample in the negotiated channel order
            usable = len(data) - len(data) % self.channel_count
            data = data[self.channel_index : usable : self.channel_count]
        if not data:
            return  # empty frames are allowed
        self.frames_in += 1
        self.push_caller(ulaw_decode(data).tobytes(), 8000)

    async def _on_open(self, message: ClientMessage) -> None:
        refusal = "the bridge takes PCMU at 8000 Hz with the external channel; none was offered"
        media = await self._open_media(message, select_media, refusal)
        if media is None:
            return  # the probe: answered
        self.channel_count = len(media["channels"])
        self.channel_index = media["channels"].index("external")
        from voiceagent.runtime import runtime

        if await self._start(runtime.conversation_mode(TRANSPORT), message.parameters):
            await self._opened(media, message.parameters)
            self.spawn(self.playback.run())

    async def _on_dtmf(self, message: ClientMessage) -> None:
        digit = message.parameters.get("digit")
        if not isinstance(digit, str) or digit not in DTMF_DIGITS:
            raise ProtocolError(f"dtmf digit {str(digit)[:8]!r} is not one of 0-9 * # A-D")
        if self.conversation is not None:
            self.conversation.push_dtmf(digit)

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

    async def on_transfer(self, event: Event) -> None:
        """The agent asked for a person: once its line has played the session ends ``completed``
        with ``outputVariables`` that tell the contact centre's flow to route the call to a person."""
        self.playback.finish_response()
        await self.playback.drained(DRAIN_DEADLINE_S)
        await self._disconnect("completed", "transferred to a person", transfer_variables(event))


def transfer_variables(event: Any) -> dict[str, str]:
    """The string map the contact centre's flow reads to route the call to a person."""
    return {
        "transfer": "true",
        "transferTarget": event.target or "",
        "transferReason": event.reason[:200],
        "transferPriority": event.priority,
        "escalationReference": event.reference,
    }
