"""A connection lost while a tool call is running: the call may have run on the server, so it is
repeated on a new session only when the tool says that is safe (MCP annotations ``readOnlyHint``
or ``idempotentHint``). Before, every call was repeated once: a payment or a booking cut mid-call
ran twice. A session the server no longer knows (it refused the call) is still retried."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fault_proxy import FaultProxy
from mcp_peers import PeerServer, build_server

from mcp_app.server_config import ServerConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def peer():
    calls: list = []

    def server():
        mcp = build_server("demo", calls=calls)

        @mcp.tool(description="Move money (not safe to repeat).")
        async def transfer(seconds: float) -> str:
            calls.append(("transfer", seconds))
            await asyncio.sleep(seconds)
            return "moved"

        return mcp

    with PeerServer(server, kind="http") as running:
        running.calls = calls
        yield running


def call_cut_midway(manager, peer, proxy, tool: str, marker: tuple) -> object:
    """Run ``tool`` and cut the connection once the server has started it."""
    out: dict = {}

    def run() -> None:
        out["result"] = asyncio.run(manager.registry.execute(f"demo_{tool}", {"seconds": 1.0}))

    caller = threading.Thread(target=run)
    caller.start()
    deadline = time.monotonic() + 20
    while marker not in peer.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker in peer.calls, "the call never reached the server"
    assert proxy.cut() >= 1
    caller.join(60)
    return out["result"]


def test_a_call_not_safe_to_repeat_is_not_repeated_after_a_cut(bare_manager, peer):
    peer.calls.clear()
    with FaultProxy(peer.port) as proxy:
        bare_manager.run(
            bare_manager.add(ServerConfig(name="demo", url=f"{proxy.url}/mcp", timeout=10)), timeout=30
        )
        result = call_cut_midway(bare_manager, peer, proxy, "transfer", ("transfer", 1.0))
    assert not result.ok
    assert "may have run" in result.error["message"] and "not repeated" in result.error["message"]
    assert peer.calls.count(("transfer", 1.0)) == 1


def test_a_read_only_call_is_repeated_on_a_new_session_after_a_cut(bare_manager, peer):
    peer.calls.clear()
    with FaultProxy(peer.port) as proxy:
        bare_manager.run(
            bare_manager.add(ServerConfig(name="demo", url=f"{proxy.url}/mcp", timeout=10)), timeout=30
        )
        result = call_cut_midway(bare_manager, peer, proxy, "slow", ("slow", 1.0))
    assert result.ok, result.error
    assert peer.calls.count(("slow", 1.0)) == 2
