"""The offline chat provider: a deterministic dialog engine driven by ``fixtures/dialog/<scenario>.yaml``.

:class:`RulesChat` (``"offline-rules"``) makes the product usable with no language model at all. It
is stateless: everything it decides comes from the :class:`ChatRequest` (the OpenAI-format
``messages``, the offered ``tools``, ``agent``, ``scenario`` and ``memory``), exactly like a model
would see it. The same request always gives the same answer.

How a round is decided
----------------------
* The last message is a **user** message: the agent's ``rules`` are tried in order, then the
  file's ``defaults.rules``; the first rule whose ``match`` finds the caller's text, whose ``when``
  holds and whose tools are all offered in ``request.tools`` fires. None fires: ``fallback``.
* The last messages are **tool results** (the round after a tool call): from the newest result
  back, the first ``after_tool.<tool name>`` rule (agent's, then ``defaults``') that holds fires.
  None fires: silence after a handoff, else ``after_tool_fallback``. After a handoff the *new*
  agent's ``after_tool.<handoff tool>`` rules see the result, which is how a discrete handoff
  carries on.
* Anything else (an assistant message last, no user message): silence.

A firing rule streams its ``reply`` (several text chunks split at word boundaries, so clause-based
TTS streaming is exercised), then one chunk with its tool call(s), then ``done``.

Dialog file format (YAML)
-------------------------
::

    version: 1
    patterns:                 # optional named regexes: `match: "@lost"`, `said(patterns.lost)`
      lost: '\\b(lost|lose|missing)\\b'
    macros: |                 # optional Jinja {% macro %} definitions, usable in every template
      {% macro cards() %}...{% endmacro %}
    defaults:                 # optional; tried for every agent after the agent's own section
      rules: [...]
      after_tool: {...}
      fallback: "..."
      after_tool_fallback: "..."
    agents:
      <agent name>:
        rules:                # tried in order; the first that applies fires
          - match: '<regex>'  # or a list of regexes (any); omitted = always matches
            when: "<Jinja expression>"      # or {<dotted.path>: value, said: regex, not_said: regex}
            reply: "<Jinja template>"       # spoken text; may be empty
            tool:                           # optional: one call, or a list of calls
              name: <tool name>
              args: {<arg>: "<template>"}   # strings are templates; numbers/bools as they are;
                                            # lists render each item; {json: "<template>"} is
                                            # parsed as JSON; arguments rendering to "" are left out
        after_tool:
          <tool name>:        # one rule or a list of rules (first that holds fires; no `match`)
            - when: "result.verified"
              reply: "..."
              tool: {...}
        fallback: "<template>"            # no user rule fired
        after_tool_fallback: "<template>" # a tool result no rule handled (not after handoffs)

Regexes are searched (case-insensitive) in the *normalised* caller text: lowercase, accents
folded, apostrophes dropped ("that's" -> "thats"), other punctuation turned into spaces,
whitespace collapsed. Write patterns for simple spoken English, as the offline STT produces.

Names in templates and ``when`` expressions: ``text`` (normalised last caller utterance), ``raw``,
``digits`` (the digits spoken in it: "my code is four two one" -> "421"), ``groups`` (named regex
captures), ``memory`` (``ChatRequest.memory``: ``caller_name``, ``caller_profile``,
``authenticated``...), ``result`` and ``tool`` (after_tool: the parsed JSON result and the tool
name), ``results`` (all results of the round by tool name), ``agent``, ``scenario``, ``patterns``,
``last_reply`` (the agent's previous spoken text), and the file's macros. Functions:

* ``said(regex)``: any caller utterance so far matches;
* ``find(regex)``: the newest matching utterance, its named groups plus ``match`` and
  ``utterance`` (``{}`` when none);
* ``last_result(tool)``: the newest parsed result of that tool in the conversation, including
  the ``"Earlier, tool <name> returned: <json>"`` system messages the engine replays from
  earlier turns;
* ``offered(tool)``; ``card(kind_or_last4)``: a card of ``memory.caller_profile``;
* ``chosen_card()``: the card the caller named ("credit", "debit", "ending in ...") or their only
  card; ``pick(items)``: the item named by an ordinal in the utterance ("the second one").

Filters: ``digits``, ``spoken_date`` ("march third nineteen eighty five" -> "1985-03-03"),
``say_date`` ("2024-03-05" -> "March 5"), ``say_amount`` (-41.3 -> "41 dollars and 30 cents"),
``say_digits`` ("4242" -> "4 2 4 2"), ``say_chars`` ("FRD-1A" -> "F R D 1 A").

A scenario with no dialog file gets a small generic dialog (hello, transfer by agent name,
goodbye). Parsed files are cached and re-read when they change; :meth:`RulesChat.warm` loads and
validates every file and returns False if one is invalid.
"""

from __future__ import annotations

