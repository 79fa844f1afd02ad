"""End of turn side by side with the peers (Pipecat, LiveKit Agents), the same clips, offline: one JSON line.

At every point of bench_turn_taking's corpus where a caller stops (the end of each plain and pause
case, and each pause inside a pause case; question openings included), each decides how long to
wait before the turn is over:

- **Ours**: exactly bench_end_of_turn_rule's figures (the recogniser's pause hypothesis at 100 ms
  of silence, Smart Turn at 160 ms, fused by ``fused_endpoint_ms`` with the line's band). Its
  waits are the rule's: a turn it ends "at once" ends when the pause hypothesis is in, ~100 ms +
  a decode later (bench_turn_taking measures that live: decision p50 ~300-480 ms at 8
  conversations), so its low figures are floors; the peers' include their model's inference.
- **Pipecat 1.14** with its default turn end (:data:`PIPECAT_POLICY`, from its source): Smart Turn
  v3.2 (the same ONNX file and features, run here by the service's own loader) asked when its VAD
  stops (0.2 s of silence): above 0.5 the turn ends then, once the model has answered; else at 3 s
  of silence (``stop_secs``). Smart Turn hears the last 8 s here, Pipecat's the segment from 0.5 s
  before the speech (the same audio for these clips, but the lead's line noise).
- **LiveKit Agents 1.8.9** with its on-device audio turn detector (``TurnDetector()`` without
  LiveKit Cloud: ``turn-detector-v1-mini`` from ``livekit-local-inference``, whose weights ship in
  that wheel), run in its OWN venv (``--venv``, default var/bench-venvs/livekit, made on first use
  with :data:`LIVEKIT_REQUIREMENTS`; never a dependency of the service) by
  bench/livekit_peer/eot.py. It hears what LiveKit's local transport hands it: the last 1.2 s of
  the caller's audio when its VAD has counted 200 ms of silence (here the silence is counted from
  the speech's true end: no VAD error is charged to LiveKit). Its policy, read from the installed
  package (``audio_recognition._bounce_eou_task``): below the English "unlikely" threshold (0.36)
  the turn ends ``max_delay`` (2.5 s) after the speech, else ``min_delay`` (0.3 s) after it, but
  never before the model has answered (200 ms + its inference time, measured here per call).

Figures per band (16 kHz; 8 kHz through the phone band, resampled to 16 kHz for both), as
bench_end_of_turn_rule prints them: complete turns' wait p50/p95 and the share ended within
500 ms, and fragments ended early (a wait shorter than the caller's pause). The model's ms per
call (wall, single requests, the machine otherwise idle) is printed beside, and how its model
tells complete turns from pauses per kind of voice. Both sides hear the same clips in a run; Piper's
clips differ a little from run to run (its synthesis draws noise), so figures move by a few points.

Not compared: the peers also wait for their STT's final transcript before they answer (ours
waits for the pause hypothesis, counted in its wait); LiveKit Cloud's bigger ``v1`` model.

    .venv/bin/python bench/bench_vs_peers_turn.py [--per-category 80] [--seed 16]
        [--ours FILE]  # a bench_end_of_turn_rule --details file of the same corpus: no decoding
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_end_of_turn_rule import MODEL_S, corpus, decode, judge, points, rejudge, stops_of  # noqa: E402
from bench_turn_model import heard  # noqa: E402
from peer_venv import peer_python  # noqa: E402

# Pipecat 1.14.0's default turn end with Smart Turn, from its source (the wheel the service takes
# the model file from; tests/bench/test_vs_peers_turn_pieces.py checks these against it):
# audio/vad/vad_analyzer.py VAD_STOP_SECS, audio/turn/smart_turn/base_smart_turn.py STOP_SECS,
# audio/turn/smart_turn/local_smart_turn_v3.py "prediction = 1 if probability > 0.5"
PIPECAT_POLICY: dict[str, Any] = {
    "pipecat": "1.14.0",
    "model": "smart-turn-v3.2",
    "vad_stop_s": 0.2,
    "complete_above": 0.5,
    "stop_s": 3.0,
}
LIVEKIT_VERSION = "1.8.9"
LIVEKIT_REQUIREMENTS = (f"livekit-agents=={LIVEKIT_VERSION}", "livekit-local-inference==0.2.7")


class LiveKitEOT:
    """bench/livekit_peer/eot.py in LiveKit's venv: ``score(pcm)`` -> (probability, wall ms)."""

    def __init__(self, python: Path):
        argv = [str(python), str(ROOT / "bench" / "livekit_peer" / "eot.py")]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("LiveKit's end-of-turn peer did not start (see its error above)")
        self.policy: dict[str, Any] = json.loads(line)

    def score(self, pcm: np.ndarray) -> tuple[float, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack("<I", len(pcm)) + pcm.astype("<i2").tobytes())
        self.proc.stdin.flush()
        probability, wall_ms = self.proc.stdout.readline().split()
        return float(probability), float(wall_ms)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


Score = Callable[[np.ndarray], tuple[float, float]]  # 16 kHz PCM16 -> (probability, wall ms)


