"""Agent and scenario definition files: loading, validation and prompt rendering.

Pure Python (no Django): the loader turns ``fixtures/`` into immutable specs, and the same
validation functions check admin form data and REST bodies, so every route into the engine obeys
one set of rules.

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

Prompt templates are Jinja2 rendered in one immutable sandbox. At validation time a template may
only use the session variables (:data:`SESSION_VARIABLES`) and the ``agent_defaults`` keys that
*every* scenario containing the agent supplies; at render time an undefined value renders empty,
so a missing memory value never breaks a live turn. Unsafe attribute access (``__class__`` and
friends) raises :class:`jinja2.exceptions.SecurityError` instead of rendering.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jinja2 import ChainableUndefined, Template, meta, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from voiceagent.conversation.specs import (
    GENERIC_HANDOFF_TOOL,
    HANDOFF_TYPES,
    AgentSpec,
    HandoffSpec,
    ScenarioSpec,
    Source,
    VoiceSpec,
)

__all__ = [
    "AGENT_FILE",
    "DEFAULTS_FILE",
    "PROMOTED_MEMORY_KEYS",
    "SESSION_VARIABLES",
    "LoadResult",
    "Problem",
    "allowed_variables_for",
    "check_template",
    "deep_merge",
    "load_definitions",
    "parse_agent",
    "parse_scenario",
    "prompt_variables",
    "render_prompt",
    "template_variables",
    "validate_agent_fields",
    "validate_scenario",
]

AGENTS_DIR = "agents"
SCENARIOS_DIR = "scenarios"
AGENT_FILE = "agent.yaml"
DEFAULTS_FILE = "_defaults.yaml"

#: Variables every prompt template may use, filled per session by :func:`prompt_variables`.
SESSION_VARIABLES: frozenset[str] = frozenset(
    {
        "caller_name",
        "caller_phone",
        "caller_email",
        "client_id",
        "institution_name",
        "session_id",
        "agent_name",
        "memory",
        "contactcenter_prompt",
    }
)

#: Session-memory keys lifted to top-level template variables; each with the memory keys it is
#: read from, first non-empty wins (a generated demo profile stores ``full_name`` etc.).
PROMOTED_MEMORY_KEYS: dict[str, tuple[str, ...]] = {
    "caller_name": ("caller_name", "full_name"),
    "caller_phone": ("caller_phone", "phone_number"),
    "caller_email": ("caller_email", "email"),
    "client_id": ("client_id",),
    "institution_name": ("institution_name",),
    "contactcenter_prompt": ("contactcenter_prompt",),
}

AGENT_KEYS = frozenset(
    {
        "name",
        "description",
        "greeting",
        "return_greeting",
        "handoff",
        "tools",
        "prompts",
        "voice",
        "model",
        "temperature",
        "top_p",
        "max_tokens",
        "speech",
    }
)
#: Flat spellings accepted from admin forms and REST bodies (the CONTRACTS agent object).
FLAT_AGENT_KEYS = frozenset(
    {"handoff_trigger", "prompt", "voice_style", "voice_rate", "vad_silence_timeout_ms"}
)
_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "handoff": frozenset({"trigger"}),
    "prompts": frozenset({"path"}),
    "voice": frozenset({"name", "style", "rate"}),
    "speech": frozenset({"vad_silence_timeout_ms"}),
}
SCENARIO_KEYS = frozenset({"name", "description", "start_agent", "agents", "handoffs", "agent_defaults"})
HANDOFF_KEYS = frozenset({"from", "to", "tool", "type"})

TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.0, 1.0)
MAX_TOKENS_RANGE = (1, 16384)
VAD_SILENCE_RANGE = (100, 10000)

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VOICE_RATE = re.compile(r"^(?:[+-]?\d+(?:\.\d+)?%?|x-slow|slow|medium|fast|x-fast|default)$")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


# --------------------------------------------------------------------------------------------
# Problems and results


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a definition: where (file, field) and what (message)."""

    file: str
    field: str
    message: str
    level: str = "error"  # "error" skips the agent/scenario; "warning" only reports

    def __str__(self) -> str:
        suffix = " (warning)" if self.level == "warning" else ""
        return f"{self.file}: {self.field}: {self.message}{suffix}"

    @property
    def is_error(self) -> bool:
        return self.level != "warning"