import asyncio
import calendar
import functools
import hashlib
import json
import logging
import re
import threading
import unicodedata
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from jinja2 import ChainableUndefined, TemplateError
from jinja2.runtime import Macro
from jinja2.sandbox import SandboxedEnvironment

from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError, ToolCallRequest

logger = logging.getLogger(__name__)

__all__ = [
    "DIALOG_DIR",
    "DialogError",
    "RulesChat",
    "normalize",
    "spoken_date",
    "spoken_digits",
]

DIALOG_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "dialog"
GENERIC = "<generic>"

# --------------------------------------------------------------------------------------------------
# Spoken-language helpers
# --------------------------------------------------------------------------------------------------

_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip
_UNITS = {w: int(d) for w, d in _DIGIT_WORDS.items() if w not in ("oh", "o")}
_TEENS = {
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30,
}  # fmt: skip
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_NUMERAL_ORDINAL_RE = re.compile(r"^(\d{1,2})(st|nd|rd|th)$")
_FILLER = {"the", "of", "and", "on", "in", "born", "i", "was", "my", "is", "its", "date", "birth", "a"}


def normalize(text: str) -> str:
    """Lowercase ASCII words: accents folded, apostrophes dropped, other punctuation -> spaces."""
    folded = unicodedata.normalize("NFKD", text or "")
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch)).casefold()
    folded = folded.replace("'", "").replace("\u2019", "").replace("\u2018", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", folded).split())


def spoken_digits(text: Any) -> str:
    """The digits in ``text``, spoken or written: ``"my code is four 2 oh one"`` -> ``"4201"``.

    "oh"/"o" count as zero only next to another digit; "double"/"triple" repeat the next digit.
    """
    tokens = normalize(str(text or "")).split()
    out: list[str] = []

    def digit_of(token: str) -> str | None:
        if token.isdigit():
            return token
        return _DIGIT_WORDS.get(token) if token not in ("oh", "o") else None

    repeat = 1
    for i, token in enumerate(tokens):
        if token in ("double", "triple"):
            repeat = 2 if token == "double" else 3
            continue
        value = digit_of(token)
        if value is None and token in ("oh", "o"):
            prev_is_digit = i > 0 and digit_of(tokens[i - 1]) is not None
            next_is_digit = i + 1 < len(tokens) and (
                digit_of(tokens[i + 1]) is not None or tokens[i + 1] in ("oh", "o")
            )
            value = "0" if prev_is_digit or next_is_digit else None
        if value is None:
            repeat = 1
            continue
        out.append(value * repeat if len(value) == 1 else value)
        repeat = 1
    return "".join(out)


def _cardinal(tokens: list[str], i: int) -> tuple[int | None, int]:
    """A number 0-99 spoken from ``tokens[i]`` on: (value, tokens used)."""
    if i >= len(tokens):
        return None, 0
    token = tokens[i]
    if token.isdigit() and len(token) <= 2:
        return int(token), 1
    if token in _TEENS:
        return _TEENS[token], 1
    if token in _TENS:
        if i + 1 < len(tokens) and tokens[i + 1] in _UNITS and _UNITS[tokens[i + 1]] > 0:
            return _TENS[token] + _UNITS[tokens[i + 1]], 2
        return _TENS[token], 1
    if token in _UNITS:
        return _UNITS[token], 1
    return None, 0


def _ordinal(tokens: list[str], i: int) -> tuple[int | None, int]:
    token = tokens[i]
    match = _NUMERAL_ORDINAL_RE.match(token)
    if match:
        return int(match.group(1)), 1
    if token in _ORDINALS:
        return _ORDINALS[token], 1
    if (
        token in _TENS
        and i + 1 < len(tokens)
        and tokens[i + 1] in _ORDINALS
        and _ORDINALS[tokens[i + 1]] < 10
    ):
        return _TENS[token] + _ORDINALS[tokens[i + 1]], 2
    return None, 0


def _year(tokens: list[str]) -> int | None:
    """A year from the remaining words: "1985", "nineteen eighty five", "two thousand and three"."""
    for token in tokens:
        if token.isdigit() and len(token) == 4:
            return int(token)
    words = [t for t in tokens if t != "and"]
    if "thousand" in words:
        at = words.index("thousand")
        high, _ = _cardinal(words, at - 1) if at > 0 else (None, 0)
        low, _ = _cardinal(words, at + 1)
        return (high or 0) * 1000 + (low or 0) if high else None
    groups: list[int] = []
    i = 0
    while i < len(words) and len(groups) < 2:
        if words[i] in ("oh", "o") and groups:
            value, used = _cardinal(words, i + 1)
            if value is None or value > 9:
                return None
            groups.append(value)
            i += 1 + used
            continue
        if words[i] == "hundred" and groups:
            groups.append(0)
            i += 1
            continue
        value, used = _cardinal(words, i)
        if value is None:
            i += 1
            continue
        groups.append(value)
        i += used
    if len(groups) == 2 and 10 <= groups[0] <= 99:
        return groups[0] * 100 + groups[1]
    return None


def spoken_date(text: Any) -> str:
    """An ISO date (``YYYY-MM-DD``) from a spoken or written date, or ``""`` when incomplete.

    ``"march third nineteen eighty five"``, ``"the 3rd of march 1985"``, ``"1985-03-03"`` and
    ``"3/3/1985"`` (month first) all give ``"1985-03-03"``.
    """
    raw = str(text or "")
    iso = re.search(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", raw)
    us = re.search(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b", raw)
    try:
        if iso:
            return date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3))).isoformat()
        if us:
            return date(int(us.group(3)), int(us.group(1)), int(us.group(2))).isoformat()
    except ValueError:
        return ""
    tokens = normalize(raw).split()
    month_at = next((i for i, t in enumerate(tokens) if t in _MONTHS), None)
    if month_at is None:
        return ""
    month = _MONTHS[tokens[month_at]]
    used: set[int] = {month_at}
    day: int | None = None
    for i in range(len(tokens)):  # an ordinal anywhere: "the third of march", "march third"
        value, n = _ordinal(tokens, i)
        if value is not None and i not in used:
            day, used = value, used | set(range(i, i + n))
            break
    if day is None:  # a cardinal right after the month: "march 3 1985", "march three ..."
        value, n = _cardinal(tokens, month_at + 1)
        if value is not None and 1 <= value <= 31:
            day, used = value, used | set(range(month_at + 1, month_at + 1 + n))
    if day is None:
        return ""
    rest = [t for i, t in enumerate(tokens) if i not in used and t not in _FILLER - {"and"}]
    year = _year(rest)
    if year is None:
        return ""
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return ""


