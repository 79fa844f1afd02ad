"""What bench/bench_vs_peers_turn.py makes of the peers' end-of-turn answers: LiveKit Agents'
policy (below the threshold the maximum delay, else the minimum, never before the answer) and the
audio its model is handed; Pipecat's (complete above 0.5 at its VAD's stop, else 3 s), checked
against its installed source. LiveKit runs in its own venv, so a stand-in answers here."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]
import bench_vs_peers_turn as bench  # noqa: E402
from turn_taking_corpus import RATE, Case  # noqa: E402

POLICY = {
    "unlikely_threshold": 0.36,
    "asked_after_silence_ms": 200,
    "hears_s": 1.2,
    "min_delay_s": 0.3,
    "max_delay_s": 2.5,
}


class StandIn:
    """Answers each request from a list, with a fixed inference time; keeps what it heard."""

    def __init__(self, answers: list[tuple[float, float]]):
        self.policy = POLICY
        self.answers = iter(answers)
        self.heard: list[np.ndarray] = []

    def score(self, pcm: np.ndarray) -> tuple[float, float]:
        self.heard.append(pcm)
        return next(self.answers)


def tone(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.1 * 32768 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def paused_case() -> Case:
    """1 s of speech, a 0.8 s pause, 1 s more: a pause point at 1.0 s and the end at 2.8 s."""
    trigger = np.concatenate([tone(1.0), np.zeros(round(0.8 * RATE), np.float32), tone(1.0)])
    return Case("mid_sentence-0", "pause", "mid_sentence", 16000, "piper@+0%", "my card ... is", trigger,
                pauses=[(1.0, 1.8)])  # fmt: skip


def test_livekits_policy_sets_each_wait_and_a_likely_answer_in_a_pause_ends_it_early():
    # asked at the end first: "unlikely" (0.2) -> 2.5 s; then the pause: "likely" (0.5) -> 300 ms,
    # shorter than the 800 ms pause
    peer = StandIn([(0.2, 40.0), (0.5, 40.0)])
    rows, walls = bench.livekit_rows([paused_case()], 16, peer)
    by_group = {r["group"]: r for r in rows}
    assert by_group["mid_sentence"]["wait_ms"] == 300
    assert by_group["complete"]["wait_ms"] == 2500
    assert walls == [40.0, 40.0] and {r["voice"] for r in rows} == {"piper"}
    figures = bench.judge(rows, POLICY["min_delay_s"])["16000"]
    assert figures["fragments_ended_early"] == 1 and figures["complete_ended_within_min"] == 0.0


def test_a_slow_answer_ends_the_turn_no_sooner_than_it_came_and_the_model_hears_its_window():
    peer = StandIn([(0.9, 100.0), (0.9, 250.0)])  # the end, then the pause
    rows, _ = bench.livekit_rows([paused_case()], 16, peer)
    # asked at 200 ms of silence: an answer taking 250 ms ends the turn at 450, not at 300
    assert sorted(r["wait_ms"] for r in rows) == [300, 450]
    assert all(len(pcm) == round(1.2 * RATE) for pcm in peer.heard)  # the last 1.2 s, as LiveKit
    quiet = peer.heard[1][-round(0.2 * RATE) :].astype(np.float64)
    assert np.sqrt(np.mean(quiet**2)) < 100  # ending 200 ms into the pause: floor noise only


def test_the_separation_counts_each_voice_and_group_at_the_threshold():
    rows = [
        {"voice": "piper", "group": "complete", "probability": 0.5},
        {"voice": "piper", "group": "complete", "probability": 0.3},
        {"voice": "espeak", "group": "digits", "probability": 0.4},
    ]
    out = bench.separation(rows, 0.36)
    assert out["piper complete"] == {"n": 2, "median": 0.4, "likely": 0.5}
    assert out["espeak pause"] == {"n": 1, "median": 0.4, "likely": 1.0}


def test_pipecats_policy_ends_a_turn_the_model_calls_complete_at_its_vad_stop_and_waits_3_s_else():
    answers = iter([(0.51, 47.0), (0.5, 47.0)])  # the end: complete; the pause: not (0.5 is not above)
    rows, walls = bench.pipecat_rows([paused_case()], 16, lambda pcm: next(answers))
    assert [r["wait_ms"] for r in rows] == [247, 3000] and walls == [47.0, 47.0]
    assert bench.judge(rows, 0.2)["16000"]["fragments_ended_early"] == 0


def test_pipecats_policy_is_the_one_in_the_installed_pipecat_source():
    import importlib.metadata

    dist = importlib.metadata.distribution("pipecat-ai")
    assert dist.version == bench.PIPECAT_POLICY["pipecat"]

    def source(path: str) -> str:
        return Path(str(dist.locate_file(f"pipecat/{path}"))).read_text()

    assert "VAD_STOP_SECS = 0.2\n" in source("audio/vad/vad_analyzer.py")
    assert "STOP_SECS = 3\n" in source("audio/turn/smart_turn/base_smart_turn.py")
    assert "prediction = 1 if probability > 0.5 else 0" in source(
        "audio/turn/smart_turn/local_smart_turn_v3.py"
    )
