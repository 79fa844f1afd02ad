"""bench/bench_turn_taking.py runs end to end on a tiny corpus (one case of each kind, WebRTC VAD)
and prints one JSON line with every figure issue 16 asks for. No thresholds: the figures are the
bench's to report, not this test's to judge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]

KEYS = {
    "false_interruption_rate",
    "false_stop_rate",
    "missed_interruption_rate",
    "premature_end_of_turn_rate",
    "end_of_turn_delay_ms",
    "dead_air_s_per_conversation",
    "max_dead_air_during_tool_s",
    "cpu_ms_per_session_s",
    "cases",
    "settings",
    "turn_model",
    "stt_pause_hypothesis_ms",
    "wer_of_plain_and_paused_turns",
}


@pytest.mark.timeout(420)
def test_the_bench_prints_one_json_line_per_vad_with_every_figure(tmp_path):
    details = tmp_path / "details.json"
    out = subprocess.run(
        [
            sys.executable,
            "bench/bench_turn_taking.py",
            "--quick",
            "--vad",
            "webrtc",
            "--concurrency",
            "13",  # every case at once: one round (the figures are not judged here)
            "--details",
            str(details),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["bench"] == "turn_taking" and result["vad"] == "webrtc"
    assert set(result) >= KEYS
    assert set(result["end_of_turn_delay_ms"]) >= {"p50", "p99"}
    assert set(result["cases"]) == {"over_agent", "interruption", "pause", "plain", "tool"}
    assert sum(result["cases"].values()) + sum(result["invalid"].values()) == 13
    assert result["settings"]["min_interruption_ms"] >= 0 and "webrtc" in result["settings"]["vad"]
    assert result["settings"]["turn_model"].startswith("smart-turn-v3.2")  # TURN_MODEL's default
    assert result["turn_model"]["calls"] >= 1
    assert set(result["wer_of_plain_and_paused_turns"]) == {"all", "16000", "8000"}
    rows = json.loads(details.read_text())["webrtc"]
    assert {r["kind"] for r in rows} >= {"cough_click", "babble", "keyboard", "backchannel", "echo"}
    assert {r["sample_rate"] for r in rows} == {16000, 8000}
    heard = [r for r in rows if r["category"] in ("plain", "pause") and not r["invalid"]]
    assert heard and all(r["words"] > 0 and r["word_errors"] >= 0 for r in heard)
