"""LIFECYCLE_PLUGINS module for benchmarks: the server's event-loop lag as a time series.

A 10 ms ticker on the server's loop records how much later than asked each sleep woke up, with
the ``time.monotonic`` instant it woke (one clock for every process of the machine, so a benchmark
can cut the series into its own phases: idle, burst, after). Written as JSON
``{"pid", "max_ms", "ticks": [[t, lag_ms], ...]}`` to ``LOOP_LAG_FILE.<pid>`` when the server
shuts down (one file per worker process; 100 ticks a second, ~1.5 MB for ten minutes).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

TICK_S = 0.01


async def _ticker(record: dict) -> None:
    ticks = record["ticks"]
    while True:
        want = time.monotonic() + TICK_S
        await asyncio.sleep(TICK_S)
        now = time.monotonic()
        lag = (now - want) * 1000
        ticks.append((round(now, 4), round(lag, 2)))
        if lag > record["max_ms"]:
            record["max_ms"] = round(lag, 2)


def register(cycle) -> None:
    record: dict = {"pid": os.getpid(), "max_ms": 0.0, "ticks": []}
    tasks: list[asyncio.Task] = []

    async def start() -> str:
        tasks.append(asyncio.get_running_loop().create_task(_ticker(record)))
        return "benchmark: loop lag recorded"

    async def stop() -> None:
        for task in tasks:
            task.cancel()
        path = os.environ.get("LOOP_LAG_FILE")
        if path:
            with open(f"{path}.{os.getpid()}", "w") as f:
                json.dump(record, f)

    cycle.register("core", "bench-loop-lag", start=start, stop=stop)
