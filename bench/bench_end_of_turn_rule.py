"""The end-of-turn rule alone, offline and deterministic: one JSON line.

bench_turn_taking plays its corpus in real time, so a rule's effect there is mixed with the
machine's timing (when a decode lands) and moves a few points from run to run. This bench takes
the same corpus (question openings included) and, at every point where the caller stops (the end
of each plain and pause case, and each pause inside a pause case), does what the engine does:

- the recogniser's pause hypothesis on the audio heard up to 100 ms into the silence (Whisper
  tiny.en, the 7.5 s window, five hypotheses, the vocabulary prompt, the log-probability put on
  the 15 s scale: ``whisper_worker``'s own choices for a caller's pause);
- Smart Turn on the audio up to 160 ms into the silence;
- the wait :func:`~voiceagent.conversation.end_of_turn.fused_endpoint_ms` gives them, with the
  line's band and the speech heard.

Figures per band (16 kHz, 8 kHz through the phone band): the complete turns' wait (p50, p95,
the share ended within VAD_SILENCE_TIMEOUT) and the fragments whose wait was shorter than the
caller's pause (premature ends), by kind. A rule change is judged here first, then in real time.

    nice -n 10 .venv/bin/python bench/bench_end_of_turn_rule.py [--per-category 80] [--seed 16]
        [--details FILE]
    .venv/bin/python bench/bench_end_of_turn_rule.py --from FILE

~3 minutes for 80 a category (440 points) on two cores. ``--from`` takes a ``--details`` file
and applies today's rule to its words, confidences and model answers again, in a second: a rule
change is compared with the last on exactly the same decodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_turn_model import heard  # noqa: E402
from turn_taking_corpus import Synth, build_cases, speech_bounds  # noqa: E402

HINT_S, MODEL_S = 0.1, 0.16  # ListeningConfig.pause_hint_ms / turn_model_ms


async def corpus(per_category: int, seed: int) -> list:
    with tempfile.TemporaryDirectory(prefix="end-of-turn-rule-") as tmp:
        synth = Synth(Path(tmp))
        try:
            return await build_cases(synth, per_category, seed=seed, optional=("question_opening",))
        finally:
            await synth.close()


def stops_of(case: Any) -> list[tuple[str, float, float | None]]:
    """Where the caller of a plain or pause case stops: (``complete`` or the pause's kind, seconds
    into the clip, the pause's length in seconds or None at the end)."""
    _, end = speech_bounds(case.trigger)
    return [("complete", end, None)] + [(case.kind, a, b - a) for a, b in case.pauses]


def points(cases: list, seed: int, model_s: float = MODEL_S) -> list[dict[str, Any]]:
    """Every point where a caller stops: (what it is, the audio heard at the hint and the model,
    asked at ``model_s`` of silence)."""
    rng = np.random.default_rng(seed)
    out = []
    for case in cases:
        if case.category not in ("plain", "pause"):
            continue
        phone = case.sample_rate == 8000
        start, _ = speech_bounds(case.trigger)
        for group, at, gap in stops_of(case):
            out.append(
                {
                    "case": case.id,
                    "kind": case.kind,
                    "group": group,
                    "phone": phone,
                    "gap_ms": None if gap is None else round(gap * 1000),
                    "voiced_ms": round((at - start) * 1000),
                    "hint": np.frombuffer(heard(case.trigger, at + HINT_S, phone, rng), "<i2"),
                    "model": heard(case.trigger, at + model_s, phone, rng),
                }
            )
    return out


def rejudge(rows: list[dict[str, Any]], model_s: float = MODEL_S) -> list[dict[str, Any]]:
    """``rows`` (a ``--details`` file's) with each wait given again by today's rule."""
    from voiceagent.conversation.end_of_turn import fused_endpoint_ms
    from voiceagent.conversation.turn_taking import TurnTaking

    settings, at_ms = TurnTaking(), round(model_s * 1000)
    return [
        {**r, "wait_ms": fused_endpoint_ms(r["text"], settings, r["logprob"], r["probability"], at_ms,
                                           not r["phone"], r["voiced_ms"])}
        for r in rows
    ]  # fmt: skip


def report(rows: list[dict[str, Any]], seed: int | None, model_s: float = MODEL_S) -> str:
    return json.dumps(
        {
            "bench": "end_of_turn_rule",
            "seed": seed,
            "points": len(rows),
            "by_sample_rate": judge(rows, model_s),
            "settings": {"pause_hint_ms": round(HINT_S * 1000), "turn_model_ms": round(model_s * 1000)},
        }
    )


def judge(rows: list[dict[str, Any]], model_s: float = MODEL_S) -> dict[str, Any]:
    from voiceagent.conversation.turn_taking import TurnTaking

    settings = TurnTaking()
    out: dict[str, Any] = {}
    for phone in (False, True):
        part = [r for r in rows if r["phone"] == phone]
        waits = sorted(r["wait_ms"] for r in part if r["group"] == "complete")
        fragments = [r for r in part if r["group"] != "complete"]
        early = [r for r in fragments if r["wait_ms"] < r["gap_ms"]]
        by_kind: dict[str, str] = {}
        for kind in sorted({r["kind"] for r in fragments}):
            of_kind = [r for r in fragments if r["kind"] == kind]
            by_kind[kind] = f"{sum(r in early for r in of_kind)}/{len(of_kind)}"
        out["8000" if phone else "16000"] = {
            "complete_turns": len(waits),
            "complete_wait_ms": {
                "p50": statistics.median(waits) if waits else None,
                "p95": waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))] if waits else None,
            },
            "complete_ended_within_min": round(
                sum(w <= settings.endpointing_min_ms for w in waits) / max(1, len(waits)), 3
            ),
            # ended as soon as both answers were in (the words at the hint, the model at its ask)
            "complete_ended_at_once": round(sum(w <= model_s * 1000 for w in waits) / max(1, len(waits)), 3),
            "fragments": len(fragments),
            "fragments_ended_early": len(early),
            "fragments_ended_early_by_kind": by_kind,
            "early": [r["text"] for r in early],
        }
    return out


