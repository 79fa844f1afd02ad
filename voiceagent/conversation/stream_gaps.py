"""A caller's stream that stops mid-turn is a caller who went quiet: the gap is heard as silence.

A turn's end is counted on frames (``_silence_ms`` grows by a frame's length per silent frame), so
the decision runs on the caller's own clock and a loaded loop or a burst of frames never ends a
turn early. But a client may stop sending: a browser page that sends nothing while its track is
muted, a push-to-talk button released, a codec with discontinuous transmission, a test client that
sends a little trailing silence and then waits. Without frames the silence never reached the wait,
and the turn hung until the next sound - whenever the wait was longer than what was sent (the turn
model's doubt, or its answer still on its way: :mod:`voiceagent.conversation.end_of_turn`).

The live pipeline has the same hang one hop further: the realtime service's VAD counts silence on
the audio appended, so a caller who stops sending mid-speech never gets ``speech_stopped``, nor an
answer.

So while the caller is speaking (``_caller_speaking``: an utterance is open, or the service's VAD
heard speech start and not stop), :data:`GAP_S` without any audio from the client is taken as
silence: the gap is filled with silent frames (``_fill_silence``: through the cascade's own VAD,
recogniser and decision; appended to the realtime service's buffer), then :data:`FILL_S` at a time
until the audio comes back or the turn ends. The gap is long enough that a network stall (a TCP
retransmit is 200 ms at least) does not count as the caller's silence; one timer per utterance,
re-armed per half second of audio, costs nothing per frame but a clock read at each push.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

__all__ = ["FILL_S", "FRAME_S", "GAP_S", "StreamGaps"]

GAP_S = 0.5  # no audio this long in a turn: the caller's side went quiet
FILL_S = 0.1  # then silence is filled in at this pace until audio or the turn's end
FRAME_S = 0.02  # the unit of silence filled in


class StreamGaps:
    """The listening side's gap filler (a mixin of the conversation, its state on it)."""

    closed: bool
    paused: bool
    _last_audio_at: float = 0.0  # loop time of the client's latest push
    _filled_to: float = 0.0  # loop time up to which a gap has been filled
    _gap_timer: asyncio.TimerHandle | None = None

    if TYPE_CHECKING:

        def loop_time(self) -> float: ...

        def _caller_speaking(self) -> bool: ...

    def _fill_silence(self, frames: int) -> None:
        """The pipeline's: hear ``frames`` of :data:`FRAME_S` of silence as if the client sent them."""
        raise NotImplementedError

    def _audio_arrived(self) -> None:
        """The client sent audio (at every push: one clock read)."""
        self._last_audio_at = self.loop_time()

    def _watch_for_gaps(self) -> None:
        """The caller began to speak: from now on a gap in the client's audio is their silence."""
        if self._gap_timer is None:
            self._arm_gap_timer(self._last_audio_at + GAP_S)

    def _arm_gap_timer(self, at: float) -> None:
        self._gap_timer = asyncio.get_running_loop().call_at(at, self._gap_due)

    def _gap_due(self) -> None:
        """The timer: audio came since (look again a gap after it), or fill the gap with silence."""
        self._gap_timer = None
        if self.closed or self.paused or not self._caller_speaking():
            return
        now = self.loop_time()
        if now - self._last_audio_at < GAP_S:
            self._arm_gap_timer(self._last_audio_at + GAP_S)
            return
        start = max(self._last_audio_at, self._filled_to, now - 2 * GAP_S)  # a late timer: bounded
        frames = int((now - start) / FRAME_S)
        self._filled_to = start + frames * FRAME_S
        if frames:
            self._fill_silence(frames)
        if self._caller_speaking() and not self.closed:
            self._arm_gap_timer(now + FILL_S)
