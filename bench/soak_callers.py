"""Callers of bench_soak.py: bench_capacity's browser callers (bench/capacity_caller.py), kept going
until a deadline.

Each of ``n`` caller slots holds one conversation at a time: it runs
:func:`capacity_caller.caller` (real-time 20 ms frames, a turn after a 0.5-3 s pause, waiting for
the answer to play) for ``turns_per_conversation`` turns (fewer when the deadline is near), then
hangs up and calls again, so conversations start and end all along the soak as they do in service.
Every connection is classified by how it ended: closed by the client (its turns done), closed by
the server (the close code and reason), or never opened (connect failed).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import multiprocessing
import time

from capacity_caller import Plan, Results, caller

TURN_S = 8.0  # a turn takes about this long (pause, speech, end of turn, answer played)


@dataclasses.dataclass
class Soak:
    results: Results = dataclasses.field(default_factory=Results)
    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    client_lag_ms: list[float] = dataclasses.field(default_factory=list)  # the callers' own loop lag

    def merge(self, other: Soak) -> None:
        self.results.merge(other.results)
        self.outcomes.update(other.outcomes)
        self.client_lag_ms += other.client_lag_ms


async def _ticker(lags: list[float]) -> None:
    """The caller process's own lateness (a 10 ms sleep): a late caller stamps late, and reads late,
    which the server then sees as back-pressure; the figures say when the load generator lagged."""
    while True:
        want = time.monotonic() + 0.01
        await asyncio.sleep(0.01)
        lags.append((time.monotonic() - want) * 1000)


def classify(res: Results) -> str:
    """How one connection ended, from the errors its caller recorded."""
    for key in res.errors:
        if key.startswith("connect failed"):
            return key
    for key in res.errors:
        if key.startswith("closed"):
            return f"server {key}"
    return "client closed"


async def _slot(plan: Plan, slot: int, deadline: float, turns_per: int, soak: Soak) -> None:
    call = 0
    while (remaining := deadline - time.monotonic()) > TURN_S:
        turns = max(1, min(turns_per, int(remaining // TURN_S)))
        one = Results()
        await caller(dataclasses.replace(plan, turns=turns), slot + 1000 * call, one)
        soak.outcomes[classify(one)] += 1
        soak.results.merge(one)
        call += 1


def _run_share(args: tuple[Plan, list[int], float, int]) -> Soak:
    plan, slots, deadline, turns_per = args
    soak = Soak()

    async def main() -> None:
        ticker = asyncio.create_task(_ticker(soak.client_lag_ms))
        await asyncio.gather(*(_slot(plan, s, deadline, turns_per, soak) for s in slots))
        ticker.cancel()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    return soak


def run(plan: Plan, conversations: int, deadline: float, turns_per: int, processes: int) -> Soak:
    """``conversations`` caller slots over ``processes`` processes until ``deadline`` (monotonic)."""
    shares = [
        (plan, list(range(p, conversations, processes)), deadline, turns_per)
        for p in range(max(1, min(processes, conversations)))
    ]
    with multiprocessing.get_context("fork").Pool(len(shares)) as pool:
        parts = pool.map(_run_share, shares)
    soak = Soak()
    for part in parts:
        soak.merge(part)
    return soak
