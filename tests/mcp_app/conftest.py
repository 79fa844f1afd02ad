"""Fixtures for the MCP tests: real local MCP peers, a fresh manager per test, config overrides."""

from __future__ import annotations

import sys

import pytest
from mcp_peers import MemoryAuthProvider, PeerServer, build_server, free_port
from mcp_testkit import PEERS_SCRIPT, REDIRECT_URI


@pytest.fixture
def mcp_urls(settings):
    settings.ROOT_URLCONF = "mcp_test_urls"


@pytest.fixture
def manager():
    """A fresh process manager (database store, no cross-worker layer), stopped afterwards."""
    from mcp_app.manager import McpManager, set_manager
    from mcp_app.store import DbStore

    mgr = McpManager(store=DbStore(), layer_factory=None, health_interval=3600)
    previous = set_manager(mgr)
    yield mgr
    mgr.stop()
    set_manager(previous)


@pytest.fixture
def bare_manager():
    """A manager with no database and a private registry."""
    from mcp_app.manager import McpManager
    from voiceagent.conversation.tools import ToolRegistry

    mgr = McpManager(ToolRegistry(), store=None, layer_factory=None, health_interval=3600)
    yield mgr
    mgr.stop()


@pytest.fixture(scope="session")
def http_peer():
    with PeerServer(lambda: build_server("demo"), kind="http") as peer:
        yield peer


@pytest.fixture(scope="session")
def sse_peer():
    with PeerServer(lambda: build_server("legacy"), kind="sse") as peer:
        yield peer


@pytest.fixture(scope="session")
def big_peer():
    with PeerServer(lambda: build_server("big", n_tools=100, paged=True), kind="http") as peer:
        yield peer


@pytest.fixture
def oauth_peer():
    port = free_port()
    provider = MemoryAuthProvider(redirect_uris=(REDIRECT_URI,))
    issuer = f"http://127.0.0.1:{port}"
    peer = PeerServer(lambda: build_server("secure", auth_provider=provider, issuer_url=issuer), port=port)
    peer.provider = provider
    with peer:
        yield peer


@pytest.fixture
def stdio_command():
    return sys.executable, (PEERS_SCRIPT, "stdio")
