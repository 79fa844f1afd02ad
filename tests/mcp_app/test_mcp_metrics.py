"""MCP calls in the metrics, by server and outcome: counted where every call passes (the manager),
against a real local MCP server."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from mcp_app.failures import ServerError
from mcp_app.server_config import ServerConfig

pytestmark = pytest.mark.slow


def calls(server: str, outcome: str) -> float:
    labels = {"server": server, "outcome": outcome}
    return REGISTRY.get_sample_value("voiceagent_mcp_calls_total", labels) or 0.0


def test_mcp_calls_counted_by_server_and_outcome(bare_manager, http_peer):
    bare_manager.run(bare_manager.add(ServerConfig(name="counted", url=http_peer.url, timeout=5)), timeout=30)
    counted = [("counted", "ok"), ("counted", "tool_error"), ("gone", "unknown")]
    before = {key: calls(*key) for key in counted}
    for name, arguments in (
        ("counted_add", {"a": 2, "b": 3}),
        ("counted_add", {"a": 1, "b": 1}),
        ("counted_fail", {"message": "boom"}),  # the tool's own error (isError)
    ):
        asyncio.run(bare_manager.registry.execute(name, arguments))
    with pytest.raises(ServerError):  # no such server: the failure's kind
        bare_manager.run(bare_manager.call_tool("gone", "add", {}), timeout=10)
    after = {key: calls(*key) for key in counted}
    assert {key: after[key] - before[key] for key in counted} == {
        ("counted", "ok"): 2,
        ("counted", "tool_error"): 1,
        ("gone", "unknown"): 1,
    }