def say_date(value: Any) -> str:
    """``"2024-03-05"`` -> ``"March 5"`` (month and day, as a person reads a recent date)."""
    try:
        parsed = date.fromisoformat(str(value)[:10])
    except ValueError:
        return str(value or "")
    return f"{calendar.month_name[parsed.month]} {parsed.day}"


def say_amount(value: Any, currency: str = "dollars") -> str:
    """``-41.3`` -> ``"41 dollars and 30 cents"`` (the sign is dropped: say "owed" in the template)."""
    try:
        cents = round(abs(float(value)) * 100)
    except (TypeError, ValueError):
        return str(value or "")
    whole, rest = divmod(cents, 100)
    text = f"{whole:,} {currency}".replace(",", " ") if whole >= 10000 else f"{whole} {currency}"
    if whole == 1:
        text = text[: -len(currency)] + currency.rstrip("s")
    return f"{text} and {rest} cents" if rest else text


def say_digits(value: Any) -> str:
    """``"4242"`` -> ``"4 2 4 2"`` (read digit by digit)."""
    return " ".join(ch for ch in str(value or "") if ch.isdigit())


def say_chars(value: Any) -> str:
    """``"FRD-1A2B"`` -> ``"F R D 1 A 2 B"`` (read character by character)."""
    return " ".join(ch for ch in str(value or "") if ch.isalnum())


# --------------------------------------------------------------------------------------------------
# Dialog files
# --------------------------------------------------------------------------------------------------


class DialogError(ValueError):
    """A dialog file is malformed; the message names the file and the place."""


_ENV = SandboxedEnvironment(
    undefined=ChainableUndefined, autoescape=False, trim_blocks=True, lstrip_blocks=True
)
_ENV.filters.update(
    digits=spoken_digits,
    spoken_date=spoken_date,
    say_date=say_date,
    say_amount=say_amount,
    say_digits=say_digits,
    say_chars=say_chars,
)

_RULE_KEYS = {"match", "when", "reply", "tool", "tools", "id"}
_AGENT_KEYS = {"rules", "after_tool", "fallback", "after_tool_fallback"}
_TOP_KEYS = {"version", "name", "description", "patterns", "macros", "defaults", "agents"}
_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class _Template:
    source: str
    compiled: Any

    def render(self, ctx: Mapping[str, Any]) -> str:
        return self.compiled.render(ctx)


@dataclass(frozen=True)
class _Arg:
    kind: str  # "template" | "literal" | "list" | "json"
    value: Any


@dataclass(frozen=True)
class _ToolAction:
    name: str
    args: dict[str, _Arg]


@dataclass(frozen=True)
class _Rule:
    where: str
    patterns: tuple[re.Pattern[str], ...]
    when: Callable[[Mapping[str, Any]], bool] | None
    reply: _Template | None
    tools: tuple[_ToolAction, ...]


@dataclass(frozen=True)
class _AgentDialog:
    rules: tuple[_Rule, ...] = ()
    after_tool: dict[str, tuple[_Rule, ...]] = field(default_factory=dict)
    fallback: _Template | None = None
    after_tool_fallback: _Template | None = None


