"""The dialog file parser: YAML data -> a validated :class:`~voiceagent.llm.rules.dialog.Dialog`.

Every mistake is found when the file is loaded (``RulesChat.warm`` at startup), never mid-call:
unknown keys, bad regexes, templates and ``when`` expressions that do not compile, malformed tool
calls. Templates run in a sandboxed Jinja environment whose filters are the spoken-language helpers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import ChainableUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from voiceagent.llm.rules.dialog import AgentDialog, Arg, Dialog, DialogError, Rule, Template, ToolAction
from voiceagent.llm.rules.spoken import (
    say_amount,
    say_chars,
    say_date,
    say_digits,
    spoken_date,
    spoken_digits,
)

__all__ = ["Parser"]

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


class Parser:
    """Parses one file's data; ``origin`` (the path) prefixes every :class:`DialogError`."""

    def __init__(self, origin: str, data: Any) -> None:
        self.origin = origin
        self.data = data
        self.patterns: dict[str, str] = {}
        self.macros: Template | None = None

    def fail(self, where: str, message: str) -> DialogError:
        return DialogError(f"{self.origin}: {where}: {message}")

    def parse(self, name: str) -> Dialog:
        """The whole file as a :class:`Dialog` named ``name``; raises :class:`DialogError`."""
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

    def _agent(self, where: str, data: Any) -> AgentDialog:
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
        after: dict[str, tuple[Rule, ...]] = {}
        for tool, value in after_data.items():
            self._key(f"{where}.after_tool", tool)
            items = value if isinstance(value, list) else [value]
            after[str(tool)] = tuple(
                self._rule(f"{where}.after_tool.{tool}[{i}]", r, user=False) for i, r in enumerate(items)
            )
        fallback = data.get("fallback")
        after_fallback = data.get("after_tool_fallback")
        return AgentDialog(
            rules=rules,
            after_tool=after,
            fallback=self._template(f"{where}.fallback", fallback) if fallback is not None else None,
            after_tool_fallback=(
                self._template(f"{where}.after_tool_fallback", after_fallback)
                if after_fallback is not None
                else None
            ),
        )

    def _rule(self, where: str, data: Any, user: bool) -> Rule:
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
        return Rule(
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

    def _template(self, where: str, source: Any) -> Template:
        if not isinstance(source, str):
            raise self.fail(where, "must be a string template")
        try:
            compiled = _ENV.from_string(source)
        except TemplateError as exc:
            raise self.fail(where, f"invalid template: {exc}") from None
        return Template(source, compiled)

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

    def _tool(self, where: str, data: Any) -> ToolAction:
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
        return ToolAction(name=name, args=args)

    def _arg(self, where: str, value: Any) -> Arg:
        if isinstance(value, str):
            return Arg("template", self._template(where, value))
        if isinstance(value, list):
            return Arg("list", tuple(self._arg(f"{where}[{i}]", v) for i, v in enumerate(value)))
        if isinstance(value, dict):
            if set(value) != {"json"}:
                raise self.fail(where, "a mapping argument must be {json: <template>}")
            return Arg("json", self._template(f"{where}.json", value["json"]))
        if value is None or isinstance(value, int | float | bool):
            return Arg("literal", value)
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
