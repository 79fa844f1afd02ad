"""Benchmark the telephony codec chain: G.711 mu-law 8 kHz <-> PCM16 24 kHz.

Does what a phone transport does for one call, on one core: 60 s of inbound 20 ms mu-law frames are
decoded and resampled to 24 kHz, and the 24 kHz PCM is resampled back to 8 kHz and mu-law encoded,
frame by frame through the streaming classes. Also measures the same work on one big buffer.

Prints one JSON line. Usage: python bench/bench_audio.py [--runs N] [--quality MQ]
"""

import os

# One core: no BLAS/OpenMP helper threads (set before numpy is imported).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from voiceagent.speech.audio import (  # noqa: E402
    DEFAULT_QUALITY,
    MulawStreamDecoder,
    MulawStreamEncoder,
    generate_tone,
    ulaw_decode,
    ulaw_encode,
)

AUDIO_SECONDS = 60
FRAME_MS = 20
TARGET_RTF = 2000
IN_RATE = 8000
PCM_RATE = 24000


def pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})


def make_payload() -> bytes:
    """Speech-ish test signal: two tones plus noise at a conversational level, mu-law encoded."""
    ms = AUDIO_SECONDS * 1000
    rng = np.random.default_rng(0)
    x = generate_tone(IN_RATE, ms, 440, 0.2).astype(np.int32) + generate_tone(IN_RATE, ms, 1250, 0.1)
    x += (rng.standard_normal(x.size) * 300).astype(np.int32)
    return ulaw_encode(np.clip(x, -32768, 32767).astype(np.int16))


def run_frames(frames: list[bytes], quality: str) -> tuple[float, int]:
    dec = MulawStreamDecoder(PCM_RATE, quality=quality)
    enc = MulawStreamEncoder(PCM_RATE, quality=quality)
    decode, encode = dec.decode, enc.encode
    out = 0
    t0 = time.perf_counter()
    for payload in frames:
        out += len(encode(decode(payload)))
    out += len(enc.encode(dec.flush())) + len(enc.flush())
    return time.perf_counter() - t0, out


def run_big(payload: bytes, quality: str) -> tuple[float, bytes]:
    dec = MulawStreamDecoder(PCM_RATE, quality=quality)
    enc = MulawStreamEncoder(PCM_RATE, quality=quality)
    t0 = time.perf_counter()
    pcm = np.concatenate([dec.decode(payload), dec.flush()])
    out = enc.encode(pcm) + enc.flush()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="repetitions; the median is reported")
    parser.add_argument("--quality", default=DEFAULT_QUALITY)
    args = parser.parse_args()

    pin_one_core()
    payload = make_payload()
    frame_bytes = IN_RATE * FRAME_MS // 1000  # 1 byte per mu-law sample
    frames = [payload[i : i + frame_bytes] for i in range(0, len(payload), frame_bytes)]

    run_frames(frames[:500], args.quality)  # warm-up (tables, allocator, soxr init)
    frame_times, n_out = [], 0
    for _ in range(args.runs):
        wall, n_out = run_frames(frames, args.quality)
        frame_times.append(wall)
    big_times, big_out = [], b""
    for _ in range(args.runs):
        wall, big_out = run_big(payload, args.quality)
        big_times.append(wall)

    # Sanity: nothing lost, and the audio survived the round trip.
    ref = ulaw_decode(payload).astype(np.float64)
    back = ulaw_decode(big_out).astype(np.float64)
    n = min(ref.size, back.size) - 200
    err = back[100:n] - ref[100:n]
    snr_db = 10 * np.log10(np.sum(ref[100:n] ** 2) / np.sum(err**2))
    lengths_ok = abs(n_out - len(payload)) <= 4 and abs(len(big_out) - len(payload)) <= 4

    wall = statistics.median(frame_times)
    big_wall = statistics.median(big_times)
    rtf = AUDIO_SECONDS / wall
    result = {
        "bench": "audio_codec",
        "audio_seconds": AUDIO_SECONDS,
        "frame_ms": FRAME_MS,
        "wall_s": round(wall, 5),
        "realtime_factor": round(rtf),
        "target_realtime_factor": TARGET_RTF,
        "ok": bool(rtf >= TARGET_RTF and lengths_ok and snr_db > 25),
        "best_realtime_factor": round(AUDIO_SECONDS / min(frame_times)),
        "per_frame_round_trip_us": round(wall / len(frames) * 1e6, 2),
        "big_buffer_wall_s": round(big_wall, 5),
        "big_buffer_realtime_factor": round(AUDIO_SECONDS / big_wall),
        "quality": args.quality.upper(),
        "chain": f"ulaw{IN_RATE // 1000}k->pcm16_{PCM_RATE // 1000}k->ulaw{IN_RATE // 1000}k",
        "round_trip_snr_db": round(float(snr_db), 1),
        "runs": args.runs,
        "cpus": 1,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