@dataclass
class LoadResult:
    """What :func:`load_definitions` found: the valid specs and every problem."""

    agents: dict[str, AgentSpec] = field(default_factory=dict)
    scenarios: dict[str, ScenarioSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]


def _has_errors(problems: Iterable[Problem]) -> bool:
    return any(p.is_error for p in problems)


def _suggest(value: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {match[0]!r}?)" if match else ""


# --------------------------------------------------------------------------------------------
# Templates


class _LenientUndefined(ChainableUndefined):
    """Renders as empty, chains through attribute/item access and calls; never hides a sandbox
    violation (an undefined produced by unsafe attribute access raises SecurityError)."""

    __slots__ = ()

    def _unsafe(self) -> bool:
        exc = self._undefined_exception
        return isinstance(exc, type) and issubclass(exc, SecurityError)

    def __str__(self) -> str:
        if self._unsafe():
            self._fail_with_undefined_error()
        return ""

    def __iter__(self):
        if self._unsafe():
            self._fail_with_undefined_error()
        return iter(())

    def __bool__(self) -> bool:
        if self._unsafe():
            self._fail_with_undefined_error()
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> _LenientUndefined:
        if self._unsafe():
            self._fail_with_undefined_error()
        return self


def _finalize(value: Any) -> Any:
    """``None`` (e.g. ``memory.get('x')``, no session id) renders empty, not "None"."""
    return "" if value is None else value


#: The one template environment: sandboxed, immutable (templates cannot modify ``memory``).
_ENV = ImmutableSandboxedEnvironment(
    undefined=_LenientUndefined,
    autoescape=False,
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=_finalize,
)


@functools.lru_cache(maxsize=512)
def _compile(source: str) -> Template:
    return _ENV.from_string(source)


@functools.lru_cache(maxsize=512)
def _parse(source: str) -> nodes.Template:
    return _ENV.parse(source)


def render_prompt(template_source: str, variables: Mapping[str, Any]) -> str:
    """Render a prompt template; undefined values render empty, runs of blank lines collapse.

    Raises :class:`jinja2.TemplateSyntaxError` for a broken template (validation catches those
    first) and :class:`jinja2.exceptions.SecurityError` for unsafe attribute access.
    """
    text = _compile(template_source).render(dict(variables))
    return _BLANK_LINES.sub("\n\n", text).strip()


def template_variables(source: str) -> set[str]:
    """Names the template reads from its context (raises TemplateSyntaxError when broken)."""
    return set(meta.find_undeclared_variables(_parse(source)))


def _unsafe_accesses(ast: nodes.Template) -> list[str]:
    names = [node.attr for node in ast.find_all(nodes.Getattr) if node.attr.startswith("_")]
    for node in ast.find_all(nodes.Getitem):
        arg = node.arg
        if isinstance(arg, nodes.Const) and isinstance(arg.value, str) and arg.value.startswith("_"):
            names.append(arg.value)
    return names


def check_template(
    source: Any,
    *,
    file: str,
    field: str = "prompt",
    allowed_variables: Collection[str] | None = None,
    context: str = "",
) -> list[Problem]:
    """Problems with a prompt template's source: empty, syntax, includes, unsafe access and (when
    ``allowed_variables`` is given) variables outside that set. ``context`` ends the
    undefined-variable message, e.g. which scenarios were consulted."""
    if not isinstance(source, str):
        return [Problem(file, field, f"prompt must be a string, got {type(source).__name__}")]
    if not source.strip():
        return [Problem(file, field, "prompt template is empty")]
    try:
        ast = _parse(source)
    except TemplateSyntaxError as exc:
        return [Problem(file, field, f"template syntax error at line {exc.lineno}: {exc.message}")]
    problems: list[Problem] = []
    if list(meta.find_referenced_templates(ast)):
        problems.append(Problem(file, field, "include, import and extends are not supported in prompts"))
    unsafe = _unsafe_accesses(ast)
    if unsafe:
        names = ", ".join(repr(name) for name in sorted(set(unsafe)))
        problems.append(Problem(file, field, f"access to private attributes is not allowed: {names}"))
    if allowed_variables is not None:
        allowed = set(allowed_variables)
        for name in sorted(set(meta.find_undeclared_variables(ast)) - allowed):
            problems.append(
                Problem(
                    file,
                    field,
                    f"template uses undefined variable {name!r}{_suggest(name, allowed)}; "
                    f"allowed are the session variables and the agent_defaults keys{context}",
                )
            )
    return problems


