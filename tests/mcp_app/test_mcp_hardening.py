"""What an MCP failure shows and logs (issue 31.10), against real local MCP servers: a tool error
names no server address to the model, the caller or the history (the log keeps it); an SSE server
that dies is one WARNING, not the SDK's ERROR with a traceback; background lines carry no stale
request id; a killed stdio child is noticed at once; tool rows keep their arguments and call id."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

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


def _wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["sse", "http"])
def test_a_server_that_dies_is_one_warning_without_a_traceback(bare_manager, kind, caplog):
    """Noticed by the connection itself (no call, no health round): unhealthy at once, one WARNING
    naming the server; the SDK's "Error in sse_reader" traceback and "Session termination failed"
    are DEBUG lines."""
    with PeerServer(lambda: build_server("demo"), kind=kind) as peer:
        transport = "sse" if kind == "sse" else "streamable-http"
        add(bare_manager, name="demo", url=peer.url, transport=transport)
        with caplog.at_level(logging.DEBUG):
            peer.stop()
            _wait(lambda: bare_manager.record("demo")["status"] == "unhealthy", 10)
            _wait(lambda: bare_manager._states["demo"].conn is None, 10)  # dropped (and closed)
            time.sleep(0.3)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("mcp")]
    shown = [(r.name, r.levelname, r.getMessage()[:120], bool(r.exc_info or r.exc_text)) for r in loud]
    assert len(loud) == 1 and loud[0].levelno == logging.WARNING, shown
    assert "demo" in loud[0].getMessage() and not (loud[0].exc_info or loud[0].exc_text), shown


def _children(marker: str) -> list[int]:
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


def test_a_killed_stdio_child_is_noticed_at_once(bare_manager, stdio_command, caplog):
    """Its pipe closes: the server is unhealthy with one WARNING then, not at the next health round
    (the manager here has none), and the next call starts a new child."""
    command, args = stdio_command
    add(bare_manager, name="local", transport="stdio", command=command, args=args, timeout=20)
    [child] = _children("mcp_peers.py")
    with caplog.at_level(logging.INFO):
        os.kill(child, signal.SIGKILL)
        _wait(lambda: bare_manager.record("local")["status"] == "unhealthy", 10)
    lost = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("mcp")
    ]
    assert len(lost) == 1 and "local" in lost[0] and "process exited" in lost[0], lost
    assert call(bare_manager, "local_echo", {"text": "again"}).ok
    assert bare_manager.record("local")["status"] == "healthy"


class _Tagged(logging.Handler):
    """What the service's log handlers see: records tagged by its ContextFilter."""

    def __init__(self) -> None:
        from voiceagent.logging import ContextFilter

        super().__init__(logging.DEBUG)
        self.addFilter(ContextFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_background_mcp_lines_carry_no_request_id_of_the_request_that_connected(bare_manager):
    """The connection outlives the add request that opened it: what it logs later (its stream, its
    loss) is nobody's request."""
    from voiceagent.logging import request_id_var

    tagged = _Tagged()
    names = ("mcp", "mcp_app", "httpx", "httpcore")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    with PeerServer(lambda: build_server("demo"), kind="http") as peer:
        token = request_id_var.set("req-add-0001")
        try:
            add(bare_manager, name="demo", url=peer.url, transport="streamable-http")
        finally:
            request_id_var.reset(token)
        for lg in loggers:
            lg.addHandler(tagged)
            lg.setLevel(logging.DEBUG)
        try:
            peer.stop()
            _wait(lambda: bare_manager.record("demo")["status"] == "unhealthy", 10)
            _wait(lambda: bare_manager._states["demo"].conn is None, 10)
            time.sleep(0.3)
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.removeHandler(tagged)
                lg.setLevel(level)
    assert tagged.records  # the loss was logged (and the stream's end at DEBUG)
    stale = [(r.name, r.getMessage()[:80]) for r in tagged.records if r.request_id == "req-add-0001"]
    assert not stale, stale


@pytest.mark.django_db(transaction=True)
async def test_tool_rows_in_the_history_keep_the_arguments_and_the_call_id(manager, http_peer, api_client):
    """One engine turn calls ``demo_echo`` on a real MCP server; the session's history (database,
    ``GET /sessions/{id}``) has the tool row with what it was called with and the model's call id."""
    from agents_app.sessions import DjangoSessionStore
    from voiceagent.conversation.engine import Conversation, EngineConfig
    from voiceagent.conversation.specs import AgentSpec, ScenarioSpec
    from voiceagent.conversation.testing import (
        EnergyVAD,
        InstantTTS,
        ScriptedChat,
        ScriptedSTT,
        StaticDirectory,
    )
    from voiceagent.conversation.tools import REGISTRY

    manager.store = None  # the server's config in memory; the history in the database
    await manager.arun(manager.add(ServerConfig(name="demo", url=http_peer.url, timeout=5)))
    agent = AgentSpec(name="assistant", prompt_template="You help.", tools=("demo_echo",))
    scenario = ScenarioSpec(name="mcp", start_agent="assistant", agents=("assistant",))
    store = DjangoSessionStore()
    conv = Conversation(
        "mcp-history",
        scenario="mcp",
        directory=StaticDirectory([agent], scenario, REGISTRY),
        store=store,
        stt=ScriptedSTT([]),
        tts=InstantTTS(ms_per_word=1, chunk_ms=20),
        chat=ScriptedChat([[("demo_echo", {"text": "card 1234"})], "Done."]),
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
        async with asyncio.timeout(10):
            while not any(e.kind == "AgentResponse" and e.final and "Done" in e.text for e in events):
                await asyncio.sleep(0.01)
    finally:
        await conv.close()
        await asyncio.wait_for(reader, 2)
    await store.flush()
    body = (await asyncio.to_thread(api_client.get, "/api/v1/sessions/mcp-history")).json()
    [tool] = [t for t in body["history"] if t["role"] == "tool"]
    assert tool["tool_name"] == "demo_echo" and tool["tool_call_id"] == "call_1", tool
    assert tool["arguments"] == {"text": "card 1234"}, tool
    [again] = [t for t in await store.history("mcp-history") if t.role == "tool"]  # a resumed session's
    assert (again.tool_call_id, again.arguments) == ("call_1", {"text": "card 1234"})


def test_the_sdk_lines_about_a_lost_server_stay_out_of_an_info_log():
    """The filter demotes them to DEBUG, which the service's console handler (no level of its own)
    would still print: they are dropped unless the SDK's logger wants DEBUG."""
    import httpx

    from mcp_app.breakwatch import LostServerFilter

    sdk = logging.getLogger("mcp.client.sse")
    previous = sdk.level
    try:
        sdk.setLevel(logging.WARNING)
        broken = httpx.RemoteProtocolError("peer closed connection")
        record = sdk.makeRecord(
            sdk.name, logging.ERROR, __file__, 1, "Error in sse_reader", None, (type(broken), broken, None)
        )
        assert LostServerFilter().filter(record) is False
        sdk.setLevel(logging.DEBUG)
        record = sdk.makeRecord(
            sdk.name, logging.ERROR, __file__, 1, "Error in sse_reader", None, (type(broken), broken, None)
        )
        assert (
            LostServerFilter().filter(record) is True
            and record.levelno == logging.DEBUG
            and not record.exc_info
        )
        assert record.getMessage() == "Error in sse_reader: RemoteProtocolError: peer closed connection"
        bug = ValueError("a bug")
        record = sdk.makeRecord(
            sdk.name, logging.ERROR, __file__, 1, "Error in sse_reader", None, (ValueError, bug, None)
        )
        assert LostServerFilter().filter(record) is True and record.levelno == logging.ERROR  # kept as it was
    finally:
        sdk.setLevel(previous)
