"""The rules of one scenario and its handoff edges, and their error messages.

A scenario is checked against the agents that validated: it may only list those, its start
agent must be one of them, each handoff edge must use the target's trigger (or the generic
handoff tool), and every member's prompt must find its variables in ``agent_defaults``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from jinja2.exceptions import TemplateSyntaxError

from agents_app.definitions.agent_schema import AGENT_KEYS, FLAT_AGENT_KEYS
from agents_app.definitions.problems import Problem, suggest
from agents_app.definitions.templates import SESSION_VARIABLES, template_variables
from voiceagent.conversation.specs import GENERIC_HANDOFF_TOOL, HANDOFF_TYPES, AgentSpec, HandoffSpec

SCENARIO_KEYS = frozenset(
    {
        "name",
        "description",
        "start_agent",
        "agents",
        "handoffs",
        "agent_defaults",
        "transfer_target",
        "recording",
        "recording_announcement",
    }
)
# where escalate_to_human transfers a phone call: a +E.164 number or an ACS user's raw id
TRANSFER_TARGET = re.compile(r"^(\+[1-9][0-9]{6,14}|8:acs:[A-Za-z0-9_.:-]{1,200})$")
MAX_ANNOUNCEMENT_CHARS = 500  # a consent line, said before the greeting
HANDOFF_KEYS = frozenset({"from", "to", "tool", "type"})

_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
#: ``agent_defaults`` are template variables (README, Production): at most this many, each a
#: string of at most MAX_DEFAULT_CHARS characters, a number, true/false or null.
MAX_DEFAULTS = 50
MAX_DEFAULT_CHARS = 2000
#: Filled per session after the defaults (templates.prompt_variables): a default could never show.
RESERVED_DEFAULTS = frozenset({"memory", "session_id", "agent_name"})


def check_agent_defaults(defaults: Any, problem: Callable[[str, str], None]) -> dict[str, Any]:
    """The valid part of a scenario's ``agent_defaults``; each problem reported. Names are
    identifiers that start with a letter (so no ``__class__``), are not filled by the session and
    are not agent settings (``temperature`` here would be a template variable, not the agent's
    temperature); values are JSON scalars of bounded size."""
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        problem("agent_defaults", f"must be a mapping of template variables, got {type(defaults).__name__}")
        return {}
    if len(defaults) > MAX_DEFAULTS:
        problem("agent_defaults", f"at most {MAX_DEFAULTS} variables, got {len(defaults)}")
        return {}
    clean: dict[str, Any] = {}
    settings = AGENT_KEYS | FLAT_AGENT_KEYS
    for key, value in defaults.items():
        label = f"agent_defaults.{str(key)[:64]}"
        if not isinstance(key, str) or not _IDENTIFIER.match(key):
            problem(label, "variable names are identifiers: a letter, then letters, digits or _ (64 at most)")
        elif key in RESERVED_DEFAULTS:
            problem(label, f"{key!r} is filled by the session; choose another name")
        elif key in settings:
            problem(label, f"{key!r} is an agent setting, not a template variable: set it on the agent")
        elif isinstance(value, str) and len(value) > MAX_DEFAULT_CHARS:
            problem(label, f"at most {MAX_DEFAULT_CHARS} characters")
        elif isinstance(value, float) and not math.isfinite(value):
            problem(label, "must be a finite number")
        elif value is not None and not isinstance(value, str | int | float | bool):
            problem(label, f"must be a string, number, true/false or null, got {type(value).__name__}")
        else:
            clean[key] = value
    return clean


def check_scenario(
    data: Any,
    agents: Mapping[str, AgentSpec],
    *,
    file: str,
    defined_agents: Collection[str],
    check_templates: bool,
    strict_keys: bool,
) -> tuple[list[Problem], dict[str, Any]]:
    """(problems, field values) of one scenario; the values build its spec when nothing is an error."""
    if not isinstance(data, Mapping):
        return [Problem(file, "(document)", f"must be a mapping, got {type(data).__name__}")], {}
    problems: list[Problem] = []

    def problem(field_name: str, message: str, level: str = "error") -> None:
        problems.append(Problem(file, field_name, message, level))

    if strict_keys:
        for key in data:
            if key not in SCENARIO_KEYS:
                problem(str(key), f"unknown field{suggest(str(key), SCENARIO_KEYS)}")

    name = data.get("name")
    if name is None:
        problem("name", "is required")
    elif not isinstance(name, str) or not name.strip():
        problem("name", f"must be a non-empty string, got {name!r}")
        name = None
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        problem("description", f"must be a string, got {type(description).__name__}")
        description = None

    defaults = check_agent_defaults(data.get("agent_defaults"), problem)
    target = data.get("transfer_target")
    if target is not None and (not isinstance(target, str) or not TRANSFER_TARGET.match(target)):
        shown = repr(target)[:80] if isinstance(target, str) else type(target).__name__
        problem(
            "transfer_target", f"must be a +E.164 phone number or an ACS user id (8:acs:...), got {shown}"
        )
        target = None
    recording = data.get("recording")
    if recording is not None and not isinstance(recording, bool):
        problem("recording", f"must be true, false or absent (as RECORDING_ENABLED), got {recording!r}")
        recording = None
    announcement = data.get("recording_announcement")
    if announcement is not None and (
        not isinstance(announcement, str) or len(announcement) > MAX_ANNOUNCEMENT_CHARS
    ):
        problem("recording_announcement", f"must be a string of at most {MAX_ANNOUNCEMENT_CHARS} characters")
        announcement = None

    # Agents taking part.
    members: list[str] = []
    raw_agents = data.get("agents")
    if raw_agents is None:
        problem("agents", "is required")
    elif not isinstance(raw_agents, list) or not raw_agents:
        problem("agents", "must be a non-empty list of agent names")
    else:
        defined = set(defined_agents) | set(agents)
        for index, agent in enumerate(raw_agents):
            label = f"agents[{index}]"
            if not isinstance(agent, str) or not agent.strip():
                problem(label, f"must be an agent name, got {agent!r}")
            elif agent in members:
                problem(label, f"agent {agent!r} is listed twice")
            else:
                members.append(agent)
                if agent not in agents:
                    if agent in defined:
                        problem(label, f"agent {agent!r} failed validation (see its problems)")
                    else:
                        problem(label, f"agent {agent!r} does not exist{suggest(agent, defined)}")

    # Triggers must be unique within the scenario.
    owners: dict[str, str] = {}
    for agent in members:
        spec = agents.get(agent)
        if spec is None or not spec.handoff_trigger:
            continue
        other = owners.setdefault(spec.handoff_trigger, agent)
        if other != agent:
            problem(
                "agents",
                f"agents {other!r} and {agent!r} share the handoff trigger {spec.handoff_trigger!r}",
            )

    start = data.get("start_agent")
    if start is None:
        problem("start_agent", "is required")
    elif not isinstance(start, str) or not start.strip():
        problem("start_agent", f"must be an agent name, got {start!r}")
        start = None
    elif start not in members:
        problem("start_agent", f"{start!r} is not among the scenario's agents{suggest(start, members)}")

    handoffs: list[HandoffSpec] = []
    raw_handoffs = data.get("handoffs")
    if raw_handoffs is not None and not isinstance(raw_handoffs, list):
        problem("handoffs", f"must be a list, got {type(raw_handoffs).__name__}")
    elif raw_handoffs:
        seen_edges: set[tuple[str, str]] = set()
        for index, edge in enumerate(raw_handoffs):
            handoff = _check_handoff(edge, index, members, agents, seen_edges, problem, strict_keys)
            if handoff is not None:
                handoffs.append(handoff)

    if check_templates:
        allowed = set(SESSION_VARIABLES) | {str(k) for k in defaults}
        for agent in members:
            spec = agents.get(agent)
            if spec is None:
                continue
            try:
                missing = template_variables(spec.prompt_template) - allowed
            except TemplateSyntaxError:
                continue  # reported on the agent
            for variable in sorted(missing):
                problem(
                    "agent_defaults",
                    f"agent {agent!r} prompt uses {variable!r}, which is neither a session variable "
                    "nor in agent_defaults",
                )

    values = {
        "name": name.strip() if isinstance(name, str) else name,
        "description": description or "",
        "start_agent": start,
        "agents": tuple(members),
        "handoffs": tuple(handoffs),
        "agent_defaults": dict(defaults),
        "transfer_target": target or None,
        "recording": recording,
        "recording_announcement": (announcement or "").strip(),
    }
    return problems, values


def _check_handoff(
    edge: Any,
    index: int,
    members: list[str],
    agents: Mapping[str, AgentSpec],
    seen_edges: set[tuple[str, str]],
    problem: Callable[..., None],
    strict_keys: bool,
) -> HandoffSpec | None:
    """The spec of one handoff edge, or ``None`` when it is broken (reported through ``problem``)."""
    prefix = f"handoffs[{index}]"
    if not isinstance(edge, Mapping):
        problem(prefix, "must be a mapping with from, to, tool and type")
        return None
    if strict_keys:
        for key in edge:
            if key not in HANDOFF_KEYS:
                problem(f"{prefix}.{key}", f"unknown field{suggest(str(key), HANDOFF_KEYS)}")
    ok = True
    ends: dict[str, str] = {}
    for end in ("from", "to"):
        value = edge.get(end)
        if not isinstance(value, str) or not value:
            problem(f"{prefix}.{end}", f"must be an agent name, got {value!r}")
            ok = False
        elif value not in members:
            problem(
                f"{prefix}.{end}", f"{value!r} is not among the scenario's agents{suggest(value, members)}"
            )
            ok = False
        else:
            ends[end] = value
    if ok and ends["from"] == ends["to"]:
        problem(prefix, f"an agent cannot hand off to itself ({ends['from']!r})")
        ok = False
    handoff_type = edge.get("type", "announced")
    if handoff_type not in HANDOFF_TYPES:
        problem(f"{prefix}.type", f"must be one of {', '.join(HANDOFF_TYPES)}, got {handoff_type!r}")
        ok = False
    tool = edge.get("tool")
    if not isinstance(tool, str) or not tool:
        problem(f"{prefix}.tool", f"must be a tool name, got {tool!r}")
        return None
    target = agents.get(ends.get("to", ""))
    source = agents.get(ends.get("from", ""))
    if target is not None and tool not in (target.handoff_trigger, GENERIC_HANDOFF_TOOL):
        expected = target.handoff_trigger or "(it has no trigger)"
        problem(
            f"{prefix}.tool",
            f"{tool!r} does not hand off to {target.name!r}: use its trigger {expected} "
            f"or {GENERIC_HANDOFF_TOOL!r}",
        )
        ok = False
    if ok and source is not None and tool not in source.tools:
        problem(
            f"{prefix}.tool",
            f"agent {source.name!r} does not list {tool!r} in its tools, so it can never take this handoff",
            "warning",
        )
    if not ok:
        return None
    pair = (ends["from"], ends["to"])
    if pair in seen_edges:
        problem(prefix, f"duplicate handoff {pair[0]} -> {pair[1]}")
        return None
    seen_edges.add(pair)
    return HandoffSpec(from_agent=pair[0], to_agent=pair[1], tool=tool, type=handoff_type)


def validate_scenario(
    data: Mapping[str, Any],
    agents: Mapping[str, AgentSpec],
    *,
    file: str = "",
    defined_agents: Collection[str] = (),
    check_templates: bool = True,
    strict_keys: bool = False,
) -> list[Problem]:
    """Every problem with one scenario given the available agents (name -> spec).

    ``defined_agents`` are names that exist but failed validation (for a clearer message).
    ``check_templates`` checks each member agent's prompt against this scenario's
    ``agent_defaults`` plus the session variables.
    """
    problems, _ = check_scenario(
        data,
        agents,
        file=file,
        defined_agents=defined_agents,
        check_templates=check_templates,
        strict_keys=strict_keys,
    )
    return problems