def allowed_variables_for(agent_name: str, scenarios: Iterable[ScenarioSpec | Mapping]) -> set[str]:
    """Session variables plus the ``agent_defaults`` keys every scenario containing the agent has."""
    keys: set[str] | None = None
    for scenario in scenarios:
        names, defaults = _scenario_agents_and_defaults(scenario)
        if agent_name not in names:
            continue
        keys = set(defaults) if keys is None else keys & set(defaults)
    return set(SESSION_VARIABLES) | (keys or set())


def _scenario_agents_and_defaults(scenario: ScenarioSpec | Mapping) -> tuple[list[str], list[str]]:
    if isinstance(scenario, ScenarioSpec):
        return list(scenario.agents), [str(k) for k in scenario.agent_defaults]
    agents = scenario.get("agents")
    defaults = scenario.get("agent_defaults")
    names = [a for a in agents if isinstance(a, str)] if isinstance(agents, list) else []
    keys = [str(k) for k in defaults] if isinstance(defaults, Mapping) else []
    return names, keys


def prompt_variables(
    scenario: ScenarioSpec | None,
    memory: Mapping[str, Any] | None,
    session_id: str | None = None,
    agent_name: str | None = None,
) -> dict[str, Any]:
    """The render context of a prompt: the scenario's ``agent_defaults``, then the promoted
    memory keys (a caller's own ``institution_name`` overrides the scenario default), then
    ``memory`` itself, ``session_id`` and ``agent_name``."""
    context: dict[str, Any] = dict(scenario.agent_defaults) if scenario is not None else {}
    mem = dict(memory or {})
    for key, sources in PROMOTED_MEMORY_KEYS.items():
        for source in sources:
            value = mem.get(source)
            if value not in (None, ""):
                context[key] = value
                break
    context["memory"] = mem
    context["session_id"] = session_id
    context["agent_name"] = agent_name
    return context


# --------------------------------------------------------------------------------------------
# Agents


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


class _Reader:
    """Reads agent fields in nested (file) or flat (form/REST) spelling, collecting problems."""

    def __init__(self, data: Mapping[str, Any], file: str, strict_keys: bool):
        self.data = data
        self.file = file
        self.problems: list[Problem] = []
        self._bad_blocks: set[str] = set()
        for block, inner in _BLOCK_KEYS.items():
            if block not in data or data[block] is None:
                continue
            value = data[block]
            if block == "voice" and isinstance(value, str):
                continue  # flat spelling: voice name
            if not isinstance(value, Mapping):
                self._bad_blocks.add(block)
                self.problem(block, f"must be a mapping with {', '.join(sorted(inner))}")
            elif strict_keys:
                for key in value:
                    if key not in inner:
                        self.problem(f"{block}.{key}", f"unknown field{_suggest(str(key), inner)}")
        if strict_keys:
            for key in data:
                if key not in AGENT_KEYS:
                    self.problem(str(key), f"unknown field{_suggest(str(key), AGENT_KEYS)}")

    def problem(self, field_name: str, message: str, level: str = "error") -> None:
        self.problems.append(Problem(self.file, field_name, message, level))

    def get(self, nested: tuple[str, str] | str, flat: str | None = None) -> tuple[str, Any]:
        """(label, value) of a field; value ``None`` when absent."""
        if flat is not None and flat in self.data:
            return flat, self.data[flat]
        if isinstance(nested, str):
            return nested, self.data.get(nested)
        outer, inner = nested
        block = self.data.get(outer)
        label = f"{outer}.{inner}"
        if outer in self._bad_blocks or not isinstance(block, Mapping):
            if outer == "voice" and inner == "name" and isinstance(block, str):
                return "voice", block
            return label, None
        return label, block.get(inner)

    def string(self, nested: tuple[str, str] | str, flat: str | None = None, *, required=False) -> str | None:
        label, value = self.get(nested, flat)
        if value is None:
            if required:
                self.problem(label, "is required")
            return None
        if not isinstance(value, str):
            self.problem(label, f"must be a string, got {type(value).__name__}")
            return None
        if required and not value.strip():
            self.problem(label, "must not be empty")
            return None
        return value

    def number(
        self,
        nested: tuple[str, str] | str,
        flat: str | None,
        bounds: tuple[float, float],
        *,
        integer: bool,
    ) -> float | int | None:
        label, value = self.get(nested, flat)
        if value is None:
            return None
        kinds: tuple[type, ...] = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            kind = "an integer" if integer else "a number"
            self.problem(label, f"must be {kind}, got {type(value).__name__} {value!r}")
            return None
        low, high = bounds
        if not low <= value <= high:
            self.problem(label, f"must be between {low} and {high}, got {value!r}")
            return None
        return int(value) if integer else float(value)


