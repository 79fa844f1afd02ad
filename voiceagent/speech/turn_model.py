"""End-of-turn model: Smart Turn v3.2 (BSD-2, Daily) on onnxruntime, off the event loop.

Why a model besides the lexical rule (:func:`voiceagent.conversation.turn_taking.endpoint_ms`):
the words say when a clause is unfinished ("my card number is"), but not when a complete-sounding
turn is over: the rule had to wait ``VAD_SILENCE_TIMEOUT`` (500 ms) of silence after every
sentence. Smart Turn hears the intonation and the pace of the last 8 s of the caller's audio and
says, after ~100-200 ms of silence, how likely the turn is complete; the engine fuses the two
(:mod:`voiceagent.conversation.end_of_turn`).

- **Weights from a registry package.** The model ships inside the ``pipecat-ai`` wheel
  (``pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx``, int8, 8.7 MB). That package is
  installed without its dependencies (``requirements-nodeps.txt``) and NEVER imported: the file
  is located through the package metadata, as for Silero (:mod:`voiceagent.speech.silero_vad`).
- **Input** (read from pipecat 1.14's ``local_smart_turn_v3``, reimplemented here): the last 8 s
  of 16 kHz audio, zero-padded at the START when shorter, turned into Whisper log-mel features
  (80 x 800) after scaling the waveform to zero mean and unit variance
  (:func:`voiceagent.speech.log_mel.log_mel` with ``normalize=True``; equal to pipecat's to 1e-6);
  the output ``logits`` is already a sigmoid probability that the turn is complete.
- **Off the loop** (docs/architecture.md, "Models off the loop"): one ``InferenceSession`` per
  process (one intra-op thread: two cores are shared with the recogniser), one worker thread, a
  bounded queue served oldest first; a request the caller made stale (they spoke again) is skipped
  when its turn comes; results go back with ``loop.call_soon_threadsafe``. onnxruntime and numpy's
  FFT release the GIL. ~30-40 ms of one core per call (28 of them onnxruntime's).
- **It gives way in a burst.** While the recogniser is backlogged (:attr:`SmartTurnModel.give_way`,
  set by :func:`voiceagent.speech.factory.build_turn_model` to ``WhisperSTT.backlogged``: more
  decodes wait than a round of its workers can serve) a request is answered ``None`` unscored:
  there the words come after ``VAD_SILENCE_TIMEOUT`` and decide alone, as they do when the model
  answers after them. Before (2026-11-29) the thread ran niced behind recognition
  (:mod:`voiceagent.speech.priority`) for the burst's sake (bench_stt_burst, 12 callers: slowest
  final 1.71 -> 1.63 s), which made every answer late outside bursts too: at 8 conversations a
  call took 75-85 ms of wall time for 38 of CPU, and a sure turn's end waits for the model's
  answer (bench_turn_taking seed 16 webrtc, decision p50 297.5-322.5 ms niced, 276.5-283.5 not).
- **A bounded wait.** While its answer is on the way a pause is held as the most doubting answer
  would hold it (:mod:`voiceagent.conversation.end_of_turn`), so a backlog here would hold every
  caller's turn: at 200 conversations (bench_capacity, Silero) the 32-deep queue answered ~1 s
  late and the caller's end of turn reached the recogniser 1.5 s late at p50. A pause that would
  wait more than :data:`MAX_WAIT_S` for the thread is not taken: refused when the requests ahead
  of it, at the recent wall time of a call, would keep it longer (``shed``), and answered ``None``
  unscored when it still waited longer (``late``: the thread was short of a core). Then the words
  judge it alone, as with ``TURN_MODEL=none``, ~500 ms into the pause (``VAD_SILENCE_TIMEOUT``).
- A full queue refuses the request (the pause is judged by the lexical rule alone); a failing call
  answers ``None`` (the same); each logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

from voiceagent.speech.log_mel import SAMPLE_RATE, log_mel

__all__ = [
    "MODEL_FILE",
    "OUTCOMES",
    "PACKAGE",
    "SmartTurnModel",
    "TurnModelUnavailable",
    "model_path",
    "on_outcome",
]

logger = logging.getLogger("voiceagent.speech.turn_model")

PACKAGE: Final = "pipecat-ai"
MODEL_FILE: Final = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
WINDOW_S: Final = 8
FRAMES: Final = WINDOW_S * SAMPLE_RATE // 160  # 800 feature frames of 10 ms
QUEUE_SIZE: Final = 32  # pauses waiting for the model; beyond, the lexical rule alone judges
# the longest a pause waits for the model's thread: asked 160 ms into the pause, with its call
# (~40-130 ms) it answers about when the words end a complete sentence (500 ms); a later answer can
# only hold the turn longer. Room for two calls ahead at 8 conversations (bench_turn_taking).
MAX_WAIT_S: Final = 0.35
FIRST_CALL_S: Final = 0.05  # a call's wall time before one is measured
MISSING = (
    "TURN_MODEL=smart-turn needs the pipecat-ai package's model file: run scripts/_setup.sh (it "
    "installs requirements-nodeps.txt without dependencies) or set TURN_MODEL=none"
)

Request = tuple[
    bytes, asyncio.AbstractEventLoop, Callable[[float | None], None], Callable[[], bool] | None, float
]


# what became of a request: scored (or failed, None), or judged by the words alone without the
# model (shed, late, full, gave_way), or no longer wanted (stale); told to the Prometheus counter
OUTCOMES: Final = ("scored", "failed", "shed", "late", "full", "gave_way", "stale")
_LISTENERS: list[Callable[[str], None]] = []


def on_outcome(listener: Callable[[str], None]) -> None:
    """``listener(outcome)`` for each request's outcome (:data:`OUTCOMES`), process-wide; called on
    the loop (shed, full) or the model's thread (the rest): it must be thread-safe and quick."""
    _LISTENERS.append(listener)


