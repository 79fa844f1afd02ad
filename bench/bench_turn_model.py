"""The end-of-turn model alone on bench_turn_taking's corpus, offline: one JSON line.

What Smart Turn (TURN_MODEL=smart-turn, voiceagent/speech/turn_model.py) says, heard as the engine
hears it (``--at-ms`` of silence after the speech, floor noise, the 8 kHz cases through the phone
band), at each point of the corpus whose truth is known:

- ``complete``: the end of each plain turn and of each pause case (the caller has finished);
- ``mid_sentence`` / ``digits``: each pause inside a pause case (the caller has not).

Figures: the share of each group at or above each threshold (``COMPLETE`` = 0.8 is the engine's),
and the model's time per call (ms of wall and of CPU, one thread). No real time and no engine:
the fusion with the words is bench_turn_taking's to measure.

    .venv/bin/python bench/bench_turn_model.py [--per-category 40] [--seed 16] [--at-ms 160 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from turn_taking_corpus import RATE, PhoneBand, Synth, build_cases, floor_noise, speech_bounds  # noqa: E402

from voiceagent.conversation.end_of_turn import COMPLETE  # noqa: E402
from voiceagent.speech.turn_model import SmartTurnModel  # noqa: E402

THRESHOLDS = (0.5, COMPLETE, 0.9, 0.95)
FRAME = RATE // 50


def heard(clip: np.ndarray, until_s: float, phone: bool, rng: np.random.Generator) -> bytes:
    """The caller's audio up to ``until_s`` (s into ``clip``) as the engine gets it: 0.3 s of line
    noise before, floor noise under, the phone band for 8 kHz callers, resampled to 16 kHz."""
    n = round(until_s * RATE)
    x = np.concatenate([np.zeros(round(0.3 * RATE), np.float32), clip[:n]])
    if len(x) < n + round(0.3 * RATE):
        x = np.pad(x, (0, n + round(0.3 * RATE) - len(x)))
    x = x[: len(x) // FRAME * FRAME] + floor_noise(len(x) // FRAME * FRAME, rng)
    if not phone:
        return np.clip(x, -32768, 32767).astype("<i2").tobytes()
    import soxr

    band = PhoneBand()
    pcm8 = b"".join(band(x[i : i + FRAME]) for i in range(0, len(x), FRAME))
    up = soxr.resample(np.frombuffer(pcm8, "<i2").astype(np.float32), 8000, RATE)
    return np.clip(up, -32768, 32767).astype("<i2").tobytes()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-category", type=int, default=40)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument(
        "--at-ms", type=int, nargs="+", default=[160], help="silence after the speech when asked (several)"
    )
    parser.add_argument("--details", type=Path, help="write every point's probability (JSON)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="turn-model-corpus-") as tmp:
        synth = Synth(Path(tmp))
        try:
            cases = await build_cases(synth, args.per_category, seed=args.seed)
        finally:
            await synth.close()
    model = SmartTurnModel()
    walls: list[float] = []
    cpu = 0.0
    by_pause: dict[str, dict] = {}
    details: list[dict] = []
    for at_ms in args.at_ms:
        rng = np.random.default_rng(args.seed)
        at = at_ms / 1000.0
        scores: dict[str, list[float]] = {"complete": [], "mid_sentence": [], "digits": []}
        for case in cases:
            if case.category not in ("plain", "pause"):
                continue
            phone = case.sample_rate == 8000
            points = [(speech_bounds(case.trigger)[1] + at, "complete")]
            points += [(start + at, case.kind) for start, end in case.pauses if end - start > at]
            for until, group in points:
                audio = heard(case.trigger, until, phone, rng)
                began, cpu0 = time.perf_counter(), time.thread_time()
                scores[group].append(model.score(audio))
                walls.append(time.perf_counter() - began)
                cpu += time.thread_time() - cpu0
                point = {"at_ms": at_ms, "case": case.id, "rate": case.sample_rate, "voice": case.voice}
                details.append({**point, "group": group, "until_s": round(until, 3), "p": scores[group][-1]})
        by_pause[str(at_ms)] = {
            "points": {k: len(v) for k, v in scores.items()},
            "share_at_or_above": {k: {str(t): share(v, t) for t in THRESHOLDS} for k, v in scores.items()},
            "median": {k: round(statistics.median(v), 3) if v else None for k, v in scores.items()},
        }
    if args.details:
        args.details.write_text(json.dumps(details, indent=0))
    print(
        json.dumps(
            {
                "bench": "turn_model",
                "model": model.label,
                "seed": args.seed,
                "by_silence_ms": by_pause,
                "ms_per_call_p50": round(statistics.median(walls) * 1000, 1),
                "cpu_ms_per_call": round(cpu * 1000 / len(walls), 1),
            }
        ),
        flush=True,
    )


def share(values: list[float], threshold: float) -> float | None:
    return round(sum(v >= threshold for v in values) / len(values), 3) if values else None


if __name__ == "__main__":
    asyncio.run(main())
