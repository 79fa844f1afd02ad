"""Agent and scenario definitions: loading, validation and prompt rendering (pure Python, no Django).

The loader turns ``fixtures/`` into immutable specs, and the same validation functions check admin
form data and REST bodies, so every route into the engine obeys one set of rules. This package
is the public face; its modules each hold one job:

- :mod:`.files` reads YAML documents and prompt files from disk,
- :mod:`.loader` walks a definitions folder (layout in its docstring) and merges ``_defaults.yaml``,
- :mod:`.agent_schema` and :mod:`.scenario_schema` hold the validation rules and their messages,
  :mod:`.turn_taking_schema` those of an agent's ``turn_taking`` section,
- :mod:`.templates` is the Jinja2 sandbox that renders prompts and checks their variables,
- :mod:`.to_specs` builds the engine's ``AgentSpec`` / ``ScenarioSpec`` from valid data,
- :mod:`.problems` is what every validator reports.
"""

from agents_app.definitions.agent_schema import validate_agent_fields
from agents_app.definitions.files import AGENT_FILE, DEFAULTS_FILE
from agents_app.definitions.loader import deep_merge, load_definitions
from agents_app.definitions.problems import LoadResult, Problem
from agents_app.definitions.scenario_schema import validate_scenario
from agents_app.definitions.templates import (
    PROMOTED_MEMORY_KEYS,
    SESSION_VARIABLES,
    allowed_variables_for,
    check_template,
    prompt_variables,
    render_prompt,
    template_variables,
)
from agents_app.definitions.to_specs import parse_agent, parse_scenario
from agents_app.definitions.turn_taking_schema import (
    TURN_TAKING_KEYS,
    check_turn_taking,
    turn_taking_spec,
    turn_taking_values,
)

__all__ = [
    "AGENT_FILE",
    "DEFAULTS_FILE",
    "PROMOTED_MEMORY_KEYS",
    "SESSION_VARIABLES",
    "TURN_TAKING_KEYS",
    "LoadResult",
    "Problem",
    "allowed_variables_for",
    "check_template",
    "check_turn_taking",
    "deep_merge",
    "load_definitions",
    "parse_agent",
    "parse_scenario",
    "prompt_variables",
    "render_prompt",
    "template_variables",
    "turn_taking_spec",
    "turn_taking_values",
    "validate_agent_fields",
    "validate_scenario",
]
