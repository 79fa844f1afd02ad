"""bench/bench_offline_speech.py runs end to end on a tiny corpus and reports what the issue asks:
WER per voice, rate and sample rate, in and out of domain, and the real-time factors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]


def test_the_bench_prints_one_json_line_with_every_figure():
    out = subprocess.run(
        [sys.executable, "bench/bench_offline_speech.py", "--quick", "--voices", "1", "--workers", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["voices"] == ["espeak-ng:en-us"]
    for domain in ("in_domain", "out_domain"):
        part = result[domain]
        assert set(part["by_sample_rate"]) == {"16k", "8k-mulaw"}
        assert 0 <= part["wer"] <= 1 and part["by_voice"] and part["by_rate"]
    # a first sentence of the scenario is heard, at least over the 16 kHz channel
    assert result["in_domain"]["by_sample_rate"]["16k"] <= 0.5
    recognition, synthesis = result["rtf"]["recognition"], result["rtf"]["synthesis_piper"]
    assert recognition["utterances"] == 8 and 0 < recognition["rtf_per_core"] < 2
    assert synthesis["voice"] == "en_US-joe-medium" and 0 < synthesis["rtf_per_core"] < 2
    assert set(result["targets"]) >= {"16k", "8k-mulaw"} and isinstance(result["pass"], bool)
