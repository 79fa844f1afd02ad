"""bench/bench_engine_latency.py measures what it says on a few conversations: every turn gives an
end-of-turn -> first audio figure and every barge-in a barge-in -> StopAudio figure. No timing
thresholds (the bench reports those): a barge-in the engine rightly ignores (shorter than
``min_interruption_ms``, as the bench once sent) would leave the barge-in figures empty."""

from __future__ import annotations

import pytest
from bench_runner import run_bench

pytestmark = pytest.mark.slow


@pytest.mark.timeout(180)
def test_every_turn_and_every_barge_in_is_measured():
    conversations, turns = 4, 3
    figures = run_bench(
        "bench_engine_latency.py", "--conversations", str(conversations), "--turns", str(turns), timeout=170
    )
    assert figures["turn_samples"] == conversations * turns
    assert figures["barge_in_samples"] == conversations * len(range(0, turns, 2))  # every other turn
    for key in ("turn_p50_ms", "turn_p99_ms", "barge_in_p50_ms", "barge_in_p99_ms"):
        assert figures[key] == figures[key] and figures[key] >= 0, key  # a number, not NaN
