"""The house rules of docs/architecture.md, checked on the source: arrows point down, no circle,
small rooms. A change that breaks one fails here with the offending modules named."""

from __future__ import annotations

from imports import APPS, cycles, import_graph, large_files, third_party_imports, upward_imports


def test_the_runtime_imports_no_app():
    """Only the project's wiring (settings, urls, asgi, routing) may name an app; the runtime gets
    what the apps contribute through voiceagent.contributions."""
    assert upward_imports(import_graph()) == []


ENGINE_MAY_USE = ("voiceagent.conversation", "voiceagent.speech", "voiceagent.llm", "voiceagent.logging")


def test_the_engine_imports_only_the_engine_and_its_providers():
    graph = import_graph()
    engine = [m for m in graph if m.startswith("voiceagent.conversation")]
    assert engine, "the engine package was not found"
    reaching = {
        (module, target)
        for module in engine
        for target in graph[module]
        if target.split(".")[0] in APPS or not target.startswith(ENGINE_MAY_USE)
    }
    assert reaching == set()


def test_the_engine_knows_no_web_framework():
    """voiceagent.conversation is pure asyncio: no Django, no Channels, no DRF."""
    web = {"django", "channels", "rest_framework", "daphne"}
    found = {
        (module, name)
        for module, names in third_party_imports().items()
        if module.startswith("voiceagent.conversation")
        for name in names & web
    }
    assert found == set()


def test_no_import_cycle():
    """A circle (even through a lazy import inside a function) means two modules are one job."""
    assert cycles(import_graph()) == []


def test_no_production_file_over_500_lines():
    """Small rooms: one job a module; split a big one along its seams."""
    assert large_files(500) == []
