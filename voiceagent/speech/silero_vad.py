"""Frame-level voice activity detection with Silero VAD (v6, ONNX) behind the same energy gate.

Silero is a small recurrent network that tells speech from noise far better than webrtcvad's GMM
(loud hiss and steady tones, which pass webrtcvad, do not pass it), at a higher price: one model
call is ~0.2 ms of CPU for a 32 ms window, ~0.12 ms per 20 ms frame of speech against webrtcvad's
~6 us. It is the ``VAD_PROVIDER=silero`` option; webrtcvad stays the default.

- **One model per process.** The ONNX graph is loaded once into one
  ``onnxruntime.InferenceSession`` (single-threaded, sequential: hundreds of conversations each
  calling it from the event loop must not each spin a thread pool). ``InferenceSession.run`` is
  thread safe, so every detector shares it.
- **State per stream.** Silero v5/v6 is stateful: each call takes 64 samples of context (the end
  of the previous window) plus 512 new samples at 16 kHz (32 + 256 at 8 kHz) and an LSTM state
  ``(2, 1, 128)``, and returns a speech probability and the next state. A :class:`SileroVAD`
  keeps its own context and state, so two conversations never hear each other.
- **Frames vs windows.** The engine asks about 20 ms frames (320 samples); the model wants 512.
  Samples are buffered and the model runs each time 512 new ones are there; a frame is answered
  with the latest decision. The decision has Silero's own hysteresis (its ``VADIterator``): speech
  starts at ``threshold`` and ends below ``threshold - 0.15``, so a probability hovering at the
  threshold does not flicker.
- **The energy gate stays in front.** A window quieter than ``min_rms`` dBFS (line noise, the
  caller listening) is silence without running the model: the caller is quiet most of a call, so
  this saves most of the model's cost (``bench/bench_vad.py``: 7 us a frame instead of ~130 while
  the caller listens, -40 % on a call's mix). The skipped audio still becomes the next window's
  context; the recurrent state is kept as it was (resetting it changed more decisions against the
  model run on every window: 8.6 % of frames against 6.8 % on espeak-ng sentences with pauses).
  A frame below the gate is never speech, as with webrtcvad.

The model file ships in the ``silero-vad`` package, whose ``__init__`` imports torch: that package
is installed without its dependencies (``requirements-nodeps.txt``) and never imported; only its
data file is located through the package metadata.
"""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path
from typing import Any, Final

import numpy as np

from voiceagent.speech.audio import frame_bytes_for
from voiceagent.speech.vad import DEFAULT_MIN_RMS_DBFS, VAD_FRAME_MS

__all__ = [
    "MODEL_FILE",
    "PACKAGE",
    "SILERO_RATES",
    "SileroUnavailable",
    "SileroVAD",
    "model_path",
    "shared_session",
]

PACKAGE: Final = "silero-vad"
MODEL_FILE: Final = "silero_vad/data/silero_vad.onnx"
SILERO_RATES: Final = (8000, 16000)
HYSTERESIS: Final = 0.15  # speech ends below threshold - 0.15 (Silero's VADIterator)
_WINDOW = {16000: 512, 8000: 256}
_CONTEXT = {16000: 64, 8000: 32}
_INPUTS: Final = ("input", "state", "sr")
_OUTPUTS: Final = ("output", "stateN")
MISSING = (
    "VAD_PROVIDER=silero needs the silero-vad package: run scripts/_setup.sh (it installs "
    "requirements-nodeps.txt, the model without torch) or set VAD_PROVIDER=webrtc"
)


class SileroUnavailable(RuntimeError):
    """The Silero model cannot be loaded (package missing, file missing, graph not as expected)."""


