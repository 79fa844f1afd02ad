"""A turn naming an MCP server this worker has not heard of yet (added through another worker or
host; its change notification still on the way) loads it from the database and offers its tools
(mcp_app.join). A name that exists nowhere costs the turn nothing after its one look."""

from __future__ import annotations

import asyncio

import pytest

from agents_app.directory import CatalogDirectory
from mcp_app import join
from mcp_app.models import McpServer
from mcp_app.server_config import ServerConfig
from mcp_app.store import row_values
from voiceagent.conversation.session import SessionState

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_urls")]


def session_naming(*tools: str) -> SessionState:
    state = SessionState(session_id="join-test", scenario="joined", active_agent="")
    state.agents["bot"] = {"name": "bot", "prompt": "Look things up.", "tools": list(tools)}
    state.scenarios["joined"] = {"name": "joined", "start_agent": "bot", "agents": ["bot"]}
    return state


@pytest.fixture(autouse=True)
def fresh_tries():
    join._tried.clear()
    yield
    join._tried.clear()


def test_a_server_added_elsewhere_is_offered_at_the_next_turn(manager, http_peer):
    manager.start()
    # another worker added it: the row is there, this worker was never told
    McpServer.objects.create(name="late", **row_values(ServerConfig("late", http_peer.url)))
    assert not manager.has("late")

    ctx = asyncio.run(CatalogDirectory(manager.registry).context(session_naming("late")))

    assert "late_echo" in {t.name for t in ctx.tools}
    assert manager.record("late")["status"] == "healthy"


def test_a_server_that_exists_nowhere_is_looked_for_once(manager, monkeypatch):
    manager.start()
    reloads: list[str] = []
    real = manager.reload

    async def counted(name: str, **kwargs):
        reloads.append(name)
        return await real(name, **kwargs)

    monkeypatch.setattr(manager, "reload", counted)
    directory = CatalogDirectory(manager.registry)
    for _ in range(3):
        ctx = asyncio.run(directory.context(session_naming("nowhere")))
        assert ctx.tools == []
    assert reloads == ["nowhere"]  # one look per RETRY_AFTER_S, not one per turn
