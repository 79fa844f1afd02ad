"""Handoff tools: derived from the agents' ``handoff.trigger`` (plus the generic
``handoff_to_agent``), they only report the requested transfer; :func:`resolve_handoff` decides
with the scenario's :class:`HandoffMap` which handoff it is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..specs import GENERIC_HANDOFF_TOOL, AgentSpec, HandoffMap, HandoffSpec
from .execution import parse_arguments
from .registry import ToolRegistry
from .values import DEFAULT_TIMEOUT_S, HANDOFF_SOURCE, TOOL_NAME_RE, ToolSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _HandoffCall:
    """The function of a handoff tool; a value (not a closure) so re-registration is a no-op."""

    target_agent: str | None = None  # None: the generic tool, the model names the target

    async def __call__(self, reason: str = "", target_agent: str | None = None) -> dict:
        return {
            "handoff": True,
            "target_agent": self.target_agent if self.target_agent is not None else target_agent,
            "reason": reason or "",
        }


_REASON_SCHEMA = {"type": "string", "description": "Why the conversation is being transferred."}


def handoff_tool_specs(
    agents: Mapping[str, AgentSpec], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[ToolSpec]:
    """One tool per agent ``handoff.trigger`` plus the generic ``handoff_to_agent``.

    The tools only report the requested transfer; which handoff it is (and its type) is decided by
    :func:`resolve_handoff` with the active scenario's :class:`HandoffMap`. When two agents share a
    trigger, the first one (in mapping order) names the tool.
    """
    specs: dict[str, ToolSpec] = {}
    for key, agent in agents.items():
        trigger = agent.handoff_trigger
        if not trigger:
            continue
        agent_name = agent.name or key
        if trigger == GENERIC_HANDOFF_TOOL:
            logger.warning("agent %s: handoff trigger %s is the generic tool; ignored", agent_name, trigger)
            continue
        if trigger in specs:
            logger.warning(
                "agents %s and %s share the handoff trigger %s",
                specs[trigger].func.target_agent,  # type: ignore[attr-defined]
                agent_name,
                trigger,
            )
            continue
        if not TOOL_NAME_RE.match(trigger):
            where = f" ({agent.origin})" if agent.origin else ""
            raise ValueError(
                f"agent {agent_name!r}{where}: handoff trigger {trigger!r} is not a valid tool name "
                "(1-64 characters from A-Z a-z 0-9 _ -)"
            )
        description = f"Transfer the conversation to {agent_name}"
        description += f": {agent.description.strip()}" if agent.description.strip() else "."
        specs[trigger] = ToolSpec(
            name=trigger,
            description=description,
            parameters={
                "type": "object",
                "properties": {"reason": dict(_REASON_SCHEMA)},
                "required": [],
                "additionalProperties": False,
            },
            func=_HandoffCall(agent_name),
            timeout_s=timeout_s,
            source=HANDOFF_SOURCE,
        )
    generic = ToolSpec(
        name=GENERIC_HANDOFF_TOOL,
        description="Transfer the conversation to another agent, named by target_agent.",
        parameters={
            "type": "object",
            "properties": {
                "target_agent": {"type": "string", "description": "Name of the agent to transfer to."},
                "reason": dict(_REASON_SCHEMA),
            },
            "required": ["target_agent"],
            "additionalProperties": False,
        },
        func=_HandoffCall(None),
        timeout_s=timeout_s,
        source=HANDOFF_SOURCE,
    )
    return [*specs.values(), generic]


def register_handoff_tools(registry: ToolRegistry, agents: Mapping[str, AgentSpec]) -> list[str]:
    """Make ``registry``'s handoff tools match ``agents``: idempotent, removes stale triggers.

    Raises ``ValueError`` (changing nothing) when a trigger collides with a non-handoff tool.
    Returns the names of the handoff tools now registered.
    """
    specs = handoff_tool_specs(agents)
    registry.sync(specs, where=lambda spec: spec.source == HANDOFF_SOURCE)
    return [spec.name for spec in specs]


def resolve_handoff(
    handoff_map: HandoffMap,
    from_agent: str,
    tool_name: str,
    arguments: Mapping[str, Any] | str | None = None,
) -> HandoffSpec | None:
    """The handoff ``tool_name`` performs from ``from_agent`` in this scenario, or ``None``.

    The generic tool takes its target from ``arguments["target_agent"]``; the type (announced /
    discrete) comes from the scenario's edge (see :meth:`HandoffMap.resolve`).
    """
    if not handoff_map.is_handoff_tool(tool_name):
        return None
    target: str | None = None
    if tool_name == GENERIC_HANDOFF_TOOL:
        parsed = parse_arguments(arguments)
        value = parsed.get("target_agent") if isinstance(parsed, dict) else None
        target = value.strip() if isinstance(value, str) else None
    return handoff_map.resolve(from_agent, tool_name, target)
