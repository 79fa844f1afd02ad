"""The AudioHook monitor (``/api/v1/contactcenter/monitor``): agent assist on calls people handle.

A contact centre streams a call between a customer and one of its people here; the service only
listens. It is the same AudioHook v2 socket as the bot's (:class:`bridge.session_socket.
AudioHookSocket`: the same authentication, protocol replies and session start) with another side:

- ``open``: PCMU 8 kHz, both channels when offered (``external`` = the customer, ``internal`` =
  the centre's person), else either one alone (:func:`bridge.protocol.select_monitor_media`); the
  session (id = the AudioHook session id) is prepared as the bot's, then a monitor conversation
  (:class:`voiceagent.conversation.monitor.MonitorConversation`) starts on it: the service's
  recogniser with a VAD per channel. ``opened`` (with ``supportedLanguages`` when asked).
- Binary frames are split per channel and transcribed; while the client has ``paused`` its audio,
  frames are discarded until it has ``resumed``.
- Nothing goes back but the protocol's text replies: no audio, no ``event`` messages.
- The transcripts (``speaker`` ``user`` / ``person``) reach the dashboards through the driver's
  relay, live; the final ones are the session's history.

Each monitor may hold two recogniser streams at once, so it has its own per-process limit
(``CONTACTCENTER_MONITOR_MAX_SESSIONS``, counted apart from the bot's sessions; the speech pools
grow by two clients per monitor); beyond it a new session gets ``disconnect`` reason ``error``.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.protocol import ClientMessage, demux, select_monitor_media
from bridge.session_socket import OPEN_DEADLINE_S, AudioHookSocket
from voiceagent.connections import tracker
from voiceagent.conversation.events import Event
from voiceagent.speech.audio import ulaw_decode
from voiceagent.transport.driver import Refused

logger = logging.getLogger(__name__)

MODE = "monitor"  # voiceagent.runtime.Runtime.new_conversation_for
SLOT = "contactcenter_monitor"  # the connection tracker's kind: counted apart from the bot
LISTENED = frozenset({"external", "internal"})
START_FAILED = {  # how the `disconnect` info words a monitor that could not start, by stage
    "create": "the speech recogniser is not available: {}",
    "deadline": f"the monitor did not start within {OPEN_DEADLINE_S:g} s",
    "closed": "the monitor closed at once",
    "start": "the monitor could not start: {}",
}


class AudioHookMonitorConsumer(AudioHookSocket):
    """One monitored call: both sides heard, nothing said."""

    label = "AudioHook monitor"
    limit_setting = "CONTACTCENTER_MONITOR_MAX_SESSIONS"
    start_failed = START_FAILED

    def __init__(self, scope: dict, receive, send):
        super().__init__(scope, receive, send)
        self.channels: tuple[str, ...] = ()
        self.paused = False  # the client paused its audio: frames are discarded until it resumes

    # --- admission: its own count, not the bot's -----------------------------------------------------
    def take_slot(self, limit: int) -> None:
        if tracker.active_count(SLOT) >= limit:
            raise Refused(1013, self.busy_reason)
        tracker.opened(SLOT)
        self.counted = True

    def release_slot(self) -> None:
        if self.counted:
            self.counted = False
            tracker.closed(SLOT)

    # --- inbound ------------------------------------------------------------------------------------
    async def _on_audio(self, data: bytes) -> None:
        conversation = self.conversation
        if conversation is None or self.closing or self.paused:
            self.frames_ignored += 1  # before `opened`, while paused, after the end
            return
        if (info := self.audio_frame_refused(data)) is not None:
            logger.warning("AudioHook monitor %s: %s", self.session_id, info)
            await self._disconnect("error", info)
            return
        if not data:
            return  # empty frames are allowed
        self.frames_in += 1
        for channel, part in demux(data, self.channels).items():
            if part and channel in LISTENED:
                conversation.push_audio(ulaw_decode(part).tobytes(), 8000, channel)

    async def _on_open(self, message: ClientMessage) -> None:
        refusal = (
            "the monitor takes PCMU at 8000 Hz on the external and/or internal channel; none was offered"
        )
        media = await self._open_media(message, select_monitor_media, refusal)
        if media is None:
            return  # the probe: answered
        self.channels = tuple(media["channels"])
        if await self._start(MODE, message.parameters):
            await self._opened(media, message.parameters, monitor=True)

    async def _on_paused(self, message: ClientMessage) -> None:
        self._log_notice(message)
        self.paused = True
        if self.conversation is not None:
            self.conversation.end_turns()  # the words said up to the pause are not held back

    async def _on_resumed(self, message: ClientMessage) -> None:
        self._log_notice(message)
        self.paused = False

    # --- engine events -> the dashboards only --------------------------------------------------------
    async def on_audio(self, event: Event) -> None:
        """A monitor says nothing (it makes no audio; none would ever be sent)."""

    async def agent_ended(self) -> None:
        await self._disconnect("completed", "the monitor ended")

    async def conversation_lost(self, reason: str | None) -> None:
        await self._disconnect("error", f"the monitor ended: {reason}")

    async def pump_failed(self, conversation: Any) -> None:
        await self.conversation_over(conversation)
