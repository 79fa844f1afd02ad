"""What an MCP failure shows and logs (issue 31.10), against real local MCP servers: a tool error
names no server address to the model, the caller or the history (the log keeps it); an SSE server
that dies is one WARNING, not the SDK's ERROR with a traceback; background lines carry no stale
request id; a killed stdio child is noticed at once; tool rows keep their arguments and call id."""

from __future__ import annotations

import asyncio
import logging

import pytest
from mcp_peers import PeerServer, build_server

from mcp_app.server_config import ServerConfig

pytestmark = pytest.mark.slow


def add(manager, **kwargs) -> dict:
    kwargs.setdefault("timeout", 5)
    return manager.run(manager.add(ServerConfig(**kwargs)), timeout=30)


def call(manager, name: str, arguments: dict):
    return asyncio.run(manager.registry.execute(name, arguments))


@pytest.mark.parametrize("kind", ["http", "sse"])
def test_a_tool_error_says_unavailable_and_only_the_log_names_the_server(bare_manager, kind, caplog):
    with PeerServer(lambda: build_server("demo"), kind=kind) as peer:
        transport = "sse" if kind == "sse" else "streamable-http"
        add(bare_manager, name="demo", url=peer.url, transport=transport)
        address = f"127.0.0.1:{peer.port}"
        peer.stop()
        with caplog.at_level(logging.WARNING):
            result = call(bare_manager, "demo_echo", {"text": "x"})
    assert not result.ok
    assert result.error["message"] == "the tool is unavailable: its server cannot be reached"
    shown = result.to_model_content()  # what the model, the ToolCall event and the history get
    assert address not in shown and "127.0.0.1" not in shown and "http" not in shown, shown
    failed = [r.getMessage() for r in caplog.records if "tool demo_echo failed" in r.getMessage()]
    assert len(failed) == 1 and address in failed[0], failed  # the log has where
