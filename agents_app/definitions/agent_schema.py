"""The rules of one agent's fields and their error messages.

Files use the nested spelling (``handoff.trigger``, ``prompts.path``, ``voice.name``); admin
forms and REST bodies the flat one (``handoff_trigger``, ``prompt``, ``voice``). One reader
accepts both, so every route into the engine obeys the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from agents_app.definitions.files import read_prompt_file
from agents_app.definitions.problems import Problem, suggest
from agents_app.definitions.templates import check_template
from agents_app.definitions.turn_taking_schema import check_turn_taking
from voiceagent.conversation.specs import GENERIC_HANDOFF_TOOL, VoiceSpec
from voiceagent.speech.voices import voice_problem

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
        "turn_taking",
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

TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.0, 1.0)
MAX_TOKENS_RANGE = (1, 16384)
VAD_SILENCE_RANGE = (100, 10000)

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VOICE_RATE = re.compile(r"^(?:[+-]?\d+(?:\.\d+)?%?|x-slow|slow|medium|fast|x-fast|default)$")


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
                        self.problem(f"{block}.{key}", f"unknown field{suggest(str(key), inner)}")
        if strict_keys:
            for key in data:
                if key not in AGENT_KEYS:
                    self.problem(str(key), f"unknown field{suggest(str(key), AGENT_KEYS)}")

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


def _is_known_tool(name: str, known: set[str], prefixes: Collection[str]) -> bool:
    return name in known or any(name.startswith(f"{prefix}_") for prefix in prefixes)


def check_agent(
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
    voices_dir: str | None = None,
) -> tuple[list[Problem], dict[str, Any]]:
    """(problems, field values) of one agent; the values build its spec when nothing is an error."""
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
                r.problem(f"tools[{index}]", f"unknown tool {tool!r}{suggest(tool, known)}")
            elif tool not in tools:
                tools.append(tool)
    values["tools"] = tuple(tools)

    values["temperature"] = r.number("temperature", None, TEMPERATURE_RANGE, integer=False)
    values["top_p"] = r.number("top_p", None, TOP_P_RANGE, integer=False)
    values["max_tokens"] = r.number("max_tokens", None, MAX_TOKENS_RANGE, integer=True)
    values["vad_silence_timeout_ms"] = r.number(
        ("speech", "vad_silence_timeout_ms"), "vad_silence_timeout_ms", VAD_SILENCE_RANGE, integer=True
    )
    # the same mapping in every spelling; its unknown keys are errors on every route
    values["turn_taking"] = check_turn_taking(data.get("turn_taking"), r.problem)

    voice_label, _ = r.get(("voice", "name"), "voice")
    voice_name = r.string(("voice", "name"))
    if voice_name and (why := voice_problem(voice_name, voices_dir)):
        r.problem(voice_label, why)
        voice_name = None
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
            source, template_file, read_problems = read_prompt_file(
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
    voices_dir: str | None = None,
) -> list[Problem]:
    """Every problem with one agent's fields.

    ``data`` uses the file spelling (``handoff.trigger``, ``prompts.path``, ``voice.name`` ...)
    or the flat one of forms and REST (``handoff_trigger``, ``prompt`` holding the template
    source, ``voice`` as the voice name, ``voice_style``, ``voice_rate``,
    ``vad_silence_timeout_ms``; ``turn_taking`` is one mapping in both, see
    :mod:`.turn_taking_schema`); problem fields name the spelling used. A tool is valid when it
    is in ``known_tools``, is one of ``handoff_triggers`` (triggers of other agents), is
    :data:`GENERIC_HANDOFF_TOOL`, or starts with ``<prefix>_`` for one of ``tool_prefixes`` (MCP
    servers whose tools are not registered yet). ``allowed_variables=None`` skips the
    undefined-variable check (see :func:`allowed_variables_for`). ``strict_keys`` reports
    unknown fields (on for files).
    """
    problems, _ = check_agent(
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
        voices_dir=voices_dir,
    )
    return problems
