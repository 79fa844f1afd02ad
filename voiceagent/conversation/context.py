"""What a conversation needs from the outside: the active agent of a turn and who resolves it.

Kept apart from both pipelines so that the shared tool round (:mod:`.common`), the core and the
agent directory of ``agents_app`` can name these types without importing an engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from voiceagent.conversation.session import SessionState
from voiceagent.conversation.specs import AgentSpec, HandoffMap, ScenarioSpec
from voiceagent.conversation.tools import ToolRegistry, ToolSpec, handoff_tool_specs


@dataclass
class TurnContext:
    """The active agent as of this turn: re-resolved every turn, so live edits apply next turn."""

    agent: AgentSpec
    scenario: ScenarioSpec
    handoff_map: HandoffMap
    system_prompt: str
    tools: list[ToolSpec]


class AgentDirectory(Protocol):
    """Resolves agents and scenarios for a session (implemented by agents_app over the catalog)."""

    async def context(self, state: SessionState, agent_name: str | None = None) -> TurnContext: ...


def resolve_tools(
    agent: AgentSpec, handoff_map: HandoffMap, registry: ToolRegistry, agents: dict[str, AgentSpec]
) -> list[ToolSpec]:
    """The tools an agent may call: registered ones (a bare MCP server name brings all its tools),
    plus handoff tools derived from the scenario. Resolved every turn, so a removed server's tools
    stop being offered from the next turn."""
    names = registry.expand_names(agent.tools)
    specs = registry.specs_for(names)
    have = {s.name for s in specs}
    missing = [n for n in names if n not in have and handoff_map.is_handoff_tool(n)]
    if missing:
        derived = {s.name: s for s in handoff_tool_specs(agents)}
        specs += [derived[n] for n in missing if n in derived]
    return specs
