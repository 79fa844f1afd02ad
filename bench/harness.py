"""What the benchmarks share: caller test frames, the realtime peer as its own process, and the
server-log check that turns warnings during a run into benchmark errors."""

from __future__ import annotations

import collections
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXPECTED_LOG = ("API authentication is OFF",)  # the development-mode notice at startup


def pct(values: list[float], p: int) -> float | None:
    """The p-th percentile (inclusive method) rounded to 0.01; None without values."""
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 2)
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 2)


def voice_frame(rate: int, frame_ms: int = 20) -> bytes:
    """PCM16 of a voiced two-tone sound: webrtcvad calls it speech."""
    t = np.arange(rate * frame_ms // 1000) / rate
    return (np.sin(2 * np.pi * 220 * t) * 6000 + np.sin(2 * np.pi * 660 * t) * 3000).astype("<i2").tobytes()


def noise_frame(rate: int, frame_ms: int = 20) -> bytes:
    """PCM16 of faint noise (line hiss): silence to the VAD."""
    n = rate * frame_ms // 1000
    return (np.random.default_rng(1).standard_normal(n) * 30).astype("<i2").tobytes()


def start_realtime_peer(
    api_key: str, *, chunks: int, chunk_ms: int, interval: float, processes: int = 1, nice: int = 0
) -> tuple[subprocess.Popen, int]:
    """tests/support/realtime_peer.py in its own process(es) (its VAD and streaming must not run on
    the loop being measured); returns the process and its port."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    peer = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "realtime_peer.py"),
            "--api-key",
            api_key,
            "--processes",
            str(processes),
            "--chunks",
            str(chunks),
            "--chunk-ms",
            str(chunk_ms),
            "--interval",
            str(interval),
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,  # the measured process goes first
    )
    line = peer.stdout.readline().strip() if peer.stdout else ""
    if not line.startswith("READY "):
        peer.kill()
        raise RuntimeError(f"realtime peer did not start: {line!r}")
    return peer, int(line.split()[1])


def server_problems(log: Path, offset: int = 0) -> list[str]:
    """Distinct WARNING/ERROR lines (and tracebacks) the server logged from byte ``offset`` on, with
    counts: a benchmark run that made the server complain is not a clean run."""
    counts: collections.Counter[str] = collections.Counter()
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        if any(level in line for level in ("WARNING", "ERROR", "CRITICAL", "Traceback")) and not any(
            notice in line for notice in EXPECTED_LOG
        ):
            counts[line.strip()[:160]] += 1
    return [f"server log: {line} (x{n})" for line, n in counts.most_common(10)]