def _read_prompt_file(
    path_value: str, *, file: str, base_dir: Path | None, prompt_root: Path | None
) -> tuple[str | None, str, list[Problem]]:
    """(source, template file label, problems) of ``prompts.path``."""
    if base_dir is None:
        return None, file, [Problem(file, "prompts.path", "a prompt path needs the agent's folder")]
    path = base_dir / path_value
    root = prompt_root or base_dir
    if not path.resolve().is_relative_to(root.resolve()):
        return None, file, [Problem(file, "prompts.path", f"{path_value!r} points outside {root}")]
    if not path.is_file():
        return None, file, [Problem(file, "prompts.path", f"prompt file not found: {path_value}")]
    try:
        return path.read_text(encoding="utf-8"), str(path), []
    except (OSError, UnicodeDecodeError) as exc:
        return None, str(path), [Problem(str(path), "prompts.path", f"cannot read prompt file: {exc}")]


def _is_known_tool(name: str, known: set[str], prefixes: Collection[str]) -> bool:
    return name in known or any(name.startswith(f"{prefix}_") for prefix in prefixes)


def _check_agent(
    data: Any,
    *,
    file: str,
    known_tools: Collection[str],
    handoff_triggers: Collection[str],
    tool_prefixes: Collection[str],
    prompt_template: str | None,
    prompt_file: str | None,
    base_dir: Path | None,
    prompt_root: Path | None,
    allowed_variables: Collection[str] | None,
    variables_context: str,
    strict_keys: bool,
) -> tuple[list[Problem], dict[str, Any]]:
    if not isinstance(data, Mapping):
        return [Problem(file, "(document)", f"must be a mapping, got {type(data).__name__}")], {}
    r = _Reader(data, file, strict_keys)
    values: dict[str, Any] = {}
    name = r.string("name", required=True)
    values["name"] = name.strip() if name else name
    for key in ("description", "greeting", "return_greeting"):
        values[key] = r.string(key) or ""
    values["model"] = r.string("model")

    trigger_label, _ = r.get(("handoff", "trigger"), "handoff_trigger")
    trigger = r.string(("handoff", "trigger"), "handoff_trigger")
    if trigger is not None:
        if not _TOOL_NAME.match(trigger):
            r.problem(trigger_label, f"{trigger!r} is not a valid tool name (letters, digits, _ and -)")
            trigger = None
        elif trigger == GENERIC_HANDOFF_TOOL:
            r.problem(trigger_label, f"{GENERIC_HANDOFF_TOOL!r} is the generic handoff tool, not a trigger")
            trigger = None
        elif trigger in known_tools:
            r.problem(trigger_label, f"{trigger!r} is already a registered tool")
            trigger = None
    values["handoff_trigger"] = trigger

    tools_value = data.get("tools")
    tools: list[str] = []
    if tools_value is not None and not isinstance(tools_value, list):
        r.problem("tools", f"must be a list of tool names, got {type(tools_value).__name__}")
    elif tools_value:
        known = set(known_tools) | set(handoff_triggers) | {GENERIC_HANDOFF_TOOL}
        if trigger:
            known.add(trigger)
        for index, tool in enumerate(tools_value):
            if not isinstance(tool, str) or not tool.strip():
                r.problem(f"tools[{index}]", f"must be a non-empty string, got {tool!r}")
            elif not _is_known_tool(tool, known, tool_prefixes):
                r.problem(f"tools[{index}]", f"unknown tool {tool!r}{_suggest(tool, known)}")
            elif tool not in tools:
                tools.append(tool)
    values["tools"] = tuple(tools)

    values["temperature"] = r.number("temperature", None, TEMPERATURE_RANGE, integer=False)
    values["top_p"] = r.number("top_p", None, TOP_P_RANGE, integer=False)
    values["max_tokens"] = r.number("max_tokens", None, MAX_TOKENS_RANGE, integer=True)
    values["vad_silence_timeout_ms"] = r.number(
        ("speech", "vad_silence_timeout_ms"), "vad_silence_timeout_ms", VAD_SILENCE_RANGE, integer=True
    )

    voice_name = r.string(("voice", "name"))
    voice_style = r.string(("voice", "style"), "voice_style")
    rate_label, rate = r.get(("voice", "rate"), "voice_rate")
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        rate = str(rate)
    if rate is not None and (not isinstance(rate, str) or not _VOICE_RATE.match(rate.strip())):
        r.problem(rate_label, f"{rate!r} is not a speaking rate (e.g. '+10%', '0.9', 'slow')")
        rate = None
    values["voice"] = VoiceSpec(name=voice_name, style=voice_style, rate=rate.strip() if rate else None)

    # The prompt: given by the caller, inline ``prompt`` (forms/REST), or ``prompts.path`` (files).
    prompt_label = "prompt"
    template_file = prompt_file or file
    source: Any = prompt_template
    if source is None and "prompt" in data:
        source = data["prompt"]
    elif source is None:
        prompt_label, path_value = r.get(("prompts", "path"))
        if path_value is None:
            if "prompts" not in r._bad_blocks:
                r.problem(prompt_label, "is required")
        elif not isinstance(path_value, str) or not path_value.strip():
            r.problem(prompt_label, f"must be a non-empty string, got {path_value!r}")
        else:
            source, template_file, read_problems = _read_prompt_file(
                path_value, file=file, base_dir=base_dir, prompt_root=prompt_root
            )
            r.problems.extend(read_problems)
    if source is not None:
        r.problems.extend(
            check_template(
                source,
                file=template_file,
                field=prompt_label,
                allowed_variables=allowed_variables,
                context=variables_context,
            )
        )
    values["prompt_template"] = source
    return r.problems, values


