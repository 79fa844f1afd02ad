"""Apps plug into the runtime through voiceagent.contributions (issue 14): what each installed
app hands over from ready(), how it reaches a lifecycle, and the errors a wrong contribution gets."""

from __future__ import annotations

import pytest

from voiceagent import components
from voiceagent.contributions import Contributions, contributions, resolve
from voiceagent.health import checks
from voiceagent.lifecycle import Lifecycle


def test_installed_apps_hand_over_their_parts():
    parts = {(c.app, c.step, c.name) for c in contributions.components}
    assert {
        ("agents_app", "agents", "definitions"),
        ("agents_app", "core", "session-writers"),
        ("calls", "services", "telephony-caller"),
        ("mcp_app", "core", "mcp-manager"),
        ("mcp_app", "mcp", "mcp-servers"),
    } <= parts
    assert {c.component for c in contributions.checks} >= {"agents", "telephony", "mcp"}
    assert [s.module for s in contributions.tool_sources] == ["agents_app.builtin_tools"]


def test_services_come_from_the_app_that_provides_them():
    from agents_app.directory import CatalogDirectory
    from agents_app.sessions import DjangoSessionStore

    assert isinstance(contributions.new("session_store"), DjangoSessionStore)
    assert isinstance(contributions.new("agent_directory"), CatalogDirectory)


def test_a_lifecycle_gets_the_runtime_and_app_components_in_order():
    saved = checks.registered()
    cycle = Lifecycle()
    try:
        components.install(cycle)
        names = {step: [h.component for h in hooks] for step, hooks in cycle.hooks.items()}
        assert names["core"][:2] == ["session-cache+channel-layer+appconfig", "auth"]
        assert {"session-writers", "mcp-manager"} <= set(names["core"])
        assert names["agents"] == ["definitions"]
        assert names["services"] == ["telephony-caller"]
        assert names["mcp"] == ["mcp-servers"]
        assert set(checks.registered()) == set(checks.COMPONENTS)
    finally:
        checks._checks.clear()
        checks._checks.update(saved)


async def test_tool_sources_register_the_built_in_tools():
    from voiceagent.conversation.tools import REGISTRY

    note = await components.start_tools()
    assert "builtin" in note
    assert {"verify_client_identity", "verify_mfa_code", "escalate_to_human"} <= set(REGISTRY.names())


def test_wrong_contributions_are_refused_with_the_reason():
    c = Contributions()
    with pytest.raises(ValueError, match="unknown startup step 'boot'"):
        c.component("demo", "boot", "x", start="a.b")
    with pytest.raises(ValueError, match="neither a start nor a stop"):
        c.component("demo", "core", "x")
    with pytest.raises(ValueError, match="unknown readiness component"):
        c.check("demo", "database", "a.b")
    with pytest.raises(ValueError, match="unknown service"):
        c.provide("demo", "phone_book", "a.b")
    c.provide("demo", "session_store", "a.b")
    with pytest.raises(ValueError, match="already provided by demo"):
        c.provide("other", "session_store", "c.d")
    with pytest.raises(RuntimeError, match="no installed app provides the agent_directory"):
        c.new("agent_directory")


def test_contributions_are_dotted_paths_resolved_on_use():
    assert resolve("voiceagent.contributions.resolve") is resolve
