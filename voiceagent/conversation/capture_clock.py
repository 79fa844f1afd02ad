"""When a caller frame was captured, not when it arrived: the stream's own clock on the loop's.

The echo gate compares each microphone frame with the agent audio that played when the frame was
*captured*: its echo is the agent's sound a fixed path (tens to hundreds of ms) earlier. Stamping a
frame with the loop time it reached the gate instead adds every delay between the microphone and
that point: network jitter (a browser's frames over Wi-Fi come in bunches), a loaded loop that
reads three frames at once, an off-loop VAD (:mod:`voiceagent.speech.silero_batch`) whose verdict
lands a batch later. Each of these moves a frame's echo by more than the echo path's
:data:`~voiceagent.conversation.echo_path.SPAN` of tolerance, so an echo frame of a loud syllable
is compared with the quiet gap after it, looks louder than the echo expected there and is taken for
the caller: the agent interrupted itself on a loaded two-core machine (``test_the_agents_own_echo_
does_not_interrupt_it``, 1 run in 4 with three CPU hogs).

A stream's frames are captured one frame apart, so frame *i* was captured at ``i * FRAME_S`` on the
sender's clock. The least-delayed frames of the last :data:`WINDOW` fix where that clock sits on
the loop's (a jitter buffer's minimum-delay anchor): a frame's capture time is
``i * FRAME_S + min(arrival_j - j * FRAME_S)`` over the window, never later than its own arrival.
A frame later than :data:`RESTART_S` behind that anchor starts the clock again from its own
arrival: a client that stopped sending (push-to-talk, a muted track) and resumed, whose earlier
anchor would place its new frames seconds in the past. Stamps never go backwards.
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["RESTART_S", "WINDOW", "CaptureClock"]

FRAME_S: Final = 0.02
WINDOW: Final = 50  # frames (1 s) whose earliest arrival anchors the clock: a clock drift of
# 0.1 % (a sound card's) moves it 1 ms within the window, far under a frame; a lost frame moves
# the stamps by its length for at most this long
RESTART_S: Final = 0.5  # later than this behind the anchor: the stream stopped and resumed (as
# StreamGaps.GAP_S: a pause this long in a caller's turn is heard as silence, not as a delay)


class CaptureClock:
    """Capture times of one stream's consecutive frames, on the loop clock."""

    __slots__ = ("_anchors", "_count")

    def __init__(self) -> None:
        self._count = 0
        # (frame index, arrival - index * FRAME_S), offsets increasing: the window's minimum first
        self._anchors: deque[tuple[int, float]] = deque()

    def stamp(self, arrival: float) -> float:
        """The next frame arrived at ``arrival`` (loop time): when it was captured."""
        index = self._count
        self._count = index + 1
        offset = arrival - index * FRAME_S
        anchors = self._anchors
        if anchors and offset - anchors[0][1] > RESTART_S:
            anchors.clear()  # resumed after a stop: its own arrival is the new anchor
        while anchors and anchors[-1][1] >= offset:
            anchors.pop()
        anchors.append((index, offset))
        if anchors[0][0] <= index - WINDOW:
            anchors.popleft()
        return index * FRAME_S + anchors[0][1]
