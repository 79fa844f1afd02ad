"""LIFECYCLE_PLUGINS module for ``bench_soak.py``: bench_capacity's cloud-like providers
(``delayed_providers``: delayed STT and TTS on the configured pools, the chat stream stamped, the
loop-lag ticker and GC watch), with their records written out every ``SOAK_WINDOW_S`` seconds
(default 10) instead of kept.

Why: ``delayed_providers`` keeps every utterance's delays, stamps, loop-lag tick and GC pause in
the server for the whole run, which is what a capacity run of a few minutes wants; in a soak that
measures the server's memory they would be a leak of the benchmark's own making. Here each window
appends one JSON line to ``SOAK_FILE``: ``{"t", "loop_lag_ms": {"n", "p50", "p99", "max"},
"gc_ms": {gen: {"count", "total", "max"}}, "stt": {utterance: ms}, "tts": {utterance: ms},
"stamps": {utterance: {point: monotonic}}}`` (the provider delays let the benchmark subtract them
from each turn, the stamps split the server's time into stages), and the records are cleared.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time

import delayed_providers
from delayed_providers import DELAYS


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 2)


def window() -> dict:
    """This window's figures; the records they come from are emptied (in place: the ticker, the GC
    callback and the providers hold references to them)."""
    lags = DELAYS.setdefault("loop_lag_ms", [])
    taken, lags[:] = list(lags), []
    gc_ms = DELAYS.setdefault("gc_ms", {})
    pauses = {gen: list(values) for gen, values in gc_ms.items()}
    gc_ms.clear()
    stt, tts, stamps = dict(DELAYS["stt"]), dict(DELAYS["tts"]), dict(DELAYS["stamps"])
    for key in ("stt", "tts", "stamps"):
        DELAYS[key].clear()
    return {
        "t": time.monotonic(),
        "loop_lag_ms": {
            "n": len(taken),
            "p50": _pct(taken, 0.5),
            "p99": _pct(taken, 0.99),
            "max": round(max(taken), 2) if taken else None,
        },
        "gc_ms": {
            gen: {"count": len(v), "total": round(sum(v), 2), "max": round(max(v), 2)}
            for gen, v in pauses.items()
            if v
        },
        "stt": stt,
        "tts": tts,
        "stamps": stamps,
    }


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def register(cycle) -> None:
    delayed_providers.register(cycle)  # the providers (step aoai) and the watch (step warmup)
    path = os.environ.get("SOAK_FILE", "soak.jsonl")
    every = float(os.environ.get("SOAK_WINDOW_S", "10"))
    tasks: list[asyncio.Task] = []

    async def windows() -> None:
        while True:
            await asyncio.sleep(every)
            line = json.dumps(window())  # on the loop: the records are written on it too
            await asyncio.to_thread(_append, path, line)

    async def start() -> str:
        tasks.append(asyncio.get_running_loop().create_task(windows()))
        return f"benchmark: soak figures every {every:g} s to {path}"

    async def stop() -> None:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        _append(path, json.dumps(window()))  # the last, partial window

    cycle.register("warmup", "soak-watch", start=start)
    cycle.register("aoai", "soak-watch-stop", stop=stop)
