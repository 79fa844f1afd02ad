"""The admin's form fields for agents and scenarios: Django's own widgets fed by the catalogs the
API validates against, so an operator picks instead of typing JSON.

- an agent's ``tools``: a checkbox list grouped into built-in tools, handoffs (each agent's
  trigger) and one group per MCP server (the server itself = all its tools, then each tool), each
  with its description, and a filter box (:data:`TOOL_PICKER_JS`; without script it is a plain list);
- its turn-taking section and model settings: typed fields with the limits of the loader's rules
  (``turn_taking_<key>``; one :func:`compose_turn_taking` builds the section and says which field
  a problem belongs to);
- a scenario's agents (checkboxes) and start agent (a select), and each handoff row's agents,
  trigger and type (selects); its ``agent_defaults`` (prompt template variables) as ``name = value``
  lines (:class:`TemplateVariablesField`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django import forms

from agents_app.definitions.agent_schema import (
    MAX_TOKENS_RANGE,
    TEMPERATURE_RANGE,
    TOP_P_RANGE,
    VAD_SILENCE_RANGE,
)
from agents_app.definitions.turn_taking_schema import (
    INTEGER_RANGES,
    MAX_FILLER_CHARS,
    MAX_FILLERS,
    MAX_LINE_CHARS,
    NUMBER_RANGES,
    TURN_TAKING_KEYS,
    check_turn_taking,
)

__all__ = [
    "TURN_TAKING_FORM_FIELDS",
    "TemplateVariablesField",
    "ToolPicker",
    "agent_choices",
    "compose_turn_taking",
    "model_fields",
    "tool_choices",
    "turn_taking_fields",
    "turn_taking_initial",
]

TOOL_PICKER_JS = "agents_app/tool_picker.js"
TT_PREFIX = "turn_taking_"
TURN_TAKING_FORM_FIELDS = tuple(TT_PREFIX + key for key in TURN_TAKING_KEYS)
GLOBAL = {  # the variable each turn-taking key follows when empty
    key: key.upper() for key in TURN_TAKING_KEYS if key in INTEGER_RANGES or key in NUMBER_RANGES
}
Choices = list[tuple[str, Any]]


class TemplateVariablesField(forms.CharField):
    """A scenario's prompt template variables, one ``name = value`` a line, instead of a JSON
    object. A value that reads as a JSON number, ``true``/``false``/``null`` or a "quoted string"
    (how one with a line break is written) is that; anything else is the text as typed. The
    loader's rules (names, reserved names, sizes) then apply as for a file."""

    widget = forms.Textarea

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 4, "cols": 80}))
        kwargs.setdefault(
            "help_text",
            "Variables for the agents' prompt templates, one a line: name = value "
            '(e.g. bank_name = Contoso Bank). Numbers, true/false and "quoted text" keep their type.',
        )
        super().__init__(strip=False, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, str):
            try:  # the model's JSON as the form's initial text, or what was typed
                value = json.loads(value) if value.lstrip().startswith("{") else value
            except ValueError:
                return value
        if isinstance(value, Mapping):
            return "\n".join(f"{name} = {_shown(v)}" for name, v in value.items())
        return value

    def to_python(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str) and value.lstrip().startswith("{"):  # a JSON object pasted in
            try:
                pasted = json.loads(value)
            except ValueError as exc:
                raise forms.ValidationError(f"not a JSON object: {exc}") from None
            if not isinstance(pasted, dict):
                raise forms.ValidationError("write name = value lines, or one JSON object")
            return pasted
        variables: dict[str, Any] = {}
        for number, line in enumerate(str(value or "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, text = line.partition("=")
            name = name.strip()
            if not sep or not name:
                raise forms.ValidationError(f"line {number}: write name = value")
            if name in variables:
                raise forms.ValidationError(f"line {number}: {name} is given twice")
            variables[name] = _typed(text.strip())
        return variables


def _typed(text: str) -> Any:
    """A typed value: a JSON scalar when it reads as one, else the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if value is None or isinstance(value, str | int | float | bool) else text


def _shown(value: Any) -> str:
    """A value as a line shows it, so that reading it back gives the same value."""
    if isinstance(value, str) and "\n" not in value and value.strip() == value and _typed(value) == value:
        return value
    return json.dumps(value, ensure_ascii=False)


class ToolPicker(forms.CheckboxSelectMultiple):
    """Grouped checkboxes with a filter box above them (the filter is a static script)."""

    template_name = "agents_app/widgets/tool_picker.html"

    class Media:
        js = (TOOL_PICKER_JS,)
        css = {"all": ("agents_app/tool_picker.css",)}


def _label(name: str, description: str) -> str:
    description = " ".join((description or "").split())
    if len(description) > 140:
        description = description[:139] + "…"
    return f"{name} — {description}" if description else name


def tool_choices(current: Iterable[str] = ()) -> Choices:
    """The tools an agent may list, grouped: built-in, handoffs, one group per MCP server, and any
    name the agent holds that is not available now (kept visible so that saving does not drop it
    silently; the loader's rules then say what is wrong with it)."""
    import agents_app.builtin_tools  # noqa: F401  (registers the built-in tools)
    from agents_app.catalog import mcp_server_names
    from agents_app.models import Agent
    from voiceagent.conversation.tools import REGISTRY

    specs = [REGISTRY.get(name) for name in REGISTRY.names()]
    builtin = sorted((s for s in specs if s and s.source == "builtin"), key=lambda s: s.name)
    groups: Choices = [("Built-in tools", [(s.name, _label(s.name, s.description)) for s in builtin])]
    triggers = sorted(
        (a.handoff_trigger, a.name)
        for a in Agent.objects.exclude(handoff_trigger__isnull=True)
        if a.handoff_trigger
    )
    if triggers:
        groups.append(("Handoffs", [(t, f"{t} — hand the caller to {name}") for t, name in triggers]))
    offered = {name for _group, options in groups for name, _label_text in options}
    for server in sorted(mcp_server_names()):
        tools = sorted((s for s in specs if s and s.server == server), key=lambda s: s.name)
        options = [(server, f"{server} — every tool of this MCP server")]
        options += [(s.name, _label(s.name, s.description)) for s in tools]
        groups.append((f"MCP server {server}", options))
        offered.update(name for name, _text in options)
    missing = [name for name in dict.fromkeys(current) if isinstance(name, str) and name not in offered]
    if missing:
        groups.append(("Not available now", [(name, f"{name} — not registered") for name in missing]))
    return groups


def agent_choices(blank: bool = False) -> Choices:
    """Every agent (name — description), for a scenario's agents and start agent and its handoffs."""
    from agents_app.models import Agent

    options = [(a.name, _label(a.name, a.description)) for a in Agent.objects.order_by("name")]
    return [("", "---------"), *options] if blank else options


def model_fields() -> dict[str, forms.Field]:
    """The agent's model and speech settings as number fields with the loader's limits."""

    def number(bounds: tuple[float, float], step: str, integer: bool, help_text: str) -> forms.Field:
        kind = forms.IntegerField if integer else forms.FloatField
        attrs = {"step": step, "min": bounds[0], "max": bounds[1]}
        return kind(
            required=False,
            min_value=bounds[0],
            max_value=bounds[1],
            widget=forms.NumberInput(attrs=attrs),
            help_text=f"{bounds[0]:g} to {bounds[1]:g}; {help_text}",
        )

    return {
        "temperature": number(TEMPERATURE_RANGE, "0.05", False, "empty: the model's default"),
        "top_p": number(TOP_P_RANGE, "0.05", False, "empty: the model's default"),
        "max_tokens": number(MAX_TOKENS_RANGE, "1", True, "empty: the model's default"),
        "vad_silence_timeout_ms": number(VAD_SILENCE_RANGE, "10", True, "empty: VAD_SILENCE_TIMEOUT"),
    }


def turn_taking_fields() -> dict[str, forms.Field]:
    """One typed field per key of the turn-taking section, empty = the global setting."""
    result: dict[str, forms.Field] = {}
    for key in TURN_TAKING_KEYS:
        name = TT_PREFIX + key
        if key in INTEGER_RANGES or key in NUMBER_RANGES:
            low, high = INTEGER_RANGES.get(key) or NUMBER_RANGES[key]
            integer = key in INTEGER_RANGES
            kind = forms.IntegerField if integer else forms.FloatField
            result[name] = kind(
                label=key.replace("_", " "),
                required=False,
                min_value=low,
                max_value=high,
                widget=forms.NumberInput(attrs={"min": low, "max": high, "step": "1" if integer else "0.5"}),
                help_text=f"{low:g} to {high:g}; empty: {GLOBAL[key]}",
            )
        elif key == "fillers":
            result[name] = forms.CharField(
                label="fillers",
                required=False,
                widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
                help_text=f"said while a slow tool runs: one line each, up to {MAX_FILLERS} lines of "
                f"at most {MAX_FILLER_CHARS} characters; empty: the defaults",
            )
        else:
            result[name] = forms.CharField(
                label=key.replace("_", " "),
                required=False,
                max_length=MAX_LINE_CHARS,
                widget=forms.TextInput(attrs={"size": 80}),
                help_text=f"at most {MAX_LINE_CHARS} characters; empty: the default line",
            )
    return result


def turn_taking_initial(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stored section as the typed fields' initial values."""
    initial: dict[str, Any] = {}
    for key, value in (section or {}).items():
        if key in TURN_TAKING_KEYS and value is not None:
            initial[TT_PREFIX + key] = "\n".join(value) if key == "fillers" else value
    return initial


def compose_turn_taking(cleaned: Mapping[str, Any], add_error: Callable[[str, str], None]) -> dict[str, Any]:
    """The section from the typed fields (empty fields left out), checked by the loader's rules;
    each problem goes to the field it belongs to."""
    section: dict[str, Any] = {}
    for key in TURN_TAKING_KEYS:
        value = cleaned.get(TT_PREFIX + key)
        if value in (None, ""):
            continue
        if key == "fillers":
            value = [line.strip() for line in str(value).splitlines() if line.strip()]
            if not value:
                continue
        section[key] = value

    def problem(field: str, message: str) -> None:
        key = field.removeprefix("turn_taking.").split("[")[0].split(".")[0]
        target = TT_PREFIX + key if key in TURN_TAKING_KEYS else None
        add_error(target, message if target else f"{field}: {message}")

    return check_turn_taking(section, problem)


def definition_problems(obj: Any) -> str:
    """An agent's or scenario's problems as the admin shows them: what they mean for the service."""
    from django.utils.html import format_html, format_html_join

    problems = [str(p) for p in (obj.problems or [])]
    if not problems:
        return "none: the service uses it"
    items = format_html_join("", "<li>{}</li>", ((p,) for p in problems))
    return format_html("<p>Not served: the service ignores it until these are fixed.</p><ul>{}</ul>", items)


definition_problems.short_description = "problems"  # type: ignore[attr-defined]
