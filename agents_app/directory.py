"""The engine's agent directory over the catalog and the session's own agents and scenarios.

Resolved at every turn (in a worker thread: the catalog may read the shared cache), so a
``PUT /agents`` or an admin edit applies from the next turn, and a removed MCP server's tools stop
being offered from the next turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from agents_app.catalog import catalog, scenario_from_record, spec_from_values
from agents_app.definitions import prompt_variables, render_prompt
from agents_app.definitions.template_budget import TemplateBudgetExceeded
from agents_app.definitions.templates import needs_rendering
from agents_app.sessions import db_call
from voiceagent.conversation.context import TurnContext, resolve_tools
from voiceagent.conversation.session import SessionState
from voiceagent.conversation.specs import AgentSpec, HandoffMap, ScenarioSpec, VoiceSpec
from voiceagent.conversation.tools import REGISTRY, ToolRegistry

logger = logging.getLogger(__name__)


class UnknownScenario(LookupError):
    pass


def system_prompt(agent: AgentSpec, variables: dict) -> str:
    """The agent's rendered prompt. Templates are checked when saved, but a caller's own data
    (memory) can still push a render over its budget: then the turn goes on with the template's
    source as the prompt, and one WARNING says which agent and which limit."""
    try:
        return render_prompt(agent.prompt_template, variables)
    except TemplateBudgetExceeded as exc:
        logger.warning("prompt of agent %r not rendered (%s); using its source text", agent.name, exc)
        return agent.prompt_template


def apply_overrides(agent: AgentSpec, overrides: dict) -> AgentSpec:
    """The agent with session overrides (voice, voice_style, voice_rate, model, temperature, ...)."""
    voice = VoiceSpec(
        overrides.get("voice") or agent.voice.name,
        overrides.get("voice_style") or agent.voice.style,
        overrides.get("voice_rate") or agent.voice.rate,
    )
    fields = {
        k: overrides[k]
        for k in ("model", "temperature", "top_p", "max_tokens")
        if overrides.get(k) is not None
    }
    return dataclasses.replace(agent, voice=voice, **fields)


class CatalogDirectory:
    """Built-in agents and scenarios from the catalog, plus the session-scoped ones in its state."""

    def __init__(self, registry: ToolRegistry = REGISTRY):
        self.registry = registry

    def resolve(self, state: SessionState, agent_name: str | None = None) -> TurnContext:
        """Sync resolution (call from a thread in async code)."""
        ctx, variables = self._unrendered(state, agent_name)
        return dataclasses.replace(ctx, system_prompt=system_prompt(ctx.agent, variables))

    def _unrendered(self, state: SessionState, agent_name: str | None) -> tuple[TurnContext, dict]:
        """The turn's context with an empty prompt, and the variables to render it with."""
        catalog.ensure_current()
        agents: dict[str, AgentSpec] = {a.name: a for a in catalog.agents.values()}
        for record in state.agents.values():
            agents[record["name"]] = spec_from_values(
                record["name"], record, source="session", session_id=state.session_id
            )
        scenario: ScenarioSpec | None = None
        if state.scenario in state.scenarios:
            scenario = scenario_from_record(state.scenarios[state.scenario])
        else:
            scenario = catalog.scenario(state.scenario)
        if scenario is None:
            raise UnknownScenario(f"scenario {state.scenario!r} is not available")
        name = agent_name or state.active_agent or scenario.start_agent
        canonical = {n.lower(): n for n in scenario.agents}
        name = canonical.get(name.lower(), scenario.start_agent)
        agent = agents.get(name)
        if agent is None:
            raise UnknownScenario(f"agent {name!r} of scenario {scenario.name!r} is not available")
        overrides = state.memory.get("_agent_overrides")
        if overrides:  # a browser's config.overrides apply to every agent of its session
            agent = apply_overrides(agent, overrides)
        members = {n: agents[n] for n in scenario.agents if n in agents}
        handoff_map = HandoffMap.build(scenario, members)
        variables = prompt_variables(
            scenario, state.memory, session_id=state.session_id, agent_name=agent.name
        )
        ctx = TurnContext(
            agent=agent,
            scenario=scenario,
            handoff_map=handoff_map,
            system_prompt="",
            tools=resolve_tools(agent, handoff_map, self.registry, members),
        )
        return ctx, variables

    async def context(self, state: SessionState, agent_name: str | None = None) -> TurnContext:
        """The turn's context; a template is rendered in a worker thread, never on the loop."""
        if not (catalog.watching and catalog.loaded):
            ctx = await db_call(self.resolve, state, agent_name)
            if await self._joined(ctx):
                ctx = await db_call(self.resolve, state, agent_name)
            return ctx
        ctx, variables = self._unrendered(state, agent_name)  # all in memory: no thread hop
        if await self._joined(ctx):
            ctx, variables = self._unrendered(state, agent_name)
        if needs_rendering(ctx.agent.prompt_template):
            prompt = await asyncio.to_thread(system_prompt, ctx.agent, variables)
        else:
            prompt = system_prompt(ctx.agent, variables)
        return dataclasses.replace(ctx, system_prompt=prompt)

    async def _joined(self, ctx: TurnContext) -> bool:
        """Whether servers the agent names but no tool of this worker comes from were looked for
        (added through another worker a moment ago: :mod:`mcp_app.join`)."""
        offered = {t.name for t in ctx.tools}
        servers = [
            name
            for name in ctx.agent.tools
            if name not in offered
            and self.registry.get(name) is None
            and not ctx.handoff_map.is_handoff_tool(name)
            and not any(t.startswith(f"{name}_") for t in offered)
        ]
        if not servers:
            return False
        from mcp_app.join import join_servers

        return await join_servers(servers)