def model_path() -> Path:
    """Where the installed ``silero-vad`` package keeps its ONNX model (the package is not imported)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise SileroUnavailable(MISSING) from None
    path = Path(str(dist.locate_file(MODEL_FILE)))
    if not path.is_file():
        raise SileroUnavailable(f"{MISSING} ({MODEL_FILE} is not in the installed {PACKAGE} {dist.version})")
    return path


_session: Any = None
_session_lock = threading.Lock()


def shared_session() -> Any:
    """The process's one Silero ``InferenceSession``, created on first use (thread safe).

    Raises :class:`SileroUnavailable` with one clear line when the model cannot be loaded.
    """
    session = _session
    if session is None:
        with _session_lock:
            session = _session
            if session is None:
                session = _load(model_path())
                globals()["_session"] = session
    return session


def _load(path: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # the graph's unused-initializer warnings are noise
    try:
        session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # a corrupt or truncated file: say which, in one line
        raise SileroUnavailable(f"Silero VAD model {path} cannot be loaded: {exc}") from exc
    inputs = tuple(i.name for i in session.get_inputs())
    outputs = tuple(o.name for o in session.get_outputs())
    if sorted(inputs) != sorted(_INPUTS) or outputs != _OUTPUTS:
        raise SileroUnavailable(
            f"Silero VAD model {path} has inputs {inputs} and outputs {outputs}; "
            f"expected {_INPUTS} -> {_OUTPUTS} (Silero v5/v6)"
        )
    return session


class SileroVAD:
    """Decide speech / not speech for one fixed-size PCM16 mono frame at a time, with Silero.

    Same interface as :class:`~voiceagent.speech.vad.VoiceActivityDetector` (``is_speech``,
    ``frame_bytes``). ``threshold`` is the speech probability that starts speech (``SILERO_THRESHOLD``);
    ``min_rms`` is the energy gate in dBFS (``-inf`` disables it). One instance per stream: it holds
    the stream's model state. ``session`` defaults to the process's shared one.
    """

    __slots__ = (
        "_buffer",
        "_fill",
        "_frame_bytes",
        "_gate_ms",
        "_input",
        "_sr",
        "_state",
        "_window",
        "frame_ms",
        "min_rms",
        "probability",
        "sample_rate",
        "session",
        "speaking",
        "threshold",
        "windows_run",
        "windows_skipped",
    )

    def __init__(
        self,
        sample_rate: int = 16000,
        frame_ms: int = 20,
        threshold: float = 0.5,
        min_rms: float = DEFAULT_MIN_RMS_DBFS,
        session: Any = None,
    ):
        if sample_rate not in SILERO_RATES:
            raise ValueError(f"Silero VAD sample rate must be one of {SILERO_RATES}, got {sample_rate!r}")
        if frame_ms not in VAD_FRAME_MS:
            raise ValueError(f"VAD frame must be 10, 20 or 30 ms, got {frame_ms!r}")
        threshold = float(threshold)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"Silero threshold is a probability in (0, 1), got {threshold!r}")
        min_rms = float(min_rms)
        if min_rms > 0:
            raise ValueError(f"min_rms is a level in dBFS and must be <= 0, got {min_rms!r}")
        self.session = session if session is not None else shared_session()
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.threshold = threshold
        self.min_rms = min_rms
        self._frame_bytes = frame_bytes_for(sample_rate, frame_ms)
        self._window = _WINDOW[sample_rate]
        context = _CONTEXT[sample_rate]
        # mean square (of samples scaled to +-1) below which a window is not worth the model
        self._gate_ms = 10.0 ** (min_rms / 10.0)
        self._sr = np.array(sample_rate, dtype=np.int64)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        # the model's input row: [context | window]; the context is the previous window's tail
        self._input = np.zeros((1, context + self._window), dtype=np.float32)
        # samples not yet in a window: at most one window minus one sample plus one frame
        self._buffer = np.zeros(self._window + self._frame_bytes // 2, dtype=np.float32)
        self._fill = 0
        self.probability = 0.0  # the latest window's speech probability (0 for a gated window)
        self.speaking = False  # the hysteresis state
        self.windows_run = 0
        self.windows_skipped = 0

    @property
    def frame_bytes(self) -> int:
        """Size in bytes of the one frame :meth:`is_speech` accepts (640 for 16 kHz, 20 ms)."""
        return self._frame_bytes

    @property
    def label(self) -> str:
        """What decides, for startup logs and ``/readiness`` (``VAD_PROVIDER=silero``)."""
        return f"silero (Silero VAD v6 onnx, threshold {self.threshold:g}, gate {self.min_rms:g} dBFS)"

    def is_speech(self, frame: bytes) -> bool:
        """True when ``frame`` (exactly :attr:`frame_bytes` of PCM16) is loud enough and the model,
        as of the latest complete window, hears speech."""
        if len(frame) != self._frame_bytes:
            raise ValueError(
                f"VAD frame must be {self._frame_bytes} bytes ({self.frame_ms} ms at {self.sample_rate} Hz "
                f"PCM16 mono), got {len(frame)}"
            )
        loud, row = self._take(frame)
        if row is not None:
            out, state = self.session.run(_OUTPUTS, {"input": row, "state": self._state, "sr": self._sr})
            self._settle(float(out[0, 0]), state)
        return loud and self.speaking

    def _take(self, frame: bytes) -> tuple[bool, np.ndarray | None]:
        """Buffer ``frame`` (already checked); return whether it is loud and, when it completes a
        window loud enough for the model, the model's input row ``(1, context + window)``: the
        caller runs the model on it (alone or batched with other streams) and hands the result to
        :meth:`_settle` before the next frame. A window below the gate is settled here."""
        samples = np.frombuffer(frame, dtype="<i2")
        n = samples.size
        buffer, fill = self._buffer, self._fill
        part = buffer[fill : fill + n]  # one view (each slice costs ~0.3 us: it runs for every frame)
        np.multiply(samples, 1.0 / 32768.0, out=part, casting="unsafe")
        loud = bool(part.dot(part) >= self._gate_ms * n)
        fill += n
        window = self._window
        row = None
        if fill >= window:  # at most once: a frame (<= 480 samples) is shorter than a window
            row = self._window_row(buffer[:window])
            fill -= window
            buffer[:fill] = buffer[window : window + fill]
        self._fill = fill
        return loud, row

    def _window_row(self, window: np.ndarray) -> np.ndarray | None:
        row = self._input
        context = row.shape[1] - self._window
        if float(np.dot(window, window)) < self._gate_ms * window.size:
            self.windows_skipped += 1
            self.probability = 0.0
            self.speaking = False
            row[0, :context] = window[-context:]
            return None
        row[0, context:] = window
        return row

    def _settle(self, probability: float, state: np.ndarray) -> None:
        """The model's answer for the row :meth:`_take` returned: next state, hysteresis, and that
        window's tail becomes the next one's context."""
        self._state = state
        self.windows_run += 1
        p = self.probability = probability
        if p >= self.threshold:
            self.speaking = True
        elif p < self.threshold - HYSTERESIS:
            self.speaking = False
        row = self._input
        context = row.shape[1] - self._window
        row[0, :context] = row[0, -context:]

    def reset(self) -> None:
        """Forget the stream (state, context, buffered samples), as for a new caller."""
        self._state = np.zeros_like(self._state)
        self._input[:] = 0.0
        self._fill = 0
        self.probability = 0.0
        self.speaking = False

    def __repr__(self) -> str:
        return (
            f"SileroVAD(sample_rate={self.sample_rate}, frame_ms={self.frame_ms}, "
            f"threshold={self.threshold:g}, min_rms={self.min_rms:g})"
        )
