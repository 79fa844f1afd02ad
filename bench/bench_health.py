"""Throughput and latency of GET /api/v1/health at concurrency 32 against ONE worker.

Starts the real service (uvicorn by default, ``--server daphne`` for daphne) in a subprocess on
embedded defaults, warms it up, then drives it from this process with raw keep-alive sockets at a fixed
concurrency for a fixed duration. Prints one JSON line.

    .venv/bin/python bench/bench_health.py [--server uvicorn|daphne] [--seconds 10] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from servers import base_env, free_port, migrate, start, wait_http


async def _one_connection(host: str, port: int, path: str, deadline: float, latencies: list[float]) -> int:
    """A keep-alive HTTP/1.1 client on a raw socket: cheap enough not to be the bottleneck."""
    errors = 0
    reader, writer = await asyncio.open_connection(host, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: keep-alive\r\n\r\n".encode()
    try:
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if head.startswith(b"HTTP/1.1 200"):
                latencies.append((time.perf_counter() - began) * 1000)
            else:
                errors += 1
    finally:
        writer.close()
    return errors


async def drive(url: str, seconds: float, concurrency: int) -> tuple[list[float], int]:
    parsed = urlparse(url)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    errors = await asyncio.gather(
        *(
            _one_connection(parsed.hostname, parsed.port, parsed.path, deadline, latencies)
            for _ in range(concurrency)
        )
    )
    return latencies, sum(errors)


def quantiles(latencies: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(sorted(latencies), n=100)
    return round(q[49], 2), round(q[98], 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="uvicorn", choices=["uvicorn", "daphne"])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = base_env(Path(tmp), LOG_LEVEL="WARNING")
        migrate(env)
        port = free_port()
        proc = start(args.server, port, env, Path(tmp) / "server.log")
        try:
            base = f"http://127.0.0.1:{port}/api/v1"
            wait_http(f"{base}/ready", timeout=20, status=200)
            asyncio.run(drive(f"{base}/health", 1.0, args.concurrency))  # warm-up
            latencies, errors = asyncio.run(drive(f"{base}/health", args.seconds, args.concurrency))
            # the same load on an endpoint served by Django + DRF, for comparison
            drf, drf_errors = asyncio.run(drive(f"{base}/ready", args.seconds / 2, args.concurrency))
        finally:
            proc.terminate()
            proc.wait(20)
    p50, p99 = quantiles(latencies)
    drf_p50, drf_p99 = quantiles(drf)
    figures = {
        "bench": "health",
        "server": args.server,
        "workers": 1,
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "requests": len(latencies),
        "errors": errors,
        "throughput_rps": round(len(latencies) / args.seconds, 1),
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": round(max(latencies), 2),
        "drf_ready_rps": round(len(drf) / (args.seconds / 2), 1),
        "drf_ready_p50_ms": drf_p50,
        "drf_ready_p99_ms": drf_p99,
        "drf_ready_errors": drf_errors,
        "note": "load generator runs on the same 2-core machine",
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
