"""A LIFECYCLE_PLUGINS module for server tests: SIGUSR1 blocks the server's event loop.

On SIGUSR1 the loop runs ``time.sleep(STALL_S)`` (what a blocking call, a long garbage collection
or a CPU burst does to every socket of the process): nothing is read meanwhile, and what the
clients sent waits in the kernel until the loop is free again. ``STALL_FILE`` gets one JSON line
when a stall begins and one when it ends, so a test knows the stall happened without timing it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time


def _write(event: str) -> None:
    with open(os.environ["STALL_FILE"], "a") as fh:
        fh.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid()}) + "\n")


def _stall() -> None:
    _write("stall_begin")
    time.sleep(float(os.environ.get("STALL_S", "2")))
    _write("stall_end")


def register(cycle) -> None:
    async def start() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _stall)
        _write("ready")

    async def stop() -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)

    cycle.register("core", "loop-stall", start=start, stop=stop)
