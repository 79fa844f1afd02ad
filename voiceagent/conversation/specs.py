"""Immutable agent and scenario specs: the only shape in which agents reach the engine.

``agents_app`` turns definition files and database rows into these; the engine never queries the
ORM (architecture rule 2). Mapping fields are plain dicts by convention and must be treated as
read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from voiceagent.conversation.turn_taking import TurnTakingSpec

HandoffType = Literal["announced", "discrete"]
HANDOFF_TYPES: tuple[str, ...] = ("announced", "discrete")
GENERIC_HANDOFF_TOOL = "handoff_to_agent"
Source = Literal["file", "admin", "session"]


@dataclass(frozen=True)
class VoiceSpec:
    """TTS voice of an agent; ``None`` fields fall back to TTS_VOICE / TTS_STYLE / TTS_RATE."""

    name: str | None = None
    style: str | None = None
    rate: str | None = None


def configured_voice(config: Mapping[str, Any]) -> VoiceSpec:
    """The default voice of a TTS provider: ``TTS_VOICE`` / ``TTS_STYLE`` / ``TTS_RATE`` (empty = unset)."""
    return VoiceSpec(
        config.get("TTS_VOICE") or None, config.get("TTS_STYLE") or None, config.get("TTS_RATE") or None
    )


def resolve_voice(voice: VoiceSpec | None, default: VoiceSpec | Callable[[], VoiceSpec]) -> VoiceSpec:
    """Fill the ``None`` fields of ``voice`` from ``default`` (TTS_VOICE / TTS_STYLE / TTS_RATE; a
    callable is read now, so a configuration change applies to the next line)."""
    default = default() if callable(default) else default
    voice = voice or VoiceSpec()
    return VoiceSpec(voice.name or default.name, voice.style or default.style, voice.rate or default.rate)


@dataclass(frozen=True)
class AgentSpec:
    """One agent: who it is, what it may call, how it sounds."""

    name: str
    prompt_template: str
    description: str = ""
    greeting: str = ""
    return_greeting: str = ""
    handoff_trigger: str | None = None
    tools: tuple[str, ...] = ()
    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    voice: VoiceSpec = field(default_factory=VoiceSpec)
    vad_silence_timeout_ms: int | None = None
    turn_taking: TurnTakingSpec = field(default_factory=TurnTakingSpec)  # overrides of the global settings
    source: Source = "file"
    session_id: str | None = None
    origin: str = ""  # where it came from (file path, "admin", "api"), for error messages


@dataclass(frozen=True)
class HandoffSpec:
    """A directed edge of a scenario: calling ``tool`` in ``from_agent`` moves to ``to_agent``."""

    from_agent: str
    to_agent: str
    tool: str
    type: HandoffType = "announced"


@dataclass(frozen=True)
class ScenarioSpec:
    """A set of agents, the start agent and the handoff edges between them."""

    name: str
    start_agent: str
    agents: tuple[str, ...]
    description: str = ""
    handoffs: tuple[HandoffSpec, ...] = ()
    agent_defaults: dict = field(default_factory=dict, hash=False, compare=False)
    source: Source = "file"
    session_id: str | None = None
    origin: str = ""
    transfer_target: str | None = None  # escalate_to_human on the phone: +E164 or an ACS user (8:acs:...)
    recording: bool | None = None  # recorded or not, whatever RECORDING_ENABLED says; None: as it says
    recording_announcement: str = ""  # said before the greeting when the conversation is recorded


@dataclass(frozen=True)
class HandoffMap:
    """Resolves a tool call in the active agent to a handoff, for one scenario."""

    scenario: ScenarioSpec
    triggers: dict = field(default_factory=dict, hash=False, compare=False)  # trigger -> agent

    @classmethod
    def build(cls, scenario: ScenarioSpec, agents: dict[str, AgentSpec]) -> HandoffMap:
        """Map each scenario agent's ``handoff.trigger`` to that agent."""
        triggers = {
            agents[name].handoff_trigger: name
            for name in scenario.agents
            if name in agents and agents[name].handoff_trigger
        }
        return cls(scenario=scenario, triggers=triggers)

    def is_handoff_tool(self, tool: str) -> bool:
        """True for a scenario agent's trigger or the generic handoff tool."""
        return tool == GENERIC_HANDOFF_TOOL or tool in self.triggers

    def resolve(self, from_agent: str, tool: str, target_agent: str | None = None) -> HandoffSpec | None:
        """The handoff that ``tool`` performs from ``from_agent``; ``None`` if it is no handoff.

        The type comes from the scenario's edge ``from -> to``; with no explicit edge the target's
        trigger (or the generic tool naming a scenario agent) still transfers, announced.
        """
        if tool == GENERIC_HANDOFF_TOOL:
            if not target_agent:
                return None
            target = next((a for a in self.scenario.agents if a.lower() == target_agent.lower()), None)
        else:
            target = self.triggers.get(tool)
        if target is None or target == from_agent:
            return None
        for edge in self.scenario.handoffs:
            if edge.from_agent == from_agent and edge.to_agent == target:
                return HandoffSpec(from_agent, target, tool, edge.type)
        return HandoffSpec(from_agent, target, tool, "announced")
