"""Run a benchmark of ``bench/`` as its docstring says (a subprocess from the repository root) and
return the one JSON line it prints: the bench smoke tests check what it measured, never its times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python bench/<script> <args>``; fails with the bench's stderr tail when it does not exit 0
    or prints anything but exactly one line."""
    out = subprocess.run(
        [sys.executable, f"bench/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])
