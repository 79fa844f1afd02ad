"""bench/bench_stt_burst.py runs end to end on a small burst: the real server (as scripts/run
starts it), callers who stop speaking in the same frame, every final transcript timed from the
caller's last speech energy, and the recogniser's queue as GET /pools reports it. No timing
thresholds (the bench reports those against the targets)."""

from __future__ import annotations

import pytest
from bench_runner import run_bench

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_a_small_burst_is_measured_with_the_recognisers_queue():
    figures = run_bench("bench_stt_burst.py", "--callers", "3", "--rounds", "1", timeout=290)
    assert figures["finals"] == "3/3" and not figures["errors"] and not figures["server_log"], figures
    assert figures["slowest_s"] >= figures["median_s"] > 0 and figures["wer"] is not None
    queue = figures["recogniser_queue"]
    assert queue["depth"] == 0 and queue["deepest"] >= 1
    assert sum(queue["served"].values()) >= 3  # every caller's final, asked as a final or a pause
    assert set(queue["wait_ms"]) <= {"final", "pause", "interim"}
    assert figures["machine_python_loop_ms"] > 0
