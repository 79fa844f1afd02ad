"""bench/bench_mcp.py runs as its docstring says (a plain ``python bench/bench_mcp.py``, no Django
settings in the environment) and prints its one JSON line: it once died importing the manager,
whose metrics read the settings. No timing thresholds: the figures are the bench's to report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_bench_prints_its_figures():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "bench/bench_mcp.py", "--calls", "20", "--tools", "10"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "mcp_tool_call_overhead"
    assert figures["tools_registered"] == 10 + 5  # the generated tools and the demo tools
    assert figures["calls"] == 20
    assert figures["overhead_p50_ms"] == figures["overhead_p50_ms"]  # a number, not NaN