def validate_agent_fields(
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
) -> list[Problem]:
    """Every problem with one agent's fields.

    ``data`` uses the file spelling (``handoff.trigger``, ``prompts.path``, ``voice.name`` ...)
    or the flat one of forms and REST (``handoff_trigger``, ``prompt`` holding the template
    source, ``voice`` as the voice name, ``voice_style``, ``voice_rate``,
    ``vad_silence_timeout_ms``); problem fields name the spelling used. A tool is valid when it
    is in ``known_tools``, is one of ``handoff_triggers`` (triggers of other agents), is
    :data:`GENERIC_HANDOFF_TOOL`, or starts with ``<prefix>_`` for one of ``tool_prefixes`` (MCP
    servers whose tools are not registered yet). ``allowed_variables=None`` skips the
    undefined-variable check (see :func:`allowed_variables_for`). ``strict_keys`` reports
    unknown fields (on for files).
    """
    problems, _ = _check_agent(
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
        variables_context="",
        strict_keys=strict_keys,
    )
    return problems


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
) -> tuple[AgentSpec | None, list[Problem]]:
    """Validate like :func:`validate_agent_fields` and build the spec; ``None`` on any error."""
    problems, values = _check_agent(
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
    )
    if _has_errors(problems):
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
        source=source,
        session_id=session_id,
        origin=file if origin is None else origin,
    )
    return spec, problems


# --------------------------------------------------------------------------------------------
# Scenarios


