"""Tools: the registry (register, sync, expand, the module-level REGISTRY) and the package's public face."""

from __future__ import annotations

import threading

import pytest
from toolkit import make_spec

from voiceagent.conversation import tools as tools_module
from voiceagent.conversation.tools import (
    REGISTRY,
    ToolRegistry,
    tool,
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------


def test_duplicate_registration(registry: ToolRegistry) -> None:
    registry.register(make_spec("a"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(make_spec("a", description="other"))
    assert registry.get("a").description == "tool a"
    registry.register(make_spec("a", description="other"), replace=True)
    assert registry.get("a").description == "other"

    async def a() -> None:
        """Dup."""

    with pytest.raises(ValueError, match="already registered"):
        registry.tool()(a)


def test_unregister_and_version(registry: ToolRegistry) -> None:
    assert registry.version == 0
    registry.register(make_spec("builtin_one"))
    registry.register(make_spec("crm_find", source="mcp", server="crm"))
    registry.register(make_spec("crm_update", source="mcp", server="crm"))
    registry.register(make_spec("cal_list", source="mcp", server="cal"))
    assert registry.version == 4
    assert registry.names() == ["builtin_one", "crm_find", "crm_update", "cal_list"]

    assert registry.unregister_where(server="crm") == 2
    assert registry.version == 5
    assert registry.names() == ["builtin_one", "cal_list"]
    assert registry.unregister_where(server="crm") == 0
    assert registry.version == 5  # nothing changed

    assert registry.unregister_where(lambda s: s.source == "mcp") == 1
    assert registry.version == 6
    assert registry.unregister("builtin_one") is True
    assert registry.unregister("builtin_one") is False
    assert registry.version == 7
    assert len(registry) == 0
    with pytest.raises(ValueError):
        registry.unregister_where()


def test_get_contains_specs_for(registry: ToolRegistry) -> None:
    registry.register(make_spec("a"))
    registry.register(make_spec("b"))
    assert "a" in registry
    assert "zzz" not in registry
    assert registry.get("zzz") is None
    assert [s.name for s in registry.specs_for(["b", "missing", "a", "b"])] == ["b", "a"]


def test_concurrent_registration(registry: ToolRegistry) -> None:
    def worker(i: int) -> None:
        for j in range(50):
            registry.register(make_spec(f"t{i}_{j}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(registry) == 400
    assert registry.version == 400


def test_sync_group(registry: ToolRegistry) -> None:
    registry.register(make_spec("keep"))
    mcp = lambda s: s.server == "crm"  # noqa: E731
    specs = [make_spec("crm_a", source="mcp", server="crm"), make_spec("crm_b", source="mcp", server="crm")]
    assert registry.sync(specs, mcp) is True
    assert registry.version == 2
    assert registry.sync(specs, mcp) is False  # identical: no version bump
    assert registry.version == 2
    assert registry.sync(specs[:1], mcp) is True
    assert registry.names() == ["keep", "crm_a"]
    with pytest.raises(ValueError, match="already registered"):
        registry.sync([make_spec("keep", source="mcp", server="crm")], mcp)
    assert registry.names() == ["keep", "crm_a"]


def test_module_level_tool_decorator() -> None:
    async def module_level_probe_tool(x: int) -> int:
        """Probe."""
        return x

    try:
        assert tool(module_level_probe_tool) is module_level_probe_tool
        assert "module_level_probe_tool" in REGISTRY
        assert REGISTRY.get("module_level_probe_tool").parameters["required"] == ["x"]
    finally:
        REGISTRY.unregister("module_level_probe_tool")


def test_module_exports() -> None:
    for name in tools_module.__all__:
        assert hasattr(tools_module, name), name