def _tell(outcome: str) -> None:
    for listener in _LISTENERS:
        with contextlib.suppress(Exception):  # a broken listener never stops the model
            listener(outcome)


class TurnModelUnavailable(RuntimeError):
    """The end-of-turn model cannot be loaded (package or file missing, graph not as expected)."""


def model_path() -> Path:
    """Where the installed ``pipecat-ai`` package keeps Smart Turn (the package is not imported)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise TurnModelUnavailable(MISSING) from None
    path = Path(str(dist.locate_file(MODEL_FILE)))
    if not path.is_file():
        missing = f"{MODEL_FILE} is not in the installed {PACKAGE} {dist.version}"
        raise TurnModelUnavailable(f"{MISSING} ({missing})")
    return path


def features(pcm16: bytes) -> np.ndarray:
    """The model's input for the utterance audio ``pcm16`` (16 kHz): its last 8 s, zero-padded at
    the start, as normalised Whisper log-mel features of shape (1, 80, 800)."""
    samples = WINDOW_S * SAMPLE_RATE
    audio = np.frombuffer(pcm16, "<i2", count=len(pcm16) // 2)[-samples:]
    if len(audio) < samples:
        audio = np.concatenate([np.zeros(samples - len(audio), np.int16), audio])
    return log_mel(audio, FRAMES, normalize=True)[None]


class SmartTurnModel:
    """``TurnModel`` (voiceagent.conversation.providers) on Smart Turn v3.2: one per process."""

    name = "smart-turn-v3.2"

    def __init__(
        self,
        path: Path | None = None,
        queue_size: int = QUEUE_SIZE,
        threads: int = 1,
        max_wait_s: float = MAX_WAIT_S,
    ):
        self.path = path or model_path()
        self._session = _load(self.path, threads)
        self.size = queue_size
        self.max_wait_s = max_wait_s
        self._call_s = FIRST_CALL_S  # recent wall time of a call (moving average): the expected wait
        self._in_call = 0  # 1 while the thread serves a request
        self._queue: queue.Queue[Request | None] = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        version = _version()
        self.label = f"{self.name} (ONNX from {PACKAGE} {version}, onnxruntime, {threads} thread)"
        # asked in the worker thread before each call: True while the recogniser is backlogged (a
        # burst), and the request is answered None unscored (see the module's notes)
        self.give_way: Callable[[], bool] | None = None
        # figures for benchmarks: calls answered, their CPU and wall time, refusals (queue full),
        # stale skips, requests that gave way to the recogniser, that would have waited too long
        # (shed) and that did (late)
        self.calls = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.refused = 0
        self.skipped = 0
        self.gave_way = 0
        self.shed = 0
        self.late = 0

    def score(self, pcm16: bytes) -> float:
        """The probability (0-1) that the turn whose audio ends with ``pcm16`` is complete.
        Blocking (~50-90 ms): call it from a worker thread, never from the event loop."""
        outputs = self._session.run(None, {"input_features": features(pcm16)})
        return float(np.asarray(outputs[0]).reshape(-1)[0])

    def predict(
        self,
        pcm16: bytes,
        on_result: Callable[[float | None], None],
        wanted: Callable[[], bool] | None = None,
    ) -> bool:
        """Queue ``pcm16`` for scoring; ``on_result(probability or None)`` is called later on the
        calling event loop. ``wanted()`` (asked in the worker thread just before scoring) may say the
        answer is no longer needed. False (and no callback) when the queue is full or the requests
        ahead would keep this one past ``max_wait_s``: the words judge that pause alone."""
        loop = asyncio.get_running_loop()
        self._ensure_thread()
        ahead = self._queue.qsize() + self._in_call
        if ahead and ahead * self._call_s > self.max_wait_s:
            self.shed += 1
            _tell("shed")
            wait_ms = round(ahead * self._call_s * 1000)
            self._warn_once(
                "behind", "end-of-turn model behind (~%d ms): pauses judged by words meanwhile", wait_ms
            )
            return False
        try:
            self._queue.put_nowait((pcm16, loop, on_result, wanted, time.monotonic()))
        except queue.Full:
            self.refused += 1
            _tell("full")
            self._warn_once("full", "end-of-turn model queue full (%d): pauses judged by words", self.size)
            return False
        return True

    def close(self) -> None:
        """Stop the worker thread (queued requests are dropped without an answer)."""
        thread = self._thread
        if thread is None:
            return
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        thread.join(timeout=5)
        self._thread = None

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._work, name="turn-model", daemon=True)
                thread.start()
                self._thread = thread

    def _work(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            self._in_call = 1
            try:
                self._serve(*request)
            finally:
                self._in_call = 0

    def _serve(
        self, pcm16: bytes, loop: Any, on_result: Callable, wanted: Callable | None, queued: float
    ) -> None:
        if wanted is not None and not wanted():
            self.skipped += 1
            _tell("stale")
            return
        probability: float | None = None
        if time.monotonic() - queued > self.max_wait_s:
            self.late += 1  # its pause is held for it: let the words judge it now
            _tell("late")
        elif self._gives_way():
            self.gave_way += 1
            _tell("gave_way")
        else:
            probability = self._timed_score(pcm16)
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for the answer
            loop.call_soon_threadsafe(on_result, probability)

    def _gives_way(self) -> bool:
        give_way = self.give_way
        if give_way is None:
            return False
        try:
            return bool(give_way())
        except Exception:  # a broken predicate never stops the model
            return False

    def _timed_score(self, pcm16: bytes) -> float | None:
        """:meth:`score`, its time counted; None (the words alone judge that pause) when it fails."""
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        probability: float | None
        try:
            probability = self.score(pcm16)
        except Exception as exc:
            probability = None
            self._warn_once("error", "end-of-turn model failed, judging by words alone: %s", exc)
        wall = time.perf_counter() - wall0
        self.cpu_s += time.thread_time() - cpu0
        self.wall_s += wall
        self._call_s += (wall - self._call_s) * 0.2
        self.calls += 1
        _tell("failed" if probability is None else "scored")
        return probability

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)


def _version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _load(path: Path, threads: int) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # a corrupt or truncated file: say which, in one line
        raise TurnModelUnavailable(f"end-of-turn model {path} cannot be loaded: {exc}") from exc
    inputs = [(i.name, list(i.shape)[1:]) for i in session.get_inputs()]
    if inputs != [("input_features", [80, FRAMES])]:
        expected = f"input_features (80, {FRAMES})"
        raise TurnModelUnavailable(f"end-of-turn model {path} takes {inputs}, not {expected}")
    return session