def _check_scenario(
    data: Any,
    agents: Mapping[str, AgentSpec],
    *,
    file: str,
    defined_agents: Collection[str],
    check_templates: bool,
    strict_keys: bool,
) -> tuple[list[Problem], dict[str, Any]]:
    if not isinstance(data, Mapping):
        return [Problem(file, "(document)", f"must be a mapping, got {type(data).__name__}")], {}
    problems: list[Problem] = []

    def problem(field_name: str, message: str, level: str = "error") -> None:
        problems.append(Problem(file, field_name, message, level))

    if strict_keys:
        for key in data:
            if key not in SCENARIO_KEYS:
                problem(str(key), f"unknown field{_suggest(str(key), SCENARIO_KEYS)}")

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

    defaults = data.get("agent_defaults")
    if defaults is None:
        defaults = {}
    elif not isinstance(defaults, Mapping):
        problem("agent_defaults", f"must be a mapping of template variables, got {type(defaults).__name__}")
        defaults = {}
    else:
        for key in defaults:
            if not isinstance(key, str) or not _IDENTIFIER.match(key):
                problem(f"agent_defaults.{key}", "variable names must be identifiers (letters, digits, _)")

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
                        problem(label, f"agent {agent!r} does not exist{_suggest(agent, defined)}")

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
        problem("start_agent", f"{start!r} is not among the scenario's agents{_suggest(start, members)}")

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
    prefix = f"handoffs[{index}]"
    if not isinstance(edge, Mapping):
        problem(prefix, "must be a mapping with from, to, tool and type")
        return None
    if strict_keys:
        for key in edge:
            if key not in HANDOFF_KEYS:
                problem(f"{prefix}.{key}", f"unknown field{_suggest(str(key), HANDOFF_KEYS)}")
    ok = True
    ends: dict[str, str] = {}
    for end in ("from", "to"):
        value = edge.get(end)
        if not isinstance(value, str) or not value:
            problem(f"{prefix}.{end}", f"must be an agent name, got {value!r}")
            ok = False
        elif value not in members:
            problem(
                f"{prefix}.{end}", f"{value!r} is not among the scenario's agents{_suggest(value, members)}"
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
    problems, _ = _check_scenario(
        data,
        agents,
        file=file,
        defined_agents=defined_agents,
        check_templates=check_templates,
        strict_keys=strict_keys,
    )
    return problems


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
    """Validate like :func:`validate_scenario` and build the spec; ``None`` on any error."""
    problems, values = _check_scenario(
        data,
        agents,
        file=file,
        defined_agents=defined_agents,
        check_templates=check_templates,
        strict_keys=strict_keys,
    )
    if _has_errors(problems):
        return None, problems
    spec = ScenarioSpec(
        name=values["name"],
        start_agent=values["start_agent"],
        agents=values["agents"],
        description=values["description"],
        handoffs=values["handoffs"],
        agent_defaults=values["agent_defaults"],
        source=source,
        session_id=session_id,
        origin=file if origin is None else origin,
    )
    return spec, problems


# --------------------------------------------------------------------------------------------
# Files


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable key: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> tuple[Any, list[Problem]]:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(file, "(document)", f"cannot read file: {exc}")]
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}" if mark is not None else ""
        detail = exc.problem or exc.context or "invalid YAML"
        return None, [Problem(file, "yaml", f"syntax error{where}: {detail}")]
    except yaml.YAMLError as exc:
        return None, [Problem(file, "yaml", f"syntax error: {exc}")]
    if data is None:
        return None, [Problem(file, "(document)", "file is empty")]
    if not isinstance(data, dict):
        return None, [Problem(file, "(document)", f"must be a mapping, got {type(data).__name__}")]
    return data, []


def _load_defaults(agents_dir: Path) -> tuple[dict[str, Any], list[Problem]]:
    path = agents_dir / DEFAULTS_FILE
    if not path.is_file():
        return {}, []
    data, problems = _read_yaml(path)
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
            data, problems = _read_yaml(path)
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
            data, problems = _read_yaml(path)
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
            if isinstance(name, str) and name in _scenario_agents_and_defaults(scenario)[0]
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
