"""A LIFECYCLE_PLUGINS module for server tests: records every step and cleanup with timestamps.

Environment: PROBE_FILE (JSON lines written here), PROBE_WARMUP_S (deferred warmup duration),
PROBE_STUCK=1 (the mcp step ignores cancellation, to prove the shutdown bound),
PROBE_FAIL_CLEANUP=services (that step's cleanup raises).
"""

from __future__ import annotations

import asyncio
import json
import os
import time


def _write(event: str, **data) -> None:
    with open(os.environ["PROBE_FILE"], "a") as fh:
        fh.write(json.dumps({"event": event, "t": time.time(), **data}) + "\n")


def register(cycle) -> None:
    warmup_s = float(os.environ.get("PROBE_WARMUP_S", "0"))
    stuck = os.environ.get("PROBE_STUCK") == "1"
    fail_cleanup = os.environ.get("PROBE_FAIL_CLEANUP", "")

    for step in ("core", "speech", "aoai", "services", "agents", "events"):

        async def start(step=step):
            _write("start", step=step)

        async def stop(step=step):
            _write("stop", step=step)
            if step == fail_cleanup:
                raise RuntimeError(f"probe: cleanup of {step} fails on purpose")

        cycle.register(step, "probe", start=start, stop=stop)

    async def slow_stop(name: str) -> None:
        _write("pool_stop_begin", pool=name)
        await asyncio.sleep(0.3)
        _write("pool_stop_end", pool=name)

    cycle.register("speech", "probe-tts-pool", stop=lambda: slow_stop("tts"))
    cycle.register("speech", "probe-stt-pool", stop=lambda: slow_stop("stt"))

    async def warmup() -> None:
        _write("start", step="warmup")
        await asyncio.sleep(warmup_s)
        _write("done", step="warmup")

    async def mcp() -> None:
        _write("start", step="mcp")
        if stuck:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                _write("mcp_ignored_cancel")
                await asyncio.sleep(3600)  # misbehaving: shutdown must not wait beyond the bound
        _write("done", step="mcp")

    cycle.register("warmup", "probe", start=warmup)
    cycle.register("mcp", "probe", start=mcp)
