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