@dataclass(frozen=True)
class Dialog:
    """One parsed dialog file."""

    name: str
    origin: str
    agents: dict[str, _AgentDialog]
    defaults: _AgentDialog
    patterns: dict[str, str]
    macros: _Template | None = None

    def layers(self, agent: str) -> tuple[_AgentDialog, ...]:
        own = self.agents.get(agent)
        return (own, self.defaults) if own is not None else (self.defaults,)


class _Parser:
    def __init__(self, origin: str, data: Any) -> None:
        self.origin = origin
        self.data = data
        self.patterns: dict[str, str] = {}
        self.macros: _Template | None = None

    def fail(self, where: str, message: str) -> DialogError:
        return DialogError(f"{self.origin}: {where}: {message}")

    def parse(self, name: str) -> Dialog:
        data = self.data
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise self.fail("top level", "must be a mapping")
        unknown = set(data) - _TOP_KEYS
        if unknown:
            raise self.fail("top level", f"unknown keys {sorted(unknown)}")
        if data.get("version", 1) != 1:
            raise self.fail("version", "only version 1 is supported")
        patterns = data.get("patterns") or {}
        if not isinstance(patterns, dict):
            raise self.fail("patterns", "must be a mapping of name to regex")
        for key, value in patterns.items():
            self._key("patterns", key)
            self._regex(f"patterns.{key}", value)
            self.patterns[str(key)] = str(value)
        macros = data.get("macros") or ""
        if not isinstance(macros, str):
            raise self.fail("macros", "must be a string of Jinja macro definitions")
        self.macros = self._template("macros", macros) if macros else None
        agents_data = data.get("agents") or {}
        if not isinstance(agents_data, dict):
            raise self.fail("agents", "must be a mapping of agent name to its rules")
        agents = {self._key("agents", k): self._agent(f"agents.{k}", v) for k, v in agents_data.items()}
        defaults = self._agent("defaults", data.get("defaults") or {})
        return Dialog(
            name=name,
            origin=self.origin,
            agents=agents,
            defaults=defaults,
            patterns=self.patterns,
            macros=self.macros,
        )

    def _key(self, where: str, key: Any) -> str:
        if not isinstance(key, str) or not key:
            # YAML reads unquoted yes/no/on/off/true/false as booleans
            raise self.fail(where, f"names must be strings, got {key!r} (quote it)")
        return key

    def _agent(self, where: str, data: Any) -> _AgentDialog:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise self.fail(where, "must be a mapping")
        unknown = set(data) - _AGENT_KEYS
        if unknown:
            raise self.fail(where, f"unknown keys {sorted(unknown)}")
        rules_data = data.get("rules") or []
        if not isinstance(rules_data, list):
            raise self.fail(f"{where}.rules", "must be a list")
        rules = tuple(self._rule(f"{where}.rules[{i}]", r, user=True) for i, r in enumerate(rules_data))
        after_data = data.get("after_tool") or {}
        if not isinstance(after_data, dict):
            raise self.fail(f"{where}.after_tool", "must be a mapping of tool name to rule(s)")
        after: dict[str, tuple[_Rule, ...]] = {}
        for tool, value in after_data.items():
            self._key(f"{where}.after_tool", tool)
            items = value if isinstance(value, list) else [value]
            after[str(tool)] = tuple(
                self._rule(f"{where}.after_tool.{tool}[{i}]", r, user=False) for i, r in enumerate(items)
            )
        fallback = data.get("fallback")
        after_fallback = data.get("after_tool_fallback")
        return _AgentDialog(
            rules=rules,
            after_tool=after,
            fallback=self._template(f"{where}.fallback", fallback) if fallback is not None else None,
            after_tool_fallback=(
                self._template(f"{where}.after_tool_fallback", after_fallback)
                if after_fallback is not None
                else None
            ),
        )

    def _rule(self, where: str, data: Any, user: bool) -> _Rule:
        if not isinstance(data, dict):
            raise self.fail(where, "a rule must be a mapping")
        unknown = set(data) - _RULE_KEYS
        if unknown:
            raise self.fail(where, f"unknown keys {sorted(unknown)}")
        if not user and "match" in data:
            raise self.fail(where, "after_tool rules have no `match` (use `when`)")
        where = f"{where} ({data['id']})" if data.get("id") else where
        match = data.get("match")
        sources = [] if match is None else match if isinstance(match, list) else [match]
        patterns = tuple(self._regex(f"{where}.match", s) for s in sources)
        when = self._condition(f"{where}.when", data["when"]) if "when" in data else None
        reply = data.get("reply")
        if reply is not None and not isinstance(reply, str):
            raise self.fail(f"{where}.reply", "must be a string template")
        tools_data = data.get("tools", data.get("tool"))
        if "tools" in data and "tool" in data:
            raise self.fail(where, "use either `tool` or `tools`")
        items = [] if tools_data is None else tools_data if isinstance(tools_data, list) else [tools_data]
        tools = tuple(self._tool(f"{where}.tool", t) for t in items)
        if reply is None and not tools:
            raise self.fail(where, "a rule needs a `reply` (may be empty) or a `tool`")
        return _Rule(
            where=where,
            patterns=patterns,
            when=when,
            reply=self._template(f"{where}.reply", reply) if reply is not None else None,
            tools=tools,
        )

    def _regex(self, where: str, source: Any) -> re.Pattern[str]:
        if not isinstance(source, str) or not source:
            raise self.fail(where, "must be a non-empty regex string")
        if source.startswith("@"):
            name = source[1:]
            if name not in self.patterns:
                raise self.fail(where, f"unknown pattern {source!r} (define it under `patterns`)")
            source = self.patterns[name]
        try:
            return re.compile(source, re.IGNORECASE)
        except re.error as exc:
            raise self.fail(where, f"invalid regex {source!r}: {exc}") from None

    def _template(self, where: str, source: Any) -> _Template:
        if not isinstance(source, str):
            raise self.fail(where, "must be a string template")
        try:
            compiled = _ENV.from_string(source)
        except TemplateError as exc:
            raise self.fail(where, f"invalid template: {exc}") from None
        return _Template(source, compiled)

    def _condition(self, where: str, value: Any) -> Callable[[Mapping[str, Any]], bool]:
        if isinstance(value, bool):
            return lambda ctx, _v=value: _v
        if isinstance(value, str):
            try:
                expression = _ENV.compile_expression(value, undefined_to_none=True)
            except TemplateError as exc:
                raise self.fail(where, f"invalid expression {value!r}: {exc}") from None
            return lambda ctx: bool(expression(**ctx))
        if isinstance(value, dict):
            checks: list[Callable[[Mapping[str, Any]], bool]] = []
            for key, expected in value.items():
                key = str(key)
                if key in ("said", "not_said"):
                    pattern = self._regex(f"{where}.{key}", expected)
                    negate = key == "not_said"
                    checks.append(lambda ctx, p=pattern, n=negate: ctx["said"](p) != n)
                else:
                    path = key.split(".")
                    checks.append(lambda ctx, p=path, e=expected: _path_matches(ctx, p, e))
            return lambda ctx: all(check(ctx) for check in checks)
        raise self.fail(where, "must be a Jinja expression string or a mapping of conditions")

    def _tool(self, where: str, data: Any) -> _ToolAction:
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict) or set(data) - {"name", "args"}:
            raise self.fail(where, "must be {name: <tool>, args: {...}}")
        name = data.get("name")
        if not isinstance(name, str) or not _TOOL_NAME_RE.match(name):
            raise self.fail(where, f"invalid tool name {name!r}")
        args_data = data.get("args") or {}
        if not isinstance(args_data, dict):
            raise self.fail(f"{where}.args", "must be a mapping")
        args = {str(k): self._arg(f"{where}.args.{k}", v) for k, v in args_data.items()}
        return _ToolAction(name=name, args=args)

    def _arg(self, where: str, value: Any) -> _Arg:
        if isinstance(value, str):
            return _Arg("template", self._template(where, value))
        if isinstance(value, list):
            return _Arg("list", tuple(self._arg(f"{where}[{i}]", v) for i, v in enumerate(value)))
        if isinstance(value, dict):
            if set(value) != {"json"}:
                raise self.fail(where, "a mapping argument must be {json: <template>}")
            return _Arg("json", self._template(f"{where}.json", value["json"]))
        if value is None or isinstance(value, int | float | bool):
            return _Arg("literal", value)
        raise self.fail(where, f"unsupported argument value {value!r}")


