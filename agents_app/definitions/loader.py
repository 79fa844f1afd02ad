"""Loading every agent and scenario under a definitions folder (``fixtures/``).

Layout under ``root``::

    agents/_defaults.yaml          optional; deep-merged under every agent (agent values win,
                                   mappings merge recursively, lists replace)
    agents/<folder>/agent.yaml     one agent; its prompt template at ``prompts.path``, relative
                                   to the folder (folders starting with ``_`` or ``.`` are not
                                   agents, e.g. ``_shared/`` for common templates)
    scenarios/<name>.yaml          one scenario

Invalid agents and scenarios are skipped and reported as :class:`Problem` objects; the rest load.
A scenario that names a skipped agent is itself skipped. Problems at ``level="warning"`` are
reported but skip nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from agents_app.definitions.agent_schema import AGENT_KEYS
from agents_app.definitions.files import (
    AGENT_FILE,
    AGENTS_DIR,
    DEFAULTS_FILE,
    SCENARIOS_DIR,
    read_yaml,
)
from agents_app.definitions.problems import LoadResult, Problem
from agents_app.definitions.templates import allowed_variables_for, scenario_members_and_defaults
from agents_app.definitions.to_specs import parse_agent, parse_scenario


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge recursively, anything else (lists too)
    replaces. Neither input is modified."""
    merged: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _load_defaults(agents_dir: Path) -> tuple[dict[str, Any], list[Problem]]:
    """What ``_defaults.yaml`` gives every agent; ``name`` and unknown keys are reported and dropped."""
    path = agents_dir / DEFAULTS_FILE
    if not path.is_file():
        return {}, []
    data, problems = read_yaml(path)
    if data is None:
        return {}, problems
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        if key == "name" or key not in AGENT_KEYS:
            problems.append(Problem(str(path), str(key), "not allowed in defaults (ignored)"))
        else:
            defaults[key] = value
    return defaults, problems


def load_definitions(
    root: Path,
    known_tools: Collection[str],
    *,
    tool_prefixes: Collection[str] = (),
    voices_dir: str | None = None,
) -> LoadResult:
    """Load every agent and scenario under ``root`` (see the module docstring for the layout).

    ``known_tools`` are the registered tool names; ``tool_prefixes`` are MCP server names whose
    ``<server>_*`` tools are accepted before they are registered.
    """
    root = Path(root)
    result = LoadResult()
    if not root.is_dir():
        result.problems.append(Problem(str(root), "(folder)", "definitions folder not found"))
        return result
    agents_dir = root / AGENTS_DIR
    scenarios_dir = root / SCENARIOS_DIR

    # Scenario files are read first: their agent_defaults decide which variables prompts may use.
    raw_scenarios: list[tuple[Path, dict[str, Any]]] = []
    if scenarios_dir.is_dir():
        paths = sorted(p for p in scenarios_dir.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))
        for path in paths:
            data, problems = read_yaml(path)
            result.problems.extend(problems)
            if data is not None:
                raw_scenarios.append((path, data))
    else:
        result.problems.append(Problem(str(scenarios_dir), "(folder)", "scenarios folder not found"))

    raw_agents: list[tuple[Path, dict[str, Any]]] = []
    if agents_dir.is_dir():
        defaults, problems = _load_defaults(agents_dir)
        result.problems.extend(problems)
        for folder in sorted(p for p in agents_dir.iterdir() if p.is_dir()):
            if folder.name.startswith(("_", ".")):
                continue
            path = folder / AGENT_FILE
            if not path.is_file():
                result.problems.append(Problem(str(folder), AGENT_FILE, f"agent folder has no {AGENT_FILE}"))
                continue
            data, problems = read_yaml(path)
            result.problems.extend(problems)
            if data is not None:
                raw_agents.append((path, deep_merge(defaults, data)))
    else:
        result.problems.append(Problem(str(agents_dir), "(folder)", "agents folder not found"))

    triggers = set()
    for _, data in raw_agents:
        handoff = data.get("handoff")
        if isinstance(handoff, Mapping) and isinstance(handoff.get("trigger"), str):
            triggers.add(handoff["trigger"])

    defined: set[str] = set()
    where: dict[str, str] = {}  # lower-cased name -> file defining it
    for path, data in raw_agents:
        name = data.get("name")
        in_scenarios = sorted(
            str(scenario.get("name") or scenario_path.stem)
            for scenario_path, scenario in raw_scenarios
            if isinstance(name, str) and name in scenario_members_and_defaults(scenario)[0]
        )
        context = f" of scenario(s) {', '.join(in_scenarios)}" if in_scenarios else " (it is in no scenario)"
        spec, problems = parse_agent(
            data,
            file=str(path),
            known_tools=known_tools,
            handoff_triggers=triggers,
            tool_prefixes=tool_prefixes,
            base_dir=path.parent,
            prompt_root=agents_dir,
            allowed_variables=(
                allowed_variables_for(name, [s for _, s in raw_scenarios]) if isinstance(name, str) else None
            ),
            strict_keys=True,
            _variables_context=context,
            voices_dir=voices_dir,
        )
        result.problems.extend(problems)
        if isinstance(name, str) and name.strip():
            defined.add(name.strip())
        if spec is None:
            continue
        first = where.get(spec.name.lower())
        if first is not None:
            result.problems.append(
                Problem(str(path), "name", f"duplicate agent name {spec.name!r}, already defined in {first}")
            )
            continue
        where[spec.name.lower()] = str(path)
        result.agents[spec.name] = spec

    scenario_files: dict[str, str] = {}
    for path, data in raw_scenarios:
        spec, problems = parse_scenario(
            data, result.agents, file=str(path), defined_agents=defined, strict_keys=True
        )
        result.problems.extend(problems)
        if spec is None:
            continue
        first = scenario_files.get(spec.name.lower())
        if first is not None:
            result.problems.append(
                Problem(
                    str(path), "name", f"duplicate scenario name {spec.name!r}, already defined in {first}"
                )
            )
            continue
        scenario_files[spec.name.lower()] = str(path)
        result.scenarios[spec.name] = spec
    return result
