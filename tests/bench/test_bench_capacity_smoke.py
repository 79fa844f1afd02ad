"""bench/bench_capacity.py --mode embedded runs end to end on a small step: the real server with the
offline providers, callers speaking in real time, one JSON line with every turn measured. No timing
thresholds (the bench reports those); it once printed a capacity of 1 for a reason that was not
capacity (the turn-taking rules' deliberate wait on an unsure short phrase counted as recognition
time), and nothing ran it to notice."""

from __future__ import annotations

import json

import pytest
from bench_runner import run_bench

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_embedded_mode_measures_every_turn(tmp_path):
    turns_file = tmp_path / "turns.jsonl"
    args = ("--mode", "embedded", "--steps", "2", "--turns", "2", "--turns-file", str(turns_file))
    figures = run_bench("bench_capacity.py", *args, timeout=290)
    assert figures["mode"] == "embedded" and "ENDPOINTING_MAX_MS=500" in figures["server"]
    (step,) = figures["steps"]
    assert step["conversations"] == 2 and step["turns"] == 4
    assert step["turns_missing_transcript_or_audio"] == 0 and not step["unanswered_turns"], step
    assert not step["refusals"] and not step["other_errors"] and not step["server_log"], step
    assert step["heard_something"] == 1.0
    for key in ("final_transcript_ms", "first_audio_ms"):
        assert set(step[key]) == {"p50", "p95", "max"}, key
    assert step["cpu_cores"]["server waiting for a core"] >= 0
    assert set(step["callers_send_lag_ms"]) == {"p50", "p99", "max"}
    assert figures["machine_python_loop_ms"] > 0
    (record,) = [json.loads(line) for line in turns_file.read_text().splitlines()]
    assert all(t["final_ms"] is not None and t["audio_ms"] is not None for t in record["turns"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("vad", ["webrtc", "silero"])
def test_cloud_mode_measures_every_turn_stage_by_stage(vad):
    """The cloud mode's callers (the same sans-I/O callers), the delayed providers, the openai client
    to the peer: every turn matched with its providers' delays and split into stages; with either
    VAD (``--vad silero``: the batched Silero thread hears the callers' voice frames)."""
    args = ("--mode", "cloud", "--conversations", "4", "--turns", "2", "--ramp-s", "1", "--vad", vad)
    figures = run_bench("bench_capacity.py", *args, timeout=290)
    assert figures["vad"] == vad and figures["caller_speech"] == {"webrtc": "tone", "silero": "espeak"}[vad]
    assert figures["turns"] == figures["expected_turns"] == 8
    assert figures["turns_without_measure"] == 0 and not figures["refusals"], figures
    assert not figures["errors"], figures["errors"]
    assert figures["server_added_ms"]["p50"] is not None
    assert len(figures["server_added_by_stage_ms"]) == 9
    assert figures["cpu_cores"]["server waiting for a core"] >= 0
    requests = figures["turn_model_requests"]  # from the server's /metrics, by outcome
    assert "error" not in requests and all(isinstance(n, int) for n in requests.values()), requests
