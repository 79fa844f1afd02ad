"""An MCP tool call made inside a conversation arrives at the OTLP receiver as a span under the
conversation's span, with its server, tool and outcome."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from otlp_receiver import tracing_into

from mcp_app.server_config import ServerConfig
from voiceagent.logging import session_id_var
from voiceagent.observability import tracing

pytestmark = pytest.mark.slow


def test_mcp_call_span_under_the_conversation(bare_manager, http_peer, monkeypatch):
    bare_manager.run(bare_manager.add(ServerConfig(name="demo", url=http_peer.url, timeout=5)), timeout=30)
    with tracing_into(monkeypatch) as receiver:
        conversation = SimpleNamespace(
            session_id="s-mcp",
            scenario_name="banking",
            transport="browser",
            close_hooks=[],
            close_reason="done",
        )
        tracing.conversation_opened(conversation, "cascade")
        token = session_id_var.set("s-mcp")
        try:
            result = asyncio.run(bare_manager.registry.execute("demo_add", {"a": 2, "b": 3}))
        finally:
            session_id_var.reset(token)
        assert result.ok
        for hook in conversation.close_hooks:
            hook(conversation)
        tracing.shutdown()
        spans = receiver.wait_for(lambda s: len(s) >= 2)
    (call,) = [s for s in spans if s.name == "mcp demo"]
    (parent,) = [s for s in spans if s.name == "conversation"]
    assert call.parent_id == parent.span_id and call.trace_id == parent.trace_id
    assert call.attributes == {
        "voiceagent.mcp.server": "demo",
        "voiceagent.mcp.tool": "add",
        "voiceagent.mcp.outcome": "ok",
    }
    assert parent.start_ns <= call.start_ns <= call.end_ns <= parent.end_ns
