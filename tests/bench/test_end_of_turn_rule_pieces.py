"""What bench/bench_end_of_turn_rule.py counts: a complete turn's wait, and a fragment whose wait
was shorter than the caller's pause (a premature end)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]
import bench_end_of_turn_rule as bench  # noqa: E402


def row(group: str, phone: bool, wait_ms: int, gap_ms: int | None = None, kind: str = "plain") -> dict:
    return {"group": group, "kind": kind, "phone": phone, "wait_ms": wait_ms, "gap_ms": gap_ms, "text": group}


def test_a_fragment_counts_as_ended_early_only_when_its_wait_is_shorter_than_the_pause():
    rows = [
        row("complete", False, 160),
        row("complete", False, 1600),
        row("mid_sentence", False, 500, gap_ms=800, kind="mid_sentence"),  # ended in the pause
        row("mid_sentence", False, 1600, gap_ms=800, kind="mid_sentence"),  # waited it out
        row("complete", True, 1050),
        row("digits", True, 1600, gap_ms=700, kind="digits"),
    ]
    figures = bench.judge(rows)
    full, phone = figures["16000"], figures["8000"]
    assert full["complete_turns"] == 2 and full["complete_ended_within_min"] == 0.5
    assert full["complete_wait_ms"] == {"p50": 880.0, "p95": 1600}
    assert full["fragments_ended_early"] == 1
    assert full["fragments_ended_early_by_kind"] == {"mid_sentence": "1/2"}
    assert phone["complete_ended_within_min"] == 0.0 and phone["fragments_ended_early"] == 0
    assert phone["fragments_ended_early_by_kind"] == {"digits": "0/1"}


def test_a_details_file_is_judged_again_by_todays_rule():
    decoded = {"phone": False, "voiced_ms": 1500, "group": "complete", "kind": "plain", "gap_ms": None}
    decoded["wait_ms"] = 9  # what the rule said when the file was written
    rows = [
        {**decoded, "text": "Can you freeze my card please?", "logprob": -0.2, "probability": 0.95},
        {**decoded, "text": "My card number is", "logprob": -0.2, "probability": 0.95},
    ]
    sure, unfinished = bench.rejudge(rows)
    assert sure["wait_ms"] == 160  # the model's own pause: the words and the model agree
    assert unfinished["wait_ms"] == 1600  # unfinished words wait the maximum whatever the model says
    assert bench.judge([sure])["16000"]["complete_ended_at_once"] == 1.0
