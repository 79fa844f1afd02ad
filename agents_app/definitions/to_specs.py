"""Definitions to the engine's specs: validate, then build an immutable spec when nothing is an error.

The file loader and the REST views build specs only through these two functions, so a spec in
the engine has passed the same rules the admin forms check.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from agents_app.definitions.agent_schema import check_agent
from agents_app.definitions.problems import Problem, has_errors
from agents_app.definitions.scenario_schema import check_scenario
from agents_app.definitions.turn_taking_schema import turn_taking_spec
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec, Source


def parse_agent(
    data: Mapping[str, Any],
    *,
    file: str = "",
    known_tools: Collection[str],
    handoff_triggers: Collection[str] = (),
    tool_prefixes: Collection[str] = (),
    prompt_template: str | None = None,
    prompt_file: str | None = None,
    base_dir: Path | None = None,
    prompt_root: Path | None = None,
    allowed_variables: Collection[str] | None = None,
    strict_keys: bool = False,
    source: Source = "file",
    session_id: str | None = None,
    origin: str | None = None,
    _variables_context: str = "",
    voices_dir: str | None = None,
) -> tuple[AgentSpec | None, list[Problem]]:
    """Validate like :func:`~agents_app.definitions.agent_schema.validate_agent_fields` and build
    the spec; ``None`` on any error."""
    problems, values = check_agent(
        data,
        file=file,
        known_tools=known_tools,
        handoff_triggers=handoff_triggers,
        tool_prefixes=tool_prefixes,
        prompt_template=prompt_template,
        prompt_file=prompt_file,
        base_dir=base_dir,
        prompt_root=prompt_root,
        allowed_variables=allowed_variables,
        variables_context=_variables_context,
        strict_keys=strict_keys,
        voices_dir=voices_dir,
    )
    if has_errors(problems):
        return None, problems
    spec = AgentSpec(
        name=values["name"],
        prompt_template=values["prompt_template"],
        description=values["description"],
        greeting=values["greeting"],
        return_greeting=values["return_greeting"],
        handoff_trigger=values["handoff_trigger"],
        tools=values["tools"],
        model=values["model"],
        temperature=values["temperature"],
        top_p=values["top_p"],
        max_tokens=values["max_tokens"],
        voice=values["voice"],
        vad_silence_timeout_ms=values["vad_silence_timeout_ms"],
        turn_taking=turn_taking_spec(values["turn_taking"]),
        source=source,
        session_id=session_id,
        origin=file if origin is None else origin,
    )
    return spec, problems


def parse_scenario(
    data: Mapping[str, Any],
    agents: Mapping[str, AgentSpec],
    *,
    file: str = "",
    defined_agents: Collection[str] = (),
    check_templates: bool = True,
    strict_keys: bool = False,
    source: Source = "file",
    session_id: str | None = None,
    origin: str | None = None,
) -> tuple[ScenarioSpec | None, list[Problem]]:
    """Validate like :func:`~agents_app.definitions.scenario_schema.validate_scenario` and build
    the spec; ``None`` on any error."""
    problems, values = check_scenario(
        data,
        agents,
        file=file,
        defined_agents=defined_agents,
        check_templates=check_templates,
        strict_keys=strict_keys,
    )
    if has_errors(problems):
        return None, problems
    spec = ScenarioSpec(
        name=values["name"],
        start_agent=values["start_agent"],
        agents=values["agents"],
        description=values["description"],
        handoffs=values["handoffs"],
        agent_defaults=values["agent_defaults"],
        transfer_target=values["transfer_target"],
        recording=values["recording"],
        recording_announcement=values["recording_announcement"],
        source=source,
        session_id=session_id,
        origin=file if origin is None else origin,
    )
    return spec, problems
