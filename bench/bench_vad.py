"""Benchmark the two voice activity detectors (VAD_PROVIDER=webrtc|silero) on one core.

Every 20 ms inbound frame of every cascade conversation goes through the VAD, so its cost per frame
times 50 frames a second is what each caller costs the server before any STT. Three kinds of caller
audio (16 kHz, 20 ms frames, with -60 dBFS line noise under everything):

- ``listening``: line noise only (the caller hears the agent): below the energy gate;
- ``talking``: espeak-ng sentences back to back (every window above the gate: Silero's worst case);
- ``call``: the same sentences with a second of silence between them (about half the time talking).

For each: CPU microseconds per frame (the best of ``--runs``), and CPU seconds per 1000
session-seconds (= cores busy for 1000 concurrent callers). ``silero_batched`` is what the server
runs (``speech/silero_batch.py``): ``--streams`` callers, each starting at another point of the
audio, whose frames go through the batcher one 20 ms tick at a time (every stream's next frame, one
model call for the windows due), measured on the calling thread (no worker thread, no loop).
Silero also runs without its energy gate (``silero_ungated``), and the gate's effect is measured:
the share of model windows it skips on the call audio and the share of frames whose decision it
changes.

Prints one JSON line. Usage: python bench/bench_vad.py [--runs N] [--streams N]
"""

import os

# One core: no BLAS/OpenMP helper threads (set before numpy is imported).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from voiceagent.conversation.specs import VoiceSpec  # noqa: E402
from voiceagent.speech.offline_tts import EspeakTTS  # noqa: E402
from voiceagent.speech.silero_batch import BatchedSileroVAD, SileroBatcher  # noqa: E402
from voiceagent.speech.silero_vad import SileroVAD, shared_session  # noqa: E402
from voiceagent.speech.vad import VoiceActivityDetector  # noqa: E402

RATE = 16000
FRAME = 320  # 20 ms
FRAMES_PER_S = 1000 // 20
SENTENCES = (
    "Hello, I would like to check the balance of my account.",
    "My card number is four five six seven, eight nine one two.",
    "Yes, that is right.",
    "I think somebody used my card in a shop I have never been to.",
    "Thank you very much for your help, goodbye.",
)


async def _speak(text: str) -> np.ndarray:
    tts = EspeakTTS(sample_rate=RATE)
    audio = bytearray()
    async for chunk in tts.synthesize(text, VoiceSpec()):
        audio += chunk
    await tts.close()
    return np.frombuffer(bytes(audio), "<i2")


def _with_line_noise(x: np.ndarray, seed: int) -> bytes:
    noise = np.random.default_rng(seed).standard_normal(x.size) * 32768 * 10 ** (-60 / 20)
    return np.clip(np.rint(x.astype(np.float64) + noise), -32768, 32767).astype("<i2").tobytes()


def _frames(pcm: bytes) -> list[bytes]:
    return [pcm[i : i + 2 * FRAME] for i in range(0, len(pcm) - 2 * FRAME + 1, 2 * FRAME)]


def corpus() -> dict[str, list[bytes]]:
    speech = [asyncio.run(_speak(s)) for s in SENTENCES]
    gap = np.zeros(RATE, np.int16)
    call = np.concatenate([part for s in speech for part in (gap, s)] + [gap])
    return {
        "listening": _frames(_with_line_noise(np.zeros(RATE * 20, np.int16), 1)),
        "talking": _frames(_with_line_noise(np.concatenate(speech), 2)),
        "call": _frames(_with_line_noise(call, 3)),
    }


DETECTORS = {
    "webrtc": lambda: VoiceActivityDetector(RATE, 20, aggressiveness=2),
    "silero": lambda: SileroVAD(RATE, 20),
    "silero_ungated": lambda: SileroVAD(RATE, 20, min_rms=-math.inf),
}


def cpu_us_per_frame(make, frames: list[bytes]) -> float:
    """CPU time of one fresh stream (a new caller) through ``frames``, per frame."""
    vad = make()
    began = time.process_time()
    for frame in frames:
        vad.is_speech(frame)
    return (time.process_time() - began) / len(frames) * 1e6


class _NoLoop:
    def call_soon_threadsafe(self, *args: object) -> None:
        pass


def batched_us_per_frame(frames: list[bytes], streams: int) -> float:
    """CPU time per frame of ``streams`` fresh callers judged by one batcher, a tick at a time."""
    batcher = SileroBatcher(shared_session())
    vads = [BatchedSileroVAD(RATE, 20, batcher=batcher) for _ in range(streams)]
    for vad in vads:
        vad.loop = _NoLoop()
    step = max(1, len(frames) // streams)
    began = time.process_time()
    for i in range(len(frames)):
        batcher._batch([(vad, frames[(i + k * step) % len(frames)]) for k, vad in enumerate(vads)])
    return (time.process_time() - began) / (len(frames) * streams) * 1e6


def gate_effect(frames: list[bytes]) -> dict[str, float]:
    gated, ungated = SileroVAD(RATE, 20), SileroVAD(RATE, 20, min_rms=-math.inf)
    a = np.array([gated.is_speech(f) for f in frames])
    b = np.array([ungated.is_speech(f) for f in frames])
    # the frame-level rule alone (a frame below the gate is never speech), with the model on every window
    loud = np.array([_loud(f) for f in frames])
    windows = gated.windows_run + gated.windows_skipped
    return {
        "windows_skipped_share": round(gated.windows_skipped / windows, 3),
        "frames_changed_share": round(float((a != b).mean()), 3),
        "frames_changed_by_skipping_model_share": round(float((a != (b & loud)).mean()), 3),
        "speech_frames_gated": int(a.sum()),
        "speech_frames_ungated": int(b.sum()),
    }


def _loud(frame: bytes) -> bool:
    x = np.frombuffer(frame, "<i2").astype(np.float64) / 32768.0
    return float(np.dot(x, x)) / x.size >= 10 ** (-45 / 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--streams", type=int, default=50, help="silero_batched: callers at once")
    args = parser.parse_args()
    shared_session()  # the model load is startup cost, not per frame
    audio = corpus()
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.runs):  # interleaved, best of runs: the machine's other load drifts
        for name, make in DETECTORS.items():
            for kind, frames in audio.items():
                us = cpu_us_per_frame(make, frames)
                best[name, kind] = min(us, best.get((name, kind), math.inf))
            for kind in ("talking", "call"):  # "listening" never reaches the model
                us = batched_us_per_frame(audio[kind], args.streams)
                best["silero_batched", kind] = min(us, best.get(("silero_batched", kind), math.inf))
    figures: dict[str, dict[str, float]] = {}
    for (name, kind), us in best.items():
        figures.setdefault(name, {})[f"{kind}_us_per_frame"] = round(us, 2)
        # us per frame x 50 frames/s x 1000 sessions = CPU us per second -> CPU s per 1000 session-s
        figures[name][f"{kind}_cpu_s_per_1000_session_s"] = round(us * FRAMES_PER_S * 1000 / 1e6, 3)
    print(
        json.dumps(
            {
                "bench": "vad",
                "frame_ms": 20,
                "sample_rate": RATE,
                "runs": args.runs,
                "batched_streams": args.streams,
                "seconds": {kind: round(len(f) / FRAMES_PER_S, 1) for kind, f in audio.items()},
                **figures,
                "silero_gate_on_call": gate_effect(audio["call"]),
            }
        )
    )


if __name__ == "__main__":
    main()
