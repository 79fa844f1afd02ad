"""Tools: handoff tools derived from the agents and their resolution in a scenario."""

from __future__ import annotations

import pytest
from toolkit import make_spec

from voiceagent.conversation.specs import (
    GENERIC_HANDOFF_TOOL,
    AgentSpec,
    HandoffMap,
    HandoffSpec,
    ScenarioSpec,
)
from voiceagent.conversation.tools import (
    ToolContext,
    ToolRegistry,
    handoff_tool_specs,
    register_handoff_tools,
    resolve_handoff,
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# --------------------------------------------------------------------------------------------------
# Handoff tools
# --------------------------------------------------------------------------------------------------


def agent(name: str, trigger: str | None = None, description: str = "") -> AgentSpec:
    return AgentSpec(name=name, prompt_template="", description=description, handoff_trigger=trigger)


AGENTS = {
    "triage": agent("triage", description="Routes callers."),
    "billing": agent("billing", "transfer_to_billing", "Invoices and payments."),
    "support": agent("support", "transfer_to_support", "Technical problems."),
    "sales": agent("sales", "transfer_to_sales"),
}

SCENARIO = ScenarioSpec(
    name="helpdesk",
    start_agent="triage",
    agents=("triage", "billing", "support"),
    handoffs=(
        HandoffSpec("triage", "billing", "transfer_to_billing", "discrete"),
        HandoffSpec("triage", "support", "transfer_to_support", "announced"),
    ),
)


def test_handoff_tool_specs() -> None:
    specs = {s.name: s for s in handoff_tool_specs(AGENTS)}
    assert set(specs) == {
        "transfer_to_billing",
        "transfer_to_support",
        "transfer_to_sales",
        GENERIC_HANDOFF_TOOL,
    }
    billing = specs["transfer_to_billing"]
    assert billing.source == "handoff"
    assert billing.description == "Transfer the conversation to billing: Invoices and payments."
    assert billing.parameters == {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "description": "Why the conversation is being transferred."}
        },
        "required": [],
        "additionalProperties": False,
    }
    assert specs["transfer_to_sales"].description == "Transfer the conversation to sales."
    generic = specs[GENERIC_HANDOFF_TOOL]
    assert generic.source == "handoff"
    assert set(generic.parameters["properties"]) == {"target_agent", "reason"}
    assert generic.parameters["required"] == ["target_agent"]


def test_handoff_trigger_must_be_a_valid_name() -> None:
    bad = {"x": AgentSpec(name="x", prompt_template="", handoff_trigger="go to x", origin="agents/x.yaml")}
    with pytest.raises(ValueError, match=r"agents/x\.yaml"):
        handoff_tool_specs(bad)


async def test_handoff_tools_return_handoff_payload(registry: ToolRegistry) -> None:
    register_handoff_tools(registry, AGENTS)
    result = await registry.execute("transfer_to_billing", {"reason": "invoice question"}, ToolContext())
    assert result.ok and result.is_handoff
    assert result.result == {"handoff": True, "target_agent": "billing", "reason": "invoice question"}

    result = await registry.execute("transfer_to_support", {}, ToolContext())
    assert result.result == {"handoff": True, "target_agent": "support", "reason": ""}

    result = await registry.execute(GENERIC_HANDOFF_TOOL, '{"target_agent": "sales", "reason": "buy"}', None)
    assert result.result == {"handoff": True, "target_agent": "sales", "reason": "buy"}

    result = await registry.execute(GENERIC_HANDOFF_TOOL, {"reason": "?"}, None)
    assert result.error["type"] == "validation_error"


def test_register_handoff_tools_idempotent_and_replaces_stale(registry: ToolRegistry) -> None:
    registry.register(make_spec("builtin_one"))
    names = register_handoff_tools(registry, AGENTS)
    assert set(names) == {
        "transfer_to_billing",
        "transfer_to_support",
        "transfer_to_sales",
        GENERIC_HANDOFF_TOOL,
    }
    version = registry.version
    register_handoff_tools(registry, AGENTS)
    assert registry.version == version  # nothing changed

    fewer = {k: v for k, v in AGENTS.items() if k != "sales"}
    fewer["billing"] = agent("billing", "transfer_to_billing", "Only invoices.")
    register_handoff_tools(registry, fewer)
    assert registry.version == version + 1
    assert "transfer_to_sales" not in registry
    assert (
        registry.get("transfer_to_billing").description
        == "Transfer the conversation to billing: Only invoices."
    )
    assert "builtin_one" in registry

    with pytest.raises(ValueError, match="already registered"):
        register_handoff_tools(registry, {"x": agent("x", "builtin_one")})
    assert "transfer_to_billing" in registry  # nothing changed on conflict


def test_resolve_handoff() -> None:
    hmap = HandoffMap.build(SCENARIO, AGENTS)
    assert resolve_handoff(hmap, "triage", "transfer_to_billing", {}) == HandoffSpec(
        "triage", "billing", "transfer_to_billing", "discrete"
    )
    assert resolve_handoff(hmap, "triage", "transfer_to_support", '{"reason": "x"}') == HandoffSpec(
        "triage", "support", "transfer_to_support", "announced"
    )
    # No explicit edge billing -> support: still a transfer, announced.
    assert resolve_handoff(hmap, "billing", "transfer_to_support", None).type == "announced"
    # Generic tool: the target comes from the arguments (case-insensitive), the type from the edge.
    assert resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, {"target_agent": "Billing"}) == HandoffSpec(
        "triage", "billing", GENERIC_HANDOFF_TOOL, "discrete"
    )
    assert (
        resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, '{"target_agent": "support"}').type
        == "announced"
    )
    assert resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, {}) is None
    assert resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, "not json") is None
    assert (
        resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, {"target_agent": "sales"}) is None
    )  # not in scenario
    # Not a handoff tool, or a handoff to oneself.
    assert resolve_handoff(hmap, "triage", "lookup_order", {"target_agent": "billing"}) is None
    assert resolve_handoff(hmap, "triage", "transfer_to_sales", {}) is None  # sales not in scenario
    assert resolve_handoff(hmap, "billing", "transfer_to_billing", {}) is None
