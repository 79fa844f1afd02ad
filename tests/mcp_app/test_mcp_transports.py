"""The connection manager against real local MCP servers: every transport, detection, pagination,
lost sessions, health transitions, timeouts, and one engine turn calling an MCP tool."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from mcp_peers import PeerServer, build_server
from mcp_testkit import DEMO_TOOLS, dead_url

from mcp_app.failures import ServerError
from mcp_app.server_config import ServerConfig

pytestmark = pytest.mark.slow


def add(manager, **kwargs) -> dict:
    kwargs.setdefault("timeout", 5)
    return manager.run(manager.add(ServerConfig(**kwargs)), timeout=30)


def call(manager, name: str, arguments: dict):
    return asyncio.run(manager.registry.execute(name, arguments))


def test_streamable_http(bare_manager, http_peer):
    record = add(bare_manager, name="demo", url=http_peer.url, transport="streamable-http")
    assert record["status"] == "healthy" and record["transport"] == "streamable-http"
    assert sorted(record["tool_names"]) == sorted(DEMO_TOOLS) and record["error"] is None
    result = call(bare_manager, "demo_add", {"a": 2, "b": 3})
    assert result.ok and result.result == {"result": 5.0}
    spec = bare_manager.registry.get("demo_add")
    assert spec.source == "mcp" and spec.server == "demo"
    assert spec.parameters["required"] == ["a", "b"]  # the MCP input schema is kept


def test_sse(bare_manager, sse_peer):
    record = add(bare_manager, name="legacy", url=sse_peer.url, transport="sse")
    assert record["transport"] == "sse" and record["tools_count"] == 5
    assert call(bare_manager, "legacy_echo", {"text": "over sse"}).result == {"result": "over sse"}


def test_omitted_transport_falls_back_to_sse(bare_manager, sse_peer, http_peer):
    assert add(bare_manager, name="auto-http", url=http_peer.url)["transport"] == "streamable-http"
    record = add(bare_manager, name="auto-sse", url=sse_peer.url)
    assert record["transport"] == "sse" and record["status"] == "healthy"
    assert call(bare_manager, "auto-sse_echo", {"text": "x"}).ok


def test_stdio(bare_manager, stdio_command):
    command, args = stdio_command
    record = add(bare_manager, name="local", transport="stdio", command=command, args=args, timeout=20)
    assert record["transport"] == "stdio" and record["tools_count"] == 5
    assert call(bare_manager, "local_echo", {"text": "over stdio"}).result == {"result": "over stdio"}


def test_stdio_child_that_dies_is_restarted_on_the_next_call(bare_manager, stdio_command):
    command, args = stdio_command
    add(bare_manager, name="local", transport="stdio", command=command, args=args, timeout=20)
    children = _children_running("mcp_peers.py")
    assert len(children) == 1
    os.kill(children[0], signal.SIGKILL)  # the pipe closes under the session
    result = call(bare_manager, "local_echo", {"text": "again"})
    assert result.ok, result.error
    assert _children_running("mcp_peers.py") not in ([], children)


def _children_running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and marker in cmdline:
            found.append(int(entry.name))
    return found


def test_all_tool_pages_are_listed(bare_manager, big_peer):
    record = add(bare_manager, name="big", url=big_peer.url)
    assert record["tools_count"] == 105  # 5 demo tools + 100 generated, listed in pages of 40
    assert "big_tool_000" in bare_manager.registry and "big_tool_099" in bare_manager.registry
    assert call(bare_manager, "big_tool_099", {"x": 7}).result == {"tool": 99, "x": 7}


def test_test_connection_registers_nothing(bare_manager, http_peer):
    transport, tools = bare_manager.run(bare_manager.test(ServerConfig(name="probe", url=http_peer.url)))
    assert transport == "streamable-http" and len(tools) == 5
    assert len(bare_manager.registry) == 0 and bare_manager.records() == []


@pytest.mark.parametrize("kind", ["http", "sse"])
def test_server_restart_mid_session_reconnects_and_retries_once(bare_manager, kind):
    with PeerServer(lambda: build_server("demo"), kind=kind) as peer:
        add(bare_manager, name="demo", url=peer.url, transport="sse" if kind == "sse" else "streamable-http")
        assert call(bare_manager, "demo_echo", {"text": "before"}).ok
        before = bare_manager._states["demo"].conn
        peer.restart()  # a NEW server: the old session is unknown to it (404 / closed stream)
        result = call(bare_manager, "demo_echo", {"text": "after"})
        assert result.ok, result.error
        assert result.result == {"result": "after"}
        assert bare_manager.record("demo")["status"] == "healthy"
    # a new session answered: the old one was seen gone when its stream broke (mcp_app.breakwatch),
    # or at the call (streamable HTTP's 404 "Session not found": reconnect + one retry)
    assert bare_manager._states["demo"].conn is not before


def test_dead_server_goes_unhealthy_then_recovers(bare_manager):
    with PeerServer(lambda: build_server("demo")) as peer:
        add(bare_manager, name="demo", url=peer.url)
        peer.stop()
        result = call(bare_manager, "demo_echo", {"text": "x"})
        assert not result.ok and "cannot be reached" in result.error["message"]  # the model's words
        record = bare_manager.record("demo")
        assert record["status"] == "unhealthy" and "unreachable" in record["error"]
        assert "demo_echo" in bare_manager.registry  # tools stay offered while unhealthy
        peer.start()
        assert bare_manager.run(bare_manager.check("demo")) == "healthy"
        assert bare_manager.record("demo")["error"] is None
        assert call(bare_manager, "demo_echo", {"text": "back"}).ok


def test_health_loop_pings_and_recovers(bare_manager):
    bare_manager.health_interval = 0.2
    with PeerServer(lambda: build_server("demo")) as peer:
        add(bare_manager, name="demo", url=peer.url, timeout=2)
        peer.stop()
        _wait(lambda: bare_manager.record("demo")["status"] == "unhealthy", 10)
        peer.start()
        _wait(lambda: bare_manager.record("demo")["status"] == "healthy", 10)


def test_tool_errors_and_timeouts_do_not_change_health(bare_manager, http_peer):
    add(bare_manager, name="demo", url=http_peer.url, timeout=1)
    failed = call(bare_manager, "demo_fail", {"message": "boom"})
    assert not failed.ok and "boom" in failed.error["message"]
    slow = call(bare_manager, "demo_slow", {"seconds": 3})
    assert not slow.ok and slow.error["type"] == "timeout"
    invalid = call(bare_manager, "demo_add", {"a": "not a number"})
    assert not invalid.ok and invalid.error["type"] == "validation_error"
    assert bare_manager.record("demo")["status"] == "healthy"


def test_initialize_that_hangs_times_out(bare_manager):
    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/mcp"
        began = time.monotonic()
        with pytest.raises(ServerError) as info:
            add(bare_manager, name="hang", url=url, transport="streamable-http", timeout=1)
        assert info.value.kind == "timeout" and time.monotonic() - began < 5
    assert bare_manager.records() == []


def test_unreachable_add_keeps_nothing(bare_manager):
    with pytest.raises(ServerError) as info:
        add(bare_manager, name="gone", url=dead_url())
    assert info.value.kind == "unreachable"
    assert bare_manager.records() == [] and len(bare_manager.registry) == 0


def test_remove_unregisters_and_bumps_the_registry_version(bare_manager, http_peer):
    add(bare_manager, name="demo", url=http_peer.url)
    version = bare_manager.registry.version
    assert bare_manager.run(bare_manager.remove("demo")) == 5
    assert bare_manager.registry.version > version and len(bare_manager.registry) == 0
    result = call(bare_manager, "demo_echo", {"text": "x"})
    assert not result.ok and result.error["type"] == "unknown_tool"


def test_calls_from_many_threads_share_one_session(bare_manager, http_peer):
    add(bare_manager, name="demo", url=http_peer.url)
    results = []

    def worker(i):
        results.append(call(bare_manager, "demo_echo", {"text": str(i)}))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == 8 and all(r.ok for r in results)


async def test_engine_turn_calls_an_mcp_tool_then_stops_offering_it(manager, http_peer):
    """One conversation turn: the model calls ``demo_echo`` through the engine and the registry."""
    from voiceagent.conversation.engine import Conversation, EngineConfig
    from voiceagent.conversation.session import InMemorySessionStore
    from voiceagent.conversation.specs import AgentSpec, ScenarioSpec
    from voiceagent.conversation.testing import (
        EnergyVAD,
        InstantTTS,
        ScriptedChat,
        ScriptedSTT,
        StaticDirectory,
    )
    from voiceagent.conversation.tools import REGISTRY

    manager.store = None  # no database in this test
    await manager.arun(manager.add(ServerConfig(name="demo", url=http_peer.url, timeout=5)))
    agent = AgentSpec(name="assistant", prompt_template="You help.", tools=("demo_echo",))
    scenario = ScenarioSpec(name="mcp", start_agent="assistant", agents=("assistant",))
    chat = ScriptedChat([[("demo_echo", {"text": "hello from the model"})], "Done.", "Nothing to call now."])
    conv = Conversation(
        "mcp-session",
        scenario="mcp",
        directory=StaticDirectory([agent], scenario, REGISTRY),
        store=InMemorySessionStore(),
        stt=ScriptedSTT([]),
        tts=InstantTTS(ms_per_word=1, chunk_ms=20),
        chat=chat,
        vad=EnergyVAD(),
        registry=REGISTRY,
        config=EngineConfig(),
    )
    events: list = []

    async def read():
        async for event in conv.events():
            events.append(event)

    await conv.start()
    reader = asyncio.create_task(read())
    try:
        await conv.push_text("please echo")
        await _until(lambda: any(e.kind == "AgentResponse" and e.final and "Done" in e.text for e in events))
        calls = [e for e in events if e.kind == "ToolCall"]
        assert [(c.name, c.ok) for c in calls] == [("demo_echo", True)]
        assert calls[0].result == {"result": "hello from the model"}
        assert [t["function"]["name"] for t in chat.requests[0].tools] == ["demo_echo"]

        await manager.arun(manager.remove("demo"))  # the registry version bumps...
        await conv.push_text("again")
        await _until(lambda: len(chat.requests) >= 3)
        assert chat.requests[2].tools == []  # ...and the next turn no longer offers the tool
    finally:
        await conv.close()
        await asyncio.wait_for(reader, 2)


def _wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


async def _until(predicate, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
