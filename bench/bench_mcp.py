"""Benchmark OUR overhead per MCP tool call.

A local FastMCP server with 100 generated tools (plus 5 demo tools) runs in a subprocess over
streamable HTTP. The manager connects it and registers all its tools. Then, from a separate
"conversation" event loop (as the engine does), calls go through ``ToolRegistry.execute``:
argument validation, the hop to the manager's loop, the lost-session race, the MCP session, result
conversion. The baseline is the same call with a raw ``mcp.ClientSession`` on the calling loop
(same transport, same server, same tool), interleaved call by call, so the server's own handling
and the HTTP round trip cancel out: overhead = ours - raw.

Prints one JSON line. Usage: python bench/bench_mcp.py [--calls N] [--tools N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PEERS = ROOT / "tests" / "support" / "mcp_peers.py"
TARGET_OVERHEAD_P50_MS = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, tools: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(PEERS), "http", "--port", str(port), "--tools", str(tools), "--name", "bench"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the MCP benchmark server did not start")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(url: str, manager, registry, calls: int, tool: str) -> dict:
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    ours: list[float] = []
    raw: list[float] = []
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        for i in range(50):  # warm both paths
            await session.call_tool(tool, {"x": i})
            await registry.execute(f"bench_{tool}", {"x": i})
        expected_tool = int(tool.split("_")[1])
        for i in range(calls):
            # alternate which path goes first, so neither profits from the other's warm caches
            for first in ("ours", "raw") if i % 2 == 0 else ("raw", "ours"):
                t0 = time.perf_counter()
                if first == "ours":
                    result = await registry.execute(f"bench_{tool}", {"x": i})
                    ours.append((time.perf_counter() - t0) * 1000)
                    if not result.ok or result.result != {"tool": expected_tool, "x": i}:
                        raise RuntimeError(f"unexpected result: {result}")
                else:
                    await session.call_tool(tool, {"x": i})
                    raw.append((time.perf_counter() - t0) * 1000)
    paired = [o - r for o, r in zip(ours, raw, strict=True)]
    return {
        "ours_p50_ms": round(statistics.median(ours), 3),
        "ours_p95_ms": round(pct(ours, 0.95), 3),
        "raw_p50_ms": round(statistics.median(raw), 3),
        "raw_p95_ms": round(pct(raw, 0.95), 3),
        "overhead_p50_ms": round(statistics.median(ours) - statistics.median(raw), 3),
        "overhead_paired_median_ms": round(statistics.median(paired), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--tools", type=int, default=100)
    args = parser.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    import django

    # the manager counts calls in the service's metrics, which read the settings
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "voiceagent.settings")
    django.setup()
    from mcp_app.manager import McpManager
    from mcp_app.server_config import ServerConfig
    from voiceagent.conversation.tools import ToolRegistry

    port = free_port()
    proc = start_server(port, args.tools)
    url = f"http://127.0.0.1:{port}/mcp"
    registry = ToolRegistry()
    manager = McpManager(registry, store=None, layer_factory=None, health_interval=3600)
    try:
        began = time.perf_counter()
        record = manager.run(manager.add(ServerConfig(name="bench", url=url, timeout=10)), timeout=60)
        connect_ms = (time.perf_counter() - began) * 1000
        tool = f"tool_{args.tools // 2:03d}"
        figures = asyncio.run(measure(url, manager, registry, args.calls, tool))
    finally:
        manager.stop()
        proc.kill()
        proc.wait(5)
    print(
        json.dumps(
            {
                "bench": "mcp_tool_call_overhead",
                "transport": record["transport"],
                "tools_registered": record["tools_count"],
                "connect_and_register_ms": round(connect_ms, 1),
                "calls": args.calls,
                **figures,
                "target_overhead_p50_ms": TARGET_OVERHEAD_P50_MS,
                "pass": figures["overhead_p50_ms"] <= TARGET_OVERHEAD_P50_MS,
            }
        )
    )


if __name__ == "__main__":
    main()
