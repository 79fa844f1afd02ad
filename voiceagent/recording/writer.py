"""The process's recording writer: one daemon thread that turns recorders' items into stored chunks.

Why a thread and a bounded queue: the audio path must never wait for a disk or a bucket. Each
:class:`~voiceagent.recording.recorder.Recorder` puts small items with ``put_nowait`` (a full queue
drops the item and counts it); this thread resamples each side to ``RECORDING_SAMPLE_RATE``, lays
them on the recording's :class:`~voiceagent.recording.timeline.StereoTimeline` and, every
``RECORDING_CHUNK_S``, stores what is final as ``<session>/<recording>/<seq>.pcm`` through the
``recordings`` storage alias (any Django storage backend). ``manifest.json`` beside the chunks is
written at the start and again at the end. A crashed worker loses the last chunk and the queue.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile

from voiceagent.observability import metrics
from voiceagent.recording.timeline import StereoTimeline
from voiceagent.speech.audio import StreamResampler

logger = logging.getLogger("voiceagent.recording")

# audio younger than this may still move, so it is not stored yet: a caller item arrives up to
# recorder.CALLER_ITEM_S after its first sample, gathered agent audio up to CALLER_ITEM_S +
# AGENT_ITEM_S after its own (the caller's items are its clock), a cut lands late
FRONTIER_S = 2.5
STOP_DRAIN_S = 5.0  # at shutdown, how long the queue has to be written out
HOUSEKEEPING_S = 0.1  # how often chunks that are due are looked for
LATE_CLOSE_S = 5.0  # a close that found the queue full is applied once the queue is empty, or this late
MANIFEST = "manifest.json"

#: (recording name ``<sid>/<rid>``, kind, PCM16 bytes or manifest, rate or gain dB, monotonic time)
Item = tuple[str, str, Any, float, float]


def storage():
    """The ``recordings`` storage (``settings.STORAGES``), looked up per use so tests may swap it."""
    from django.core.files.storage import storages

    return storages["recordings"]


@dataclass
class _Part:
    """One recording being written."""

    name: str
    manifest: dict[str, Any]
    timeline: StereoTimeline
    next_chunk: float
    resamplers: dict[tuple[str, int], StreamResampler] = field(default_factory=dict)
    seq: int = 0
    bytes: int = 0
    failed: bool = False


class RecordingWriter:
    """The queue every recorder of this process feeds, and the thread that empties it."""

    def __init__(
        self,
        queue_max: int | None = None,
        chunk_s: float | None = None,
        rate: int | None = None,
        on_stored: Callable[[], None] | None = None,
    ):
        config = settings.CONFIG
        self.on_stored = on_stored or metrics.RECORDING_CHUNKS_WRITTEN.inc  # a chunk was stored
        self.queue: queue.Queue[Item | None] = queue.Queue(queue_max or config.RECORDING_QUEUE_MAX)
        self.chunk_s = float(chunk_s or config.RECORDING_CHUNK_S)
        self.rate = rate  # None: RECORDING_SAMPLE_RATE as configured when each recording opens
        self.late: deque[Item] = deque()  # closes that found the queue full (deque: thread-safe append)
        self._parts: dict[str, _Part] = {}
        self._thread: threading.Thread | None = None
        self._running = False  # the thread is running (a plain flag: read on every submit)
        self._lock = threading.Lock()
        self._last_t = 0.0

    # --- the loop's side --------------------------------------------------------------------------
    def submit(self, item: Item) -> bool:
        """Queue ``item`` without waiting; False when the queue is full (the caller counts it)."""
        if not self._running:
            self._start()
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def put(self, item: Item) -> None:
        """Queue ``item``, waiting while the queue is full (the writer process's reader: there the
        server's side holds the bound, and a full queue holds back its pipe)."""
        if not self._running:
            self._start()
        self.queue.put(item)

    def _start(self) -> None:
        with self._lock:
            if not self._running:
                self._running = True
                self._thread = threading.Thread(target=self._run, name="recording-writer", daemon=True)
                self._thread.start()

    def stop(self, timeout: float = STOP_DRAIN_S) -> None:
        """Write out what is queued (within ``timeout``), close every recording, end the thread."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.queue.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        thread.join(max(0.0, deadline - time.monotonic()))

    # --- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        next_housekeeping = 0.0
        while True:
            try:
                item = self.queue.get(timeout=HOUSEKEEPING_S)
                if item is None:
                    break
                self._last_t = item[4]
                self.handle(item)
                time.sleep(0)  # the GIL back to the event loop after every item, not every 5 ms
            except queue.Empty:
                pass
            except Exception:
                logger.exception("recording writer: an item failed")
            if (now := time.monotonic()) >= next_housekeeping:  # not per item: 200 calls at once
                next_housekeeping = now + HOUSEKEEPING_S
                try:
                    self._housekeeping()
                except Exception:
                    logger.exception("recording writer: storing chunks failed")
        try:
            while self.late:
                self.handle(self.late.popleft())
            for name in list(self._parts):
                self._close(name, time.monotonic())
        finally:
            self._running = False  # a later submit starts it again

    def _housekeeping(self) -> None:
        """Chunks that are due, late closes that may apply, the queue-depth gauge."""
        now = time.monotonic()
        idle = self.queue.empty()
        while self.late and (idle or now - self.late[0][4] > LATE_CLOSE_S):
            self.handle(self.late.popleft())
        frontier = (now if idle else self._last_t) - FRONTIER_S
        for part in list(self._parts.values()):
            if now >= part.next_chunk:
                part.next_chunk = now + self.chunk_s
                self._store(part, part.timeline.take(frontier))
        metrics.RECORDING_QUEUE_DEPTH.set(self.queue.qsize())

    def handle(self, item: Item) -> None:
        """Apply one item to its recording (public for the tests: the thread calls it)."""
        name, kind, data, value, t = item
        if kind == "open":
            self._open(name, data, t)
            return
        part = self._parts.get(name)
        if part is None:
            return  # its open was dropped (a full queue): nothing of it is written
        if kind == "close":
            self._close(name, t)
        elif kind in ("caller", "agent"):
            samples = self._resample(part, kind, data, int(value))
            (part.timeline.caller if kind == "caller" else part.timeline.agent)(samples, t)
        elif kind == "cut":
            part.timeline.cut(t)
            for (side, _), resampler in part.resamplers.items():
                if side == "agent":
                    resampler.reset()
        elif kind == "gain":
            part.timeline.gain(value, t)

    def _resample(self, part: _Part, side: str, pcm: bytes, rate: int) -> np.ndarray:
        resampler = part.resamplers.get((side, rate))
        if resampler is None:
            resampler = part.resamplers[(side, rate)] = StreamResampler(rate, part.timeline.rate)
        return resampler.process(pcm)

    def _open(self, name: str, manifest: dict[str, Any], t: float) -> None:
        rate = int(self.rate or settings.CONFIG.RECORDING_SAMPLE_RATE)
        manifest = {**manifest, "sample_rate": rate, "channels": ["caller", "agent"], "ended_at": None}
        part = _Part(name, manifest, StereoTimeline(rate, t), time.monotonic() + self.chunk_s)
        self._parts[name] = part
        self._save(part, MANIFEST, json.dumps(manifest).encode())

    def _close(self, name: str, t: float) -> None:
        part = self._parts.pop(name)
        timeline = part.timeline
        timeline.cut(t)  # agent audio still queued when the conversation ended was never heard
        self._store(part, timeline.take(None))
        part.manifest.update(
            ended_at=datetime.now(UTC).isoformat(timespec="seconds"), chunks=part.seq, bytes=part.bytes
        )
        self._save(part, MANIFEST, json.dumps(part.manifest).encode(), replace=True)

    def _store(self, part: _Part, data: bytes) -> None:
        if not data:
            return
        if self._save(part, f"{part.seq:06d}.pcm", data):
            part.seq += 1
            part.bytes += len(data)
            self.on_stored()

    def _save(self, part: _Part, leaf: str, data: bytes, replace: bool = False) -> bool:
        """One file of ``part`` through the storage; a failure is logged (once per recording)."""
        name = f"{part.name}/{leaf}"
        try:
            store = storage()
            if replace and store.exists(name):
                store.delete(name)  # a backend that does not overwrite would pick another name
            store.save(name, ContentFile(data))
            return True
        except Exception as exc:
            if not part.failed:
                part.failed = True
                logger.error("recording %s: storing %s failed: %s (said once)", part.name, leaf, exc)
            return False


_writer: Any = None  # RecordingWriter, or writer_process.ProcessWriter (RECORDING_WRITER)
_writer_lock = threading.Lock()


def writer() -> Any:
    """This process's writer, made on first use: a process of its own unless ``RECORDING_WRITER``
    is ``thread`` (both take :data:`Item` s through ``submit`` and keep ``late``)."""
    global _writer
    kind = settings.CONFIG.RECORDING_WRITER
    with _writer_lock:
        if _writer is not None and (kind == "process") != hasattr(_writer, "aclose"):
            _writer.stop()  # the setting changed (tests do): the other kind from now on
            _writer = None
        if _writer is None:
            if kind == "process":
                from voiceagent.recording.writer_process import ProcessWriter

                _writer = ProcessWriter()
            else:
                _writer = RecordingWriter()
        return _writer


async def stop_writer() -> None:
    """Lifecycle stop of ``recording-writer``: drain for at most :data:`STOP_DRAIN_S`, off the loop."""
    import asyncio

    if _writer is None:
        return
    if hasattr(_writer, "aclose"):
        await _writer.aclose(STOP_DRAIN_S)
    else:
        await asyncio.to_thread(_writer.stop)
