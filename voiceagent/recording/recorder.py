"""The loop side of one recording: the transport driver's taps call it, it never waits.

Why so little here: this runs on the event loop, inside every audio frame's path. Caller audio is
gathered into 1 s items (a frame is 20 ms: one queue put in fifty); agent audio too, while it
comes back to back (a line arrives faster than it plays; a chunk that comes after the gathered
audio would have played starts a new item, so a gap stays a gap); cuts and ducks are one item
each, and every item goes to the process's
:class:`~voiceagent.recording.writer.RecordingWriter` with ``put_nowait``. A full queue drops the
item, counts it (``voiceagent_recording_dropped_total``) and says so once per recording.
"""

from __future__ import annotations

import logging
import secrets
import time
from datetime import UTC, datetime

from voiceagent.observability import metrics
from voiceagent.recording.writer import RecordingWriter, writer

logger = logging.getLogger("voiceagent.recording")

# caller audio per queued item: at 200 conversations on two cores, 250 ms items (1600 a second
# with the agent's) kept the writer thread busy enough to double the server's added latency and
# overflow its queue (bench_capacity --mode cloud --recording); the writer's cost is per item
CALLER_ITEM_S = 1.0
AGENT_ITEM_S = 1.0  # agent audio per queued item, at most


def new_recording_id() -> str:
    """``yyyymmddThhmmssmmmZ-xxxx`` (UTC, milliseconds): a session's parts sort in time order."""
    now = datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}Z-{secrets.token_hex(2)}"


def storage_safe(session_id: str) -> bool:
    """Session ids may hold ``.``: ``.`` and ``..`` alone would leave the session's folder."""
    return session_id not in ("", ".", "..")


class Recorder:
    """Records one conversation from :meth:`__init__` to :meth:`close`."""

    def __init__(self, session_id: str, transport: str, sink: RecordingWriter | None = None):
        self.sink = sink or writer()
        self.session_id = session_id
        self.recording_id = new_recording_id()
        self.name = f"{session_id}/{self.recording_id}"
        self.dropped = 0
        self.closed = False
        self._caller = bytearray()
        self._caller_rate = 0
        self._agent = bytearray()
        self._agent_rate = 0
        self._agent_t = 0.0  # when the gathered agent audio's first chunk came
        if not storage_safe(session_id):
            logger.warning("session %r cannot name a recording's folder: not recorded", session_id)
            self.closed = True
            return
        manifest = {
            "session_id": session_id,
            "recording_id": self.recording_id,
            "transport": transport,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self._put("open", manifest, 0)

    def caller(self, pcm: bytes, rate: int) -> None:
        """Caller audio as it arrived (PCM16 mono at ``rate``). Every wire sends it all along
        (silence too), so it is also the clock that sends agent audio gathered for
        :data:`AGENT_ITEM_S` (the writer stores what is older than its frontier)."""
        if rate != self._caller_rate:
            self._flush_caller()
            self._caller_rate = rate
        self._caller += pcm
        if len(self._caller) >= rate * 2 * CALLER_ITEM_S:
            self._flush_caller()
            if self._agent and time.monotonic() - self._agent_t >= AGENT_ITEM_S:
                self.flush()

    def agent(self, pcm: bytes, rate: int) -> None:
        """Agent audio handed to the wire at ``rate``."""
        now = time.monotonic()
        if self._agent and (rate != self._agent_rate or now > self._agent_t + len(self._agent) / (2 * rate)):
            self.flush()  # another rate, or the gathered audio has played: this starts after a gap
        if not self._agent:
            self._agent_t, self._agent_rate = now, rate
        self._agent += pcm
        if len(self._agent) >= rate * 2 * AGENT_ITEM_S:
            self.flush()

    def flush(self) -> None:
        """The agent audio gathered so far goes out (the driver calls this at every other event)."""
        if self._agent:
            self._put("agent", bytes(self._agent), self._agent_rate, self._agent_t)
            self._agent.clear()

    def cut(self) -> None:
        """A barge-in: agent audio not heard by now never will be."""
        self.flush()
        self._put("cut", b"", 0)

    def gain(self, db: float) -> None:
        """The agent is ducked to ``db`` from now (0: restored)."""
        self.flush()
        self._put("gain", b"", db)

    def close(self) -> None:
        """The conversation ended: the last caller audio and the close go to the writer."""
        if self.closed:
            return
        self._flush_caller()
        self.flush()
        self.closed = True
        item = (self.name, "close", b"", 0.0, time.monotonic())
        if not self.sink.submit(item):
            self.sink.late.append(item)  # a close is never lost: applied once the queue has room

    def _flush_caller(self) -> None:
        if self._caller:
            self._put("caller", bytes(self._caller), self._caller_rate)
            self._caller.clear()

    def _put(self, kind: str, data: object, value: float, t: float | None = None) -> None:
        if self.closed:
            return
        if not self.sink.submit((self.name, kind, data, value, time.monotonic() if t is None else t)):
            self.dropped += 1
            metrics.RECORDING_DROPPED.inc()
            if self.dropped == 1:
                logger.warning(
                    "recording %s: the writer's queue is full, audio is dropped "
                    "(counted in voiceagent_recording_dropped_total; said once per recording)",
                    self.name,
                )
