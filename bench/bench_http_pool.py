"""What the chat client's connection pool costs per request as it grows: the ``openai`` client
(httpx2 / httpcore2 underneath) against the OpenAI-compatible peer (bench/chat_peer.py, answering
at once), with 1, 25, 50 and 100 idle keep-alive connections in its pool.

Why: httpcore2's pool re-examines every pooled connection each time a request is added or removed
(``_assign_requests_to_connections``), and for each idle one asks whether its socket is readable (a
``poll`` system call), so a request's cost could grow with the connections the pool keeps; a worker
holding a hundred conversations keeps tens of them. Upstream work to track the pool incrementally:
pydantic/httpx2#1169 (open, 2026-08). Measured through the client the service uses (2026-11-28,
openai 3.54.0): 0.8-2.9 us per idle connection, i.e. well under 0.1 ms at the pool sizes a worker
sees: not a lever for the turn's latency (a bare httpx2 client against an in-process server showed
~30 us per connection; this figure is the one that applies).

Timed per request: from the ``create(stream=True)`` call to its return (response headers in), the
stream then read to its end; sequential requests, the pool's other connections idle. Prints one
JSON line.

    .venv/bin/python bench/bench_http_pool.py [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from harness import pct  # noqa: E402

IDLE = (1, 25, 50, 100)
MESSAGES = [{"role": "user", "content": "utterance 1"}]


async def one(client: openai.AsyncOpenAI) -> float:
    t0 = time.perf_counter()
    stream = await client.chat.completions.create(model="bench-model", messages=MESSAGES, stream=True)
    took = time.perf_counter() - t0
    async for _ in stream:
        pass
    return took * 1000


def pooled(client: openai.AsyncOpenAI) -> int | None:
    """Connections in the client's pool (httpx internals, for the report only)."""
    try:
        return len(client._client._transport._pool.connections)
    except AttributeError:
        return None


async def measure(base_url: str, requests: int) -> list[dict]:
    rows = []
    for idle in IDLE:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="bench-key", max_retries=0) as client:
            await asyncio.gather(*(one(client) for _ in range(idle)))  # the pool now holds `idle`
            held = pooled(client)
            for _ in range(20):  # warm
                await one(client)
            times = [await one(client) for _ in range(requests)]
        rows.append(
            {"idle_connections": idle, "pooled": held, "p50_ms": pct(times, 50), "p90_ms": pct(times, 90)}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(ROOT / "bench" / "chat_peer.py"), "--first-token-ms", "0", "--token-ms", "0"]
    peer = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = peer.stdout.readline().strip() if peer.stdout else ""
        if not line.startswith("READY "):
            raise RuntimeError(f"chat peer did not start: {line!r}")
        rows = asyncio.run(measure(f"http://127.0.0.1:{line.split()[1]}/v1", args.requests))
    finally:
        peer.terminate()
        peer.wait(10)
    first, last = rows[0], rows[-1]
    slope = (last["p50_ms"] - first["p50_ms"]) / (last["idle_connections"] - first["idle_connections"]) * 1000
    print(
        json.dumps(
            {
                "bench": "http_pool",
                "requests_per_size": args.requests,
                "sizes": rows,
                "added_us_per_idle_connection": round(slope, 1),
                "openai": openai.__version__,
                "command": ".venv/bin/python bench/bench_http_pool.py " + " ".join(sys.argv[1:]),
            }
        )
    )


if __name__ == "__main__":
    main()
