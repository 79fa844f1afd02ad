"""bench/bench_mcp.py runs as its docstring says (a plain ``python bench/bench_mcp.py``, no Django
settings in the environment) and prints its one JSON line: it once died importing the manager,
whose metrics read the settings. No timing thresholds: the figures are the bench's to report."""

from __future__ import annotations

import os

import pytest
from bench_runner import run_bench

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_the_bench_prints_its_figures():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    figures = run_bench("bench_mcp.py", "--calls", "20", "--tools", "10", timeout=110, env=env)
    assert figures["bench"] == "mcp_tool_call_overhead"
    assert figures["tools_registered"] == 10 + 5  # the generated tools and the demo tools
    assert figures["calls"] == 20
    assert figures["overhead_p50_ms"] == figures["overhead_p50_ms"]  # a number, not NaN