def decode(stops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each point's words and confidence as the engine's pause hypothesis gets them, and Smart
    Turn's answer (the rule is applied by :func:`rejudge`)."""
    import voiceagent  # noqa: F401  (its thread policy before numpy's first use in a model)
    from voiceagent.config import load_config
    from voiceagent.llm.rules import DIALOG_DIR
    from voiceagent.speech.turn_model import SmartTurnModel
    from voiceagent.speech.vocabulary import build_prompt
    from voiceagent.speech.whisper_stt import WhisperSTT
    from voiceagent.speech.whisper_worker import BEAM, QUICK_WINDOW, Recognizer

    recognizer = Recognizer(str(WhisperSTT.from_config(load_config()).model_dir), 1)
    model = SmartTurnModel()
    prompt = build_prompt(DIALOG_DIR)
    decoded = []
    for point in stops:
        [(text, logprob)] = recognizer.transcribe_batch([(point["hint"], prompt)], BEAM, QUICK_WINDOW)
        probability = model.score(point["model"])
        keep = ("case", "kind", "group", "phone", "gap_ms", "voiced_ms")
        decoded.append({**{k: point[k] for k in keep}, "text": text, "logprob": round(logprob, 3),
                        "probability": round(probability, 3)})  # fmt: skip
    return decoded


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-category", type=int, default=80)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--details", type=Path, help="every point: words, confidence, model, wait (JSON)")
    parser.add_argument("--from", dest="source", type=Path, help="a --details file: its decodes, this rule")
    parser.add_argument(
        "--turn-model-ms", type=int, help="silence before the turn model is asked (an A/B; default 160)"
    )
    args = parser.parse_args()
    model_s = MODEL_S if args.turn_model_ms is None else args.turn_model_ms / 1000
    if args.source:
        print(report(rejudge(json.loads(args.source.read_text()), model_s), None, model_s), flush=True)
        return

    cases = await corpus(args.per_category, args.seed)
    rows = rejudge(decode(points(cases, args.seed, model_s)), model_s)
    if args.details:
        args.details.write_text(json.dumps(rows, indent=0))
    print(report(rows, args.seed, model_s), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