def _path_matches(ctx: Mapping[str, Any], path: list[str], expected: Any) -> bool:
    value: Any = ctx
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            value = None
            break
    if isinstance(expected, list):
        return value in expected
    return value == expected


_GENERIC_DIALOG: dict[str, Any] = {
    "defaults": {
        "rules": [
            {
                "match": r"\b(goodbye|bye|hang up|thats all|nothing else)\b",
                "reply": "Thanks for calling. Goodbye.",
                "tool": {"name": "end_conversation", "args": {"reason": "caller_request"}},
            },
            {
                "match": r"\b(?:talk|speak|transfer me|put me through|connect me) to (?:the |a |an )?"
                r"(?P<target>[a-z_]+(?: agent)?)",
                "reply": "Sure, transferring you now.",
                "tool": {
                    "name": "handoff_to_agent",
                    "args": {
                        "target_agent": "{{ groups.target | replace(' agent', '') }}",
                        "reason": "caller asked for {{ groups.target }}",
                    },
                },
            },
            {
                "match": r"^(hi|hello|hey|good (morning|afternoon|evening))\b",
                "reply": "Hello! How can I help?",
            },
        ],
        "after_tool": {"end_conversation": {"reply": ""}},
        "fallback": (
            "This is the offline rules engine, and there is no dialog for this scenario yet. "
            "I can say hello, transfer you to another agent by name, or say goodbye."
        ),
        "after_tool_fallback": "All done. Is there anything else?",
    }
}


