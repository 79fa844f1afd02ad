"""The rules of an agent's ``turn_taking`` section and their error messages.

The section overrides the global turn-taking settings for one agent (every key optional; absent =
the configured value) and gives it its own lines: what it says while a slow tool runs, when the
caller has gone quiet, when it gives up on them and when the conversation reaches its time limit.
Files, admin forms and REST bodies spell it the same way, a mapping::

    turn_taking:
      min_interruption_ms: 400      # 0-5000      MIN_INTERRUPTION_MS
      endpointing_max_ms: 2000      # 100-10000   ENDPOINTING_MAX_MS
      filler_after_ms: 1500         # 0-60000     FILLER_AFTER_MS (0 = never)
      fillers: ["One moment while I look that up."]   # 1-10 lines, each at most 200 characters
      reprompt_after_s: 12          # 0-3600      REPROMPT_AFTER_S (0 = never)
      max_reprompts: 2              # 0-20        MAX_REPROMPTS
      reprompt: "Are you still there?"              # at most 500 characters
      goodbye: "I'll end the call now. Goodbye."     # at most 500 characters
      max_conversation_s: 1800      # 0-86400     MAX_CONVERSATION_S (0 = unbounded)
      time_limit_line: "We've reached the time limit for this call."

The ranges are those of the variables in :mod:`voiceagent.config.turn_taking_vars` (a test keeps
them equal), so an agent can set nothing the configuration would refuse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from agents_app.definitions.problems import suggest
from voiceagent.conversation.turn_taking import TurnTakingSpec

SECTION = "turn_taking"
INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "min_interruption_ms": (0, 5000),
    "endpointing_max_ms": (100, 10000),
    "filler_after_ms": (0, 60000),
    "max_reprompts": (0, 20),
}
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "reprompt_after_s": (0, 3600),
    "max_conversation_s": (0, 86400),
}
LINE_FIELDS = ("reprompt", "goodbye", "time_limit_line")
MAX_FILLERS = 10
MAX_FILLER_CHARS = 200
MAX_LINE_CHARS = 500
#: every key of the section, in the order of :class:`TurnTakingSpec`
TURN_TAKING_KEYS: tuple[str, ...] = tuple(f.name for f in fields(TurnTakingSpec))

Report = Callable[[str, str], None]


def check_turn_taking(value: Any, problem: Report, label: str = SECTION) -> dict[str, Any]:
    """The valid keys of a ``turn_taking`` section (``fillers`` as a list); every fault goes to
    ``problem(field, message)`` with the field spelt ``turn_taking.<key>`` (``fillers[i]`` for a
    line). ``None`` is an empty section; ``None`` values are absent keys."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problem(label, f"must be a mapping of turn-taking settings, got {type(value).__name__}")
        return {}
    values: dict[str, Any] = {}
    for key, item in value.items():
        name = str(key)
        where = f"{label}.{name}"
        if name not in TURN_TAKING_KEYS:
            problem(where, f"unknown field{suggest(name, TURN_TAKING_KEYS)}")
        elif item is None:
            continue
        elif name in INTEGER_RANGES:
            number = _number(item, INTEGER_RANGES[name], integer=True, where=where, problem=problem)
            if number is not None:
                values[name] = number
        elif name in NUMBER_RANGES:
            number = _number(item, NUMBER_RANGES[name], integer=False, where=where, problem=problem)
            if number is not None:
                values[name] = number
        elif name == "fillers":
            fillers = _fillers(item, where, problem)
            if fillers is not None:
                values[name] = fillers
        else:
            line = _line(item, MAX_LINE_CHARS, where, problem)
            if line is not None:
                values[name] = line
    return values


def turn_taking_spec(values: Mapping[str, Any] | None) -> TurnTakingSpec:
    """The engine's :class:`TurnTakingSpec` from checked section values (unknown keys ignored,
    so a stored record from an older release still loads)."""
    if not values:
        return TurnTakingSpec()
    known = {k: v for k, v in values.items() if k in TURN_TAKING_KEYS and v is not None}
    if "fillers" in known:
        known["fillers"] = tuple(known["fillers"])
    return TurnTakingSpec(**known)


def turn_taking_values(spec: TurnTakingSpec) -> dict[str, Any]:
    """The storable section of a spec: the keys it sets (``fillers`` as a list), nothing else."""
    values: dict[str, Any] = {}
    for name in TURN_TAKING_KEYS:
        value = getattr(spec, name)
        if value is not None:
            values[name] = list(value) if name == "fillers" else value
    return values


def _number(
    value: Any, bounds: tuple[float, float], *, integer: bool, where: str, problem: Report
) -> int | float | None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if integer else "a number"
        problem(where, f"must be {kind}, got {type(value).__name__} {_short(value)}")
        return None
    low, high = bounds
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        problem(where, f"must be between {low:g} and {high:g}, got {_short(value)}")
        return None
    return int(value) if integer else float(value)


def _fillers(value: Any, where: str, problem: Report) -> list[str] | None:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        problem(where, f"must be a list of lines, got {type(value).__name__}")
        return None
    if not value:
        problem(where, f"must hold 1 to {MAX_FILLERS} lines (set filler_after_ms: 0 for no fillers)")
        return None
    if len(value) > MAX_FILLERS:
        problem(where, f"must hold at most {MAX_FILLERS} lines, got {len(value)}")
        return None
    lines = [_line(item, MAX_FILLER_CHARS, f"{where}[{index}]", problem) for index, item in enumerate(value)]
    return None if any(line is None for line in lines) else [line for line in lines if line is not None]


def _line(value: Any, limit: int, where: str, problem: Report) -> str | None:
    if not isinstance(value, str):
        problem(where, f"must be a string, got {type(value).__name__}")
        return None
    text = value.strip()
    if not text:
        problem(where, "must not be empty")
        return None
    if len(text) > limit:
        problem(where, f"must be at most {limit} characters, got {len(text)}")
        return None
    return text


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
