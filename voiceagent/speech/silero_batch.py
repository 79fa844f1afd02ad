"""Silero VAD off the event loop: one inference thread per process, every conversation's frames
batched into one model call per tick.

Run inline, the model costs the loop ~0.12 ms per 20 ms frame of speech for every conversation:
200 conversations on one process pushed the loop's lag to p99 608 ms (issue 30). Here the loop
only hands each frame over (:meth:`BatchedSileroVAD.submit`, a queue put) and the verdict comes
back a few milliseconds later, on the loop, in order:

- **One thread, one model call per tick.** The worker wakes on the first frame, waits out the rest
  of its tick (``tick_s``, 5 ms: at most 200 model calls a second, whatever the number of
  conversations), takes every frame queued meanwhile and runs each stream's frames in order
  through the same steps as :meth:`SileroVAD.is_speech` (buffer, energy gate, 512-sample window).
  The windows due in that tick go to the model as ONE batch: Silero v6 takes ``input (B, 576)``
  and ``state (2, B, 128)`` and answers ``(B, 1)`` and ``(2, B, 128)``, row by row the same as B
  calls of one row (tests compare them). A stream with two windows due (it fell a frame behind)
  takes a second round. One call of 200 rows costs ~10 ms against 200 x 0.125 ms alone; onnxruntime
  releases the GIL while it runs, so the loop keeps going on the other core.
- **State per stream, touched by one side at a time.** Each :class:`BatchedSileroVAD` keeps its
  LSTM state, 64-sample context and hysteresis (it is a :class:`SileroVAD`). While any of its frames
  is submitted and not answered, only the worker thread reads or writes them.
- **No thread hop for a frame the model need not hear, while few conversations share the thread**
  (up to ``inline_streams``, 64). A stream with nothing in flight takes its frame on the loop
  (:meth:`SileroVAD._take`: a few microseconds of numpy): a frame that completes no window, or only
  a window under the energy gate (the line between turns, a caller listening), is answered at once,
  in ``submit``; only a loud window's row goes to the worker, already taken. At 10 conversations
  (bench_vs_pipecat's clip) its wake-ups, each a batch of one or two rows and a callback into the
  loop, were half the process's CPU; taking those frames on the loop cut the thread's CPU by a third
  (7.6-10.4 -> 5.0-6.3 ms a session-second) for ~3.6 us a frame there. With many conversations a
  tick's batch amortises the hop and the loop is the scarce core (at 200, taking the frames there
  added ~0.06 of a core to the loop, bench_capacity): every frame goes to the worker, as before.
- **Verdicts back in one callback per batch** (``loop.call_soon_threadsafe``, per event loop),
  which calls each stream's ``on_verdict(frame, speech)`` in the order the frames were submitted.
  A conversation closed meanwhile just ignores its verdicts.
- **Bounded.** A stream has at most ``max_pending`` frames (500: ten seconds, as much as a
  conversation keeps from before its start, which arrives in one burst) submitted and not yet
  answered; past that a new frame is DROPPED: neither judged nor heard by the recogniser, counted
  (``frames_dropped`` on the stream and the batcher) and logged once per stream. The worker's queue
  holds at most conversations x ``max_pending`` frames (320 KB a conversation at 16 kHz).

webrtcvad (~2 us a frame) stays inline and synchronous: the listening side calls ``submit`` when
the VAD has one (:class:`~voiceagent.conversation.listening.AsyncVAD`), ``is_speech`` otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from voiceagent.speech.silero_vad import _OUTPUTS, SileroVAD, shared_session

__all__ = ["BatchedSileroVAD", "SileroBatcher", "shared_batcher"]

logger = logging.getLogger("voiceagent.speech")

TICK_S: Final = 0.005
INLINE_STREAMS: Final = 64  # live streams up to which quiet frames are taken on the loop (see module)
MAX_PENDING_FRAMES: Final = 500  # 10 s of 20 ms frames per stream (ListeningConfig.input_queue_frames)

Verdict = Callable[[bytes, bool], None]
Taken = tuple[bool, np.ndarray] | None  # a frame already taken on the loop: (loud, the model's row)


class SileroBatcher:
    """The inference thread: streams' frames in, one batched model call per tick, verdicts out."""

    def __init__(self, session: Any = None, tick_s: float = TICK_S, inline_streams: int = INLINE_STREAMS):
        self.session = session if session is not None else shared_session()
        self.tick_s = tick_s
        self.inline_streams = inline_streams
        self.streams: weakref.WeakSet[BatchedSileroVAD] = weakref.WeakSet()  # live, that submitted
        self._inbox: queue.SimpleQueue[tuple[BatchedSileroVAD, bytes, Taken] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.thread_id: int | None = None  # the worker's, once it runs (tests check who infers)
        self.frames = 0  # frames judged on the thread (its counter: written by the worker only)
        self.frames_inline = 0  # frames answered on the loop, in ``submit`` (written there only)
        self.model_calls = 0
        self.windows = 0  # rows the model ran
        self.largest_batch = 0
        self.frames_dropped = 0  # refused by a full stream (see BatchedSileroVAD.submit)
        self.failures = 0  # model calls that raised (their frames answered "not speech")

    def put(self, stream: BatchedSileroVAD, frame: bytes, taken: Taken = None) -> None:
        """Queue one frame of ``stream`` (any thread; the loop's in practice); ``taken``: its
        ``(loud, row)`` when the submitter already took it (a loud window due)."""
        if self._thread is None:
            self._start()
        self._inbox.put((stream, frame, taken))

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="silero-vad", daemon=True)
                thread.start()
                self._thread = thread

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread after the frames already queued (tests; the process's one is a daemon)."""
        thread = self._thread
        if thread is not None:
            self._inbox.put(None)
            thread.join(timeout)
            self._thread = None

    def stats(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "frames_inline": self.frames_inline,
            "model_calls": self.model_calls,
            "windows": self.windows,
            "largest_batch": self.largest_batch,
            "frames_dropped": self.frames_dropped,
            "failures": self.failures,
        }

    def _run(self) -> None:
        self.thread_id = threading.get_ident()
        inbox, last = self._inbox, time.monotonic()
        while True:
            first = inbox.get()
            wait = last + self.tick_s - time.monotonic()
            if wait > 0 and first is not None:
                time.sleep(wait)  # the rest of the tick: let the other streams' frames come in
            last = time.monotonic()
            items = [first]
            while True:
                try:
                    items.append(inbox.get_nowait())
                except queue.Empty:
                    break
            stop = None in items
            try:
                self._batch([item for item in items if item is not None])
            except Exception:  # a bug here must not kill the thread every conversation waits on
                logger.exception("Silero VAD batch failed")
            if stop:
                return
            first = items = None  # no stream kept alive (and counted live) while the thread waits

    def _batch(self, items: list[tuple[BatchedSileroVAD, bytes, Taken]]) -> None:
        frames: dict[BatchedSileroVAD, deque[tuple[bytes, Taken]]] = {}
        for stream, frame, taken in items:
            frames.setdefault(stream, deque()).append((frame, taken))
        out: dict[asyncio.AbstractEventLoop, list[tuple[BatchedSileroVAD, bytes, bool]]] = {}
        while frames:  # a round: each stream up to (and including) its next window for the model
            due: dict[int, list[tuple[BatchedSileroVAD, bytes, bool, np.ndarray]]] = {}
            for stream, pending in list(frames.items()):
                answers = out.setdefault(stream.loop, [])
                while pending:
                    frame, taken = pending.popleft()
                    loud, row = stream._take(frame) if taken is None else taken
                    if row is None:
                        answers.append((stream, frame, loud and stream.speaking))
                    else:
                        due.setdefault(stream.sample_rate, []).append((stream, frame, loud, row))
                        break
                if not pending:
                    del frames[stream]
            for group in due.values():
                self._infer(group, out)
        self.frames += len(items)
        for loop, answers in out.items():
            if answers:
                with contextlib.suppress(RuntimeError):  # a closed loop: its conversations are gone
                    loop.call_soon_threadsafe(_deliver, answers)

    def _infer(self, group: list, out: dict) -> None:
        rows = np.concatenate([row for _, _, _, row in group])
        state = np.concatenate([stream._state for stream, _, _, _ in group], axis=1)
        try:
            probs, state = self.session.run(_OUTPUTS, {"input": rows, "state": state, "sr": group[0][0]._sr})
        except Exception:
            self.failures += 1
            if self.failures == 1:
                logger.exception("Silero VAD model call failed; its frames count as silence")
            for stream, frame, _, _ in group:
                out[stream.loop].append((stream, frame, False))
            return
        self.model_calls += 1
        self.windows += len(group)
        self.largest_batch = max(self.largest_batch, len(group))
        for i, (stream, frame, loud, _) in enumerate(group):
            stream._settle(float(probs[i, 0]), state[:, i : i + 1, :])
            out[stream.loop].append((stream, frame, loud and stream.speaking))


def _deliver(answers: list[tuple[BatchedSileroVAD, bytes, bool]]) -> None:
    """On the loop: each frame's verdict to its conversation, in submission order."""
    for stream, frame, speech in answers:
        stream.in_flight -= 1
        try:
            stream.on_verdict(frame, speech)
        except Exception:  # one conversation's bug must not cost the others their verdicts
            logger.exception("a VAD verdict could not be handled")


_batcher: SileroBatcher | None = None
_batcher_lock = threading.Lock()


def shared_batcher() -> SileroBatcher:
    """The process's one inference thread, on the process's one Silero session (raises
    :class:`~voiceagent.speech.silero_vad.SileroUnavailable` when the model cannot be loaded)."""
    global _batcher
    session = shared_session()
    with _batcher_lock:
        if _batcher is None or _batcher.session is not session:  # a new session: only in tests
            _batcher = SileroBatcher(session)
        return _batcher


def _ignore(frame: bytes, speech: bool) -> None:
    pass


class BatchedSileroVAD(SileroVAD):
    """A :class:`SileroVAD` whose frames are judged on the batcher's thread: :meth:`submit` a frame,
    ``on_verdict(frame, speech)`` is called on the submitting loop, in order. One per stream;
    ``is_speech`` still works (synchronously) but must not be mixed with ``submit`` on one stream."""

    __slots__ = (
        "__weakref__",
        "_warned",
        "batcher",
        "frames_dropped",
        "in_flight",
        "loop",
        "max_pending",
        "on_verdict",
    )

    def __init__(
        self,
        sample_rate: int = 16000,
        frame_ms: int = 20,
        threshold: float = 0.5,
        batcher: SileroBatcher | None = None,
        max_pending: int = MAX_PENDING_FRAMES,
        **options: Any,
    ):
        self.batcher = batcher if batcher is not None else shared_batcher()
        options.setdefault("session", self.batcher.session)
        super().__init__(sample_rate, frame_ms, threshold, **options)
        self.max_pending = max_pending
        self.in_flight = 0  # submitted, verdict not delivered yet (loop side only)
        self.frames_dropped = 0
        self.loop: Any = None
        self.on_verdict: Verdict = _ignore
        self._warned = False

    @property
    def label(self) -> str:
        return super().label.removesuffix(")") + ", batched on one thread per process)"

    def submit(self, frame: bytes, on_verdict: Verdict) -> None:
        """Judge ``frame``; ``on_verdict(frame, speech)`` follows on this loop, after the verdicts of
        the frames submitted before: at once, before this returns, when the model need not hear it
        and nothing is in flight; otherwise from the worker. A full stream drops the frame (see
        module)."""
        if len(frame) != self._frame_bytes:
            raise ValueError(
                f"VAD frame must be {self._frame_bytes} bytes ({self.frame_ms} ms at {self.sample_rate} Hz "
                f"PCM16 mono), got {len(frame)}"
            )
        if self.in_flight >= self.max_pending:
            self.frames_dropped += 1
            self.batcher.frames_dropped += 1
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Silero VAD is %d frames behind: caller audio dropped until it catches up "
                    "(counted in frames_dropped)",
                    self.in_flight,
                )
            return
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
            self.batcher.streams.add(self)
        self.on_verdict = on_verdict
        taken: Taken = None
        batcher = self.batcher
        # nothing in flight: the worker holds none of this stream's frames, its state is ours
        if not self.in_flight and len(batcher.streams) <= batcher.inline_streams:
            loud, row = self._take(frame)
            if row is None:  # no window for the model: answered now, no thread hop
                batcher.frames_inline += 1
                on_verdict(frame, loud and self.speaking)
                return
            taken = (loud, row)
        self.in_flight += 1
        batcher.put(self, frame, taken)