# Parsed files, shared by every RulesChat of the process: path -> ((mtime_ns, size), dialog).
_CACHE: dict[str, tuple[tuple[int, int], Dialog]] = {}
_CACHE_LOCK = threading.Lock()


@functools.cache
def _generic_dialog() -> Dialog:
    return _Parser(GENERIC, _GENERIC_DIALOG).parse(GENERIC)


# --------------------------------------------------------------------------------------------------
# Reading a request
# --------------------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return ""


def _parse_result(content: Any) -> Any:
    text = _content_text(content)
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return {"text": text}


# How the engine replays a tool result of an earlier turn (a system message).
_EARLIER_RESULT_RE = re.compile(
    r"^Earlier, tool (?P<name>[A-Za-z0-9_-]{1,64}) returned: (?P<content>.*)$", re.DOTALL
)


@dataclass
class _Conversation:
    """What the rules need from ``request.messages``."""

    user_texts: list[str]  # normalised, oldest first
    user_raw: list[str]
    last_role: str | None
    trailing_results: list[tuple[str, Any]]  # (tool name, parsed result) of the last round
    results_by_tool: dict[str, Any]  # newest result of each tool in the conversation
    last_reply: str

    @classmethod
    def read(cls, messages: list[dict[str, Any]]) -> _Conversation:
        names: dict[str, str] = {}
        user_texts: list[str] = []
        user_raw: list[str] = []
        results_by_tool: dict[str, Any] = {}
        last_reply = ""
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = message.get("role")
            if role == "user":
                raw = _content_text(message.get("content"))
                user_raw.append(raw)
                user_texts.append(normalize(raw))
            elif role == "assistant":
                text = _content_text(message.get("content")).strip()
                if text:
                    last_reply = text
                for call in message.get("tool_calls") or ():
                    if isinstance(call, Mapping):
                        function = call.get("function") or {}
                        names[str(call.get("id"))] = str(function.get("name") or call.get("name") or "")
            elif role == "tool":
                name = names.get(str(message.get("tool_call_id")), "") or str(message.get("name") or "")
                results_by_tool[name] = _parse_result(message.get("content"))
            elif role == "system":  # results of earlier turns, as the engine replays them
                match = _EARLIER_RESULT_RE.match(_content_text(message.get("content")))
                if match:
                    results_by_tool[match.group("name")] = _parse_result(match.group("content"))
        trailing: list[tuple[str, Any]] = []
        for message in reversed(messages):
            if not isinstance(message, Mapping) or message.get("role") != "tool":
                break
            name = names.get(str(message.get("tool_call_id")), "") or str(message.get("name") or "")
            trailing.append((name, _parse_result(message.get("content"))))
        trailing.reverse()
        last = messages[-1] if messages and isinstance(messages[-1], Mapping) else {}
        return cls(
            user_texts=user_texts,
            user_raw=user_raw,
            last_role=last.get("role"),
            trailing_results=trailing,
            results_by_tool=results_by_tool,
            last_reply=last_reply,
        )


def _offered_names(tools: list[dict[str, Any]]) -> set[str]:
    names = set()
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


_ORDINAL_INDEX = [
    (re.compile(r"\b(last|final)\b"), -1),
    (re.compile(r"\b(first|number one|1st)\b"), 0),
    (re.compile(r"\b(second|number two|2nd)\b"), 1),
    (re.compile(r"\b(third|number three|3rd)\b"), 2),
    (re.compile(r"\b(fourth|number four|4th)\b"), 3),
    (re.compile(r"\b(fifth|number five|5th)\b"), 4),
]


def _context(
    request: ChatRequest, conv: _Conversation, offered: set[str], patterns: dict[str, str]
) -> dict[str, Any]:
    text = conv.user_texts[-1] if conv.user_texts else ""
    memory = request.memory if isinstance(request.memory, Mapping) else {}
    profile = memory.get("caller_profile") if isinstance(memory.get("caller_profile"), Mapping) else {}
    cards = [c for c in profile.get("cards") or [] if isinstance(c, Mapping)]

    def said(pattern: Any) -> bool:
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(str(pattern), re.IGNORECASE)
        return any(regex.search(t) for t in conv.user_texts)

    def find(pattern: str) -> dict[str, str]:
        regex = re.compile(str(pattern), re.IGNORECASE)
        for utterance in reversed(conv.user_texts):
            match = regex.search(utterance)
            if match:
                found = {k: v or "" for k, v in match.groupdict().items()}
                return {"match": match.group(0), "utterance": utterance, **found}
        return {}

    def last_result(tool: str) -> Any:
        return conv.results_by_tool.get(tool, {})

    def card(kind_or_last4: Any) -> Mapping[str, Any]:
        key = str(kind_or_last4 or "").strip().lower()
        if not key:
            return {}
        for c in cards:
            if str(c.get("last4")) == key or str(c.get("type", "")).lower() == key:
                return c
        return {}

    def chosen_card() -> Mapping[str, Any]:
        for utterance in reversed(conv.user_texts):
            number = spoken_digits(utterance)
            if len(number) >= 4 and re.search(r"\b(ending|ends|last four|card)\b", utterance):
                found = card(number[-4:])
                if found:
                    return found
            for kind in ("credit", "debit"):
                if re.search(rf"\b{kind}\b", utterance) and card(kind):
                    return card(kind)
        return cards[0] if len(cards) == 1 else {}

    def pick(items: Any, utterance: str | None = None) -> Any:
        items = list(items) if isinstance(items, list | tuple) else []
        words = normalize(utterance) if utterance is not None else text
        for regex, index in _ORDINAL_INDEX:
            if regex.search(words) and -len(items) <= index < len(items):
                return items[index]
        return {}

    return {
        "agent": request.agent,
        "scenario": request.scenario,
        "memory": memory,
        "text": text,
        "raw": conv.user_raw[-1] if conv.user_raw else "",
        "digits": spoken_digits(text),
        "groups": {},
        "result": {},
        "results": {},
        "tool": "",
        "patterns": patterns,
        "last_reply": conv.last_reply,
        "said": said,
        "find": find,
        "last_result": last_result,
        "offered": lambda name: name in offered,
        "card": card,
        "chosen_card": chosen_card,
        "pick": pick,
    }