def judged_rows(
    cases: list,
    seed: int,
    ask_s: float,
    score: Score,
    wait_ms: Callable[[float, float], float],
    last: int = 0,
) -> tuple[list[dict[str, Any]], list[float]]:
    """Every stop of the corpus: the model asked at ``ask_s`` of silence on the audio heard so far
    (its ``last`` samples when it hears a window), and the wait ``wait_ms(probability, wall ms)``
    its framework's policy sets; and the model's ms per call."""
    rng = np.random.default_rng(seed)
    rows, walls = [], []
    for case in cases:
        if case.category not in ("plain", "pause"):
            continue
        phone = case.sample_rate == 8000
        for group, at, gap in stops_of(case):
            pcm = np.frombuffer(heard(case.trigger, at + ask_s, phone, rng), "<i2")[-last:]
            probability, wall_ms = score(pcm)
            walls.append(wall_ms)
            rows.append(
                {
                    "case": case.id,
                    "kind": case.kind,
                    "group": group,
                    "phone": phone,
                    "voice": re.split("[:@]", case.voice)[0],
                    "gap_ms": None if gap is None else round(gap * 1000),
                    "text": case.id,  # judge() lists the fragments ended early by this
                    "probability": round(probability, 3),
                    "wait_ms": round(wait_ms(probability, wall_ms)),
                }
            )
    return rows, walls


def livekit_rows(cases: list, seed: int, peer: LiveKitEOT) -> tuple[list[dict[str, Any]], list[float]]:
    """LiveKit's policy: below its threshold the maximum delay after the speech, else the minimum,
    never before the answer (asked at its VAD's 200 ms of silence)."""
    policy = peer.policy
    ask_ms = policy["asked_after_silence_ms"]

    def wait_ms(probability: float, wall_ms: float) -> float:
        unlikely = probability < policy["unlikely_threshold"]
        return max(1000 * policy["max_delay_s" if unlikely else "min_delay_s"], ask_ms + wall_ms)

    return judged_rows(cases, seed, ask_ms / 1000, peer.score, wait_ms, round(policy["hears_s"] * 16000))


def pipecat_rows(cases: list, seed: int, score: Score) -> tuple[list[dict[str, Any]], list[float]]:
    """Pipecat's default turn end (:data:`PIPECAT_POLICY`): Smart Turn asked when its VAD stops,
    complete above 0.5 (the turn ends then), else the turn ends at ``stop_secs`` of silence."""
    policy = PIPECAT_POLICY

    def wait_ms(probability: float, wall_ms: float) -> float:
        if probability > policy["complete_above"]:
            return 1000 * policy["vad_stop_s"] + wall_ms
        return 1000 * policy["stop_s"]

    return judged_rows(cases, seed, policy["vad_stop_s"], score, wait_ms)


def smart_turn_score() -> tuple[Score, str]:
    """Smart Turn v3.2 as the service loads it (the same ONNX file and features Pipecat runs)."""
    from voiceagent.speech.turn_model import SmartTurnModel

    model = SmartTurnModel()

    def score(pcm: np.ndarray) -> tuple[float, float]:
        began = time.perf_counter()
        probability = model.score(pcm.astype("<i2").tobytes())
        return probability, (time.perf_counter() - began) * 1000

    return score, model.label


def separation(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """How a peer's model tells complete turns from pauses, per kind of voice (Piper's neural
    voice has a speaker's prosody; espeak-ng's formant voices barely do): the median probability
    and the share at or above its threshold."""
    out: dict[str, Any] = {}
    for engine in sorted({r["voice"] for r in rows}):
        for group in ("complete", "pause"):
            ps = [
                r["probability"]
                for r in rows
                if r["voice"] == engine and (r["group"] == "complete") == (group == "complete")
            ]
            if ps:
                out[f"{engine} {group}"] = {
                    "n": len(ps),
                    "median": round(statistics.median(ps), 3),
                    "likely": round(sum(p >= threshold for p in ps) / len(ps), 3),
                }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-category", type=int, default=80)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--venv", type=Path, default=ROOT / "var" / "bench-venvs" / "livekit")
    parser.add_argument("--ours", type=Path, help="a bench_end_of_turn_rule --details file (same corpus)")
    parser.add_argument("--details", type=Path, help="each peer's answer and wait at every point (JSON)")
    args = parser.parse_args()
    peer = LiveKitEOT(peer_python(args.venv, "livekit-agents", LIVEKIT_VERSION, LIVEKIT_REQUIREMENTS))
    try:
        cases = await corpus(args.per_category, args.seed)
        theirs, walls = livekit_rows(cases, args.seed, peer)
    finally:
        peer.close()
    pipecat_score, label = smart_turn_score()
    pipecat, pipecat_walls = pipecat_rows(cases, args.seed, pipecat_score)
    if args.ours:
        ours = rejudge(json.loads(args.ours.read_text()))
    else:
        ours = rejudge(decode(points(cases, args.seed)))
    if args.details:
        args.details.write_text(json.dumps({"pipecat": pipecat, "livekit": theirs}, indent=0))
    print(
        json.dumps(
            {
                "bench": "vs_peers_turn",
                "seed": args.seed,
                "points": len(theirs),
                "ours": {
                    "decides_from": "Whisper tiny.en pause hypothesis at 100 ms + Smart Turn v3.2 at 160 ms",
                    "by_sample_rate": judge(ours, MODEL_S),
                },
                "pipecat": {
                    **PIPECAT_POLICY,
                    "model": label,
                    "ms_per_call_p50": round(statistics.median(pipecat_walls), 1),
                    "by_sample_rate": judge(pipecat, PIPECAT_POLICY["vad_stop_s"]),
                    "separation_by_voice": separation(pipecat, PIPECAT_POLICY["complete_above"]),
                },
                "livekit": {
                    **peer.policy,
                    "ms_per_call_p50": round(statistics.median(walls), 1),
                    "by_sample_rate": judge(theirs, peer.policy["min_delay_s"]),
                    "separation_by_voice": separation(theirs, peer.policy["unlikely_threshold"]),
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