# --------------------------------------------------------------------------------------------------
# The provider
# --------------------------------------------------------------------------------------------------


@dataclass
class _Decision:
    reply: str
    calls: list[tuple[str, dict[str, Any]]]
    rule: str


# A rule applied but needs a tool the agent is not offered: the agent's fallback answers instead.
_NOT_OFFERED = _Decision("", [], "tool not offered")


class RulesChat:
    """The deterministic offline dialog engine (see the module docstring for the file format)."""

    name = "offline-rules"

    def __init__(
        self, dialog_dir: str | Path | None = None, words_per_chunk: int = 4, chunk_delay: float = 0.0
    ) -> None:
        self.dialog_dir = Path(dialog_dir) if dialog_dir is not None else DIALOG_DIR
        self.words_per_chunk = max(1, int(words_per_chunk))
        self.chunk_delay = float(chunk_delay)
        self._generic: Dialog = _generic_dialog()

    # --- dialogs -----------------------------------------------------------------------------------
    def dialog(self, scenario: str) -> Dialog:
        """The parsed dialog of ``scenario`` (cached; re-read when the file changed).

        A scenario without a file gets the generic dialog; an invalid file raises
        :class:`DialogError`.
        """
        if not scenario or not re.match(r"^[A-Za-z0-9_.-]+$", scenario) or scenario.startswith("."):
            return self._generic
        path = self.dialog_dir / f"{scenario}.yaml"
        try:
            stat = path.stat()
        except OSError:
            return self._generic
        key, stamp = str(path.resolve()), (stat.st_mtime_ns, stat.st_size)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise DialogError(f"{path}: cannot read: {exc}") from None
        dialog = _Parser(str(path), data).parse(scenario)
        with _CACHE_LOCK:
            _CACHE[key] = (stamp, dialog)
        return dialog

    def scenarios(self) -> list[str]:
        """The scenarios that have a dialog file."""
        if not self.dialog_dir.is_dir():
            return []
        return sorted(p.stem for p in self.dialog_dir.glob("*.yaml") if not p.name.startswith("."))

    # --- ChatProvider ------------------------------------------------------------------------------
    async def warm(self) -> bool:
        """Load and validate every dialog file; False (logged) if one is invalid."""
        ok = True
        for scenario in self.scenarios():
            try:
                self.dialog(scenario)
            except DialogError as exc:
                logger.error("offline dialog invalid: %s", exc)
                ok = False
        return ok

    async def close(self) -> None:
        return None

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        try:
            dialog = self.dialog(request.scenario)
        except DialogError as exc:
            raise ProviderError(f"offline dialog invalid: {exc}") from None
        try:
            decision = self.decide(request, dialog)
        except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise ProviderError(f"offline dialog failed: {type(exc).__name__}: {exc}") from None
        if decision.reply:
            for piece in self._pieces(decision.reply):
                yield ChatChunk(text=piece)
                await asyncio.sleep(self.chunk_delay)
        if decision.calls:
            yield ChatChunk(tool_calls=self._tool_calls(request, decision.calls))
            yield ChatChunk(done=True, finish_reason="tool_calls")
        else:
            yield ChatChunk(done=True, finish_reason="stop")

    # --- deciding ----------------------------------------------------------------------------------
    def decide(self, request: ChatRequest, dialog: Dialog | None = None) -> _Decision:
        """What the agent says and calls this round (pure: no I/O once the dialog is loaded)."""
        dialog = dialog or self.dialog(request.scenario)
        conv = _Conversation.read(list(request.messages or []))
        offered = _offered_names(request.tools)
        ctx = _context(request, conv, offered, dialog.patterns)
        if dialog.macros is not None:  # the file's macros, seeing this request's names
            module = dialog.macros.compiled.make_module(vars=ctx)
            ctx.update({k: v for k, v in vars(module).items() if isinstance(v, Macro)})
        layers = dialog.layers(request.agent)

        if conv.last_role == "user":
            decision = self._first(
                [rule for layer in layers for rule in layer.rules], ctx, offered, ctx["text"]
            )
            if decision is not None and decision is not _NOT_OFFERED:
                return decision
            fallback = next((layer.fallback for layer in layers if layer.fallback is not None), None)
            fallback = fallback or self._generic.defaults.fallback
            return _Decision(self._render(fallback, ctx), [], "fallback")

        if conv.last_role == "tool" and conv.trailing_results:
            results = {name: result for name, result in conv.trailing_results}
            for name, result in reversed(conv.trailing_results):
                tool_ctx = {**ctx, "tool": name, "result": result, "results": results}
                rules = [rule for layer in layers for rule in layer.after_tool.get(name, ())]
                decision = self._first(rules, tool_ctx, offered, None)
                if decision is _NOT_OFFERED:
                    break
                if decision is not None:
                    return decision
            else:
                if any(isinstance(r, Mapping) and r.get("handoff") is True for _, r in conv.trailing_results):
                    return _Decision("", [], "after handoff")
            name, result = conv.trailing_results[-1]
            tool_ctx = {**ctx, "tool": name, "result": result, "results": results}
            template = next(
                (layer.after_tool_fallback for layer in layers if layer.after_tool_fallback is not None),
                None,
            )
            template = template or self._generic.defaults.after_tool_fallback
            return _Decision(self._render(template, tool_ctx), [], "after_tool_fallback")

        return _Decision("", [], "nothing to answer")

    def _first(
        self, rules: list[_Rule], ctx: dict[str, Any], offered: set[str], text: str | None
    ) -> _Decision | None:
        """The first rule that applies; :data:`_NOT_OFFERED` when it needs a tool not offered."""
        for rule in rules:
            decision = self._try(rule, ctx, offered, text)
            if decision is _NOT_OFFERED:
                logger.debug("offline dialog rule %s needs a tool not offered; fallback", rule.where)
                return _NOT_OFFERED
            if decision is not None:
                return decision
        return None

    def _try(self, rule: _Rule, ctx: dict[str, Any], offered: set[str], text: str | None) -> _Decision | None:
        groups: dict[str, str] = {}
        if rule.patterns:
            match = next((m for p in rule.patterns if (m := p.search(text or "")) is not None), None)
            if match is None:
                return None
            groups = {k: v or "" for k, v in match.groupdict().items()}
        local = {**ctx, "groups": groups}
        try:
            if rule.when is not None and not rule.when(local):
                return None
            if any(action.name not in offered for action in rule.tools):
                return _NOT_OFFERED
            reply = self._render(rule.reply, local) if rule.reply is not None else ""
            calls = [(action.name, self._args(action, local)) for action in rule.tools]
        except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            logger.warning("offline dialog rule %s skipped: %s", rule.where, exc)
            return None
        return _Decision(reply, calls, rule.where)

    @staticmethod
    def _render(template: _Template | None, ctx: Mapping[str, Any]) -> str:
        if template is None:
            return ""
        return " ".join(template.render(ctx).split())

    def _args(self, action: _ToolAction, ctx: Mapping[str, Any]) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for key, spec in action.args.items():
            value = self._arg_value(spec, ctx)
            if value is None or value == "" or value == []:
                continue
            args[key] = value
        return args

    def _arg_value(self, spec: _Arg, ctx: Mapping[str, Any]) -> Any:
        if spec.kind == "literal":
            return spec.value
        if spec.kind == "template":
            return spec.value.render(ctx).strip()
        if spec.kind == "list":
            items = [self._arg_value(item, ctx) for item in spec.value]
            return [item for item in items if item not in (None, "")]
        rendered = spec.value.render(ctx).strip()
        return json.loads(rendered) if rendered else None

    # --- output ------------------------------------------------------------------------------------
    def _pieces(self, reply: str) -> list[str]:
        words = reply.split(" ")
        n = self.words_per_chunk
        pieces = [" ".join(words[i : i + n]) for i in range(0, len(words), n)]
        return [p + " " for p in pieces[:-1]] + pieces[-1:]

    @staticmethod
    def _tool_calls(request: ChatRequest, calls: list[tuple[str, dict[str, Any]]]) -> list[ToolCallRequest]:
        out = []
        for index, (name, args) in enumerate(calls):
            arguments = json.dumps(args, ensure_ascii=False, sort_keys=True)
            seed = f"{request.scenario}:{request.agent}:{len(request.messages)}:{index}:{name}:{arguments}"
            call_id = "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
            out.append(ToolCallRequest(id=call_id, name=name, arguments=arguments))
        return out
