"""Expectations of an agent test and how they are checked against one :class:`TurnObservation`.

One grammar for every matched value (``args`` of a tool call, a tool's ``result`` fields, the
``reply``, the ``transcript``): a scalar, or a mapping of operations that must all hold -
``equals``, ``contains`` (all of), ``any`` (one of), ``regex`` (searched), ``not`` (none of),
``digits`` (the value's digits equal these). Strings compare case-insensitively, numbers as
numbers. Where a plain scalar means "equal" (tool arguments) or "contains" (texts) is the
caller's choice (:func:`parse_matcher` ``text=``). Strings may be Jinja templates; they are
rendered at check time with the test's variables (``render``), so ``{{ profile.full_name }}``
works in expectations as in turns.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents_app.evals.observe import TurnObservation

__all__ = [
    "EXPECT_KEYS",
    "Expect",
    "HandoffExpect",
    "Matcher",
    "ToolCallExpect",
    "check_expect",
    "parse_expect",
    "parse_matcher",
]

Render = Callable[[str], str]
OPS = ("equals", "contains", "any", "regex", "not", "digits")
EXPECT_KEYS = (
    "agent",
    "handoff",
    "tool_calls",
    "no_tool_calls",
    "reply",
    "transcript",
    "ended",
    "within_ms",
    "judge",
)
TOOL_CALL_KEYS = ("name", "args", "ok", "result")
HANDOFF_KEYS = ("to", "from", "type", "tool")
MISSING = object()


def _plain(text: str) -> str:
    return text


def _known(keys: tuple[str, ...]) -> str:
    return ", ".join(keys)


def _as_text(value: Any) -> str:
    if value is None or value is MISSING:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _equal(actual: Any, expected: Any, render: Render) -> bool:
    """Strings case-insensitively, numbers as numbers (``4`` equals ``"4.0"`` when one side is a
    number), booleans and null exactly."""
    if isinstance(expected, bool) or isinstance(actual, bool) or expected is None:
        return actual is expected
    if isinstance(expected, str):
        expected = render(expected)
        if isinstance(actual, str):
            return actual.strip().casefold() == expected.strip().casefold()
    want, got = _number(expected), _number(actual)
    if want is not None and got is not None:
        return want == got
    if isinstance(expected, str) or isinstance(actual, str):
        return _as_text(actual).strip().casefold() == str(expected).strip().casefold()
    return actual == expected


@dataclass(frozen=True)
class Matcher:
    """Operations that must all hold for a value (see the module docstring)."""

    ops: tuple[tuple[str, Any], ...]

    def check(self, value: Any, render: Render = _plain) -> bool:
        if value is MISSING:
            return False
        text = _as_text(value).casefold()
        for op, arg in self.ops:
            if op == "equals" and not _equal(value, arg, render):
                return False
            if op == "contains" and not all(render(str(a)).casefold() in text for a in arg):
                return False
            if op == "any" and not any(render(str(a)).casefold() in text for a in arg):
                return False
            if op == "regex" and re.search(render(arg), _as_text(value), re.IGNORECASE) is None:
                return False
            if op == "not":
                if isinstance(value, str) and any(render(str(a)).casefold() in text for a in arg):
                    return False
                if not isinstance(value, str) and any(_equal(value, a, render) for a in arg):
                    return False
            if op == "digits" and re.sub(r"\D", "", _as_text(value)) != re.sub(r"\D", "", render(arg)):
                return False
        return True

    def describe(self, render: Render = _plain) -> str:
        parts = []
        for op, arg in self.ops:
            shown = [render(str(a)) for a in arg] if isinstance(arg, tuple) else render(str(arg))
            if isinstance(shown, list):
                shown = " and ".join(repr(s) for s in shown) if op == "contains" else repr(shown)
            else:
                shown = repr(shown) if isinstance(arg, str) else str(arg)
            parts.append(f"{op} {shown}")
        return "; ".join(parts)


def parse_matcher(raw: Any, where: str, problems: list[str], *, text: bool) -> Matcher | None:
    """A matcher from the file; ``text``: a plain scalar means "contains" (else "equals")."""
    if raw is None or isinstance(raw, str | int | float | bool):
        if text:
            return Matcher((("contains", (_as_text(raw),)),))
        return Matcher((("equals", raw),))
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a value or a mapping of {_known(OPS)}, got {type(raw).__name__}")
        return None
    if not raw:
        problems.append(f"{where}: empty mapping (use one of {_known(OPS)})")
        return None
    ops: list[tuple[str, Any]] = []
    for key, arg in raw.items():
        if key not in OPS:
            problems.append(f"{where}: unknown key {key!r} (known: {_known(OPS)})")
            continue
        if key in ("contains", "any", "not"):
            items = arg if isinstance(arg, list) else [arg]
            if not items or not all(isinstance(i, str | int | float | bool) for i in items):
                problems.append(f"{where}: {key}: expected a string or a list of strings")
                continue
            ops.append((key, tuple(items)))
        elif key == "regex":
            if not isinstance(arg, str):
                problems.append(f"{where}: regex: expected a string")
                continue
            if "{{" not in arg and "{%" not in arg:
                try:
                    re.compile(arg)
                except re.error as exc:
                    problems.append(f"{where}: regex {arg!r} is not valid: {exc}")
                    continue
            ops.append((key, arg))
        elif key == "digits":
            if not isinstance(arg, str | int) or isinstance(arg, bool):
                problems.append(f"{where}: digits: expected a string of digits")
                continue
            ops.append((key, str(arg)))
        else:
            ops.append((key, arg))
    return Matcher(tuple(ops)) if ops else None


@dataclass(frozen=True)
class ToolCallExpect:
    name: str
    args: tuple[tuple[str, Matcher], ...] = ()
    ok: bool | None = None
    result: tuple[tuple[str, Matcher], ...] = ()

    def matches(self, call: dict[str, Any], render: Render) -> bool:
        if (call.get("name") or "") != self.name:
            return False
        if self.ok is not None and bool(call.get("ok", True)) is not self.ok:
            return False
        args = call.get("args") or {}
        if not all(m.check(args.get(k, MISSING), render) for k, m in self.args):
            return False
        result = call.get("result")
        if isinstance(result, str):
            with contextlib.suppress(ValueError):
                result = json.loads(result)
        fields = result if isinstance(result, dict) else {}
        return all(m.check(fields.get(k, MISSING), render) for k, m in self.result)

    def describe(self, render: Render = _plain) -> str:
        args = ", ".join(f"{k}: {m.describe(render)}" for k, m in self.args)
        text = f"{self.name}({args})"
        if self.ok is not None:
            text += f" ok={self.ok}"
        if self.result:
            text += " -> {" + ", ".join(f"{k}: {m.describe(render)}" for k, m in self.result) + "}"
        return text


@dataclass(frozen=True)
class HandoffExpect:
    to: str | None = None
    from_: str | None = None
    type: str | None = None
    tool: str | None = None

    def matches(self, handoff: dict[str, Any]) -> bool:
        pairs = (("to", self.to), ("from", self.from_), ("type", self.type), ("tool", self.tool))
        return all(
            want is None or str(handoff.get(k) or "").casefold() == want.casefold() for k, want in pairs
        )

    def describe(self) -> str:
        pairs = (("from", self.from_), ("to", self.to), ("type", self.type), ("tool", self.tool))
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs if v is not None) + "}"


@dataclass(frozen=True)
class Expect:
    """What must hold after one turn; ``None`` fields are not checked."""

    agent: str | None = None
    handoffs: tuple[HandoffExpect, ...] | None = None  # () = "handoff: none"
    tool_calls: tuple[ToolCallExpect, ...] = ()
    no_tool_calls: tuple[str, ...] = ()
    reply: Matcher | None = None
    transcript: Matcher | None = None
    ended: bool | None = None
    within_ms: float | None = None
    judge: str | None = None


def _pairs(raw: Any, where: str, problems: list[str]) -> tuple[tuple[str, Matcher], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of name: value")
        return ()
    out = []
    for key, value in raw.items():
        matcher = parse_matcher(value, f"{where}.{key}", problems, text=False)
        if matcher is not None:
            out.append((str(key), matcher))
    return tuple(out)


def _tool_call(raw: Any, where: str, problems: list[str]) -> ToolCallExpect | None:
    if isinstance(raw, str):
        return ToolCallExpect(raw)
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a tool name or a mapping with name, args")
        return None
    for key in raw:
        if key not in TOOL_CALL_KEYS:
            problems.append(f"{where}: unknown key {key!r} (known: {_known(TOOL_CALL_KEYS)})")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: name: a tool name is required")
        return None
    ok = raw.get("ok")
    if ok is not None and not isinstance(ok, bool):
        problems.append(f"{where}: ok: expected true or false")
        ok = None
    args = _pairs(raw.get("args"), f"{where}: args", problems)
    result = _pairs(raw.get("result"), f"{where}: result", problems)
    return ToolCallExpect(name, args, ok, result)


def _handoffs(raw: Any, where: str, problems: list[str]) -> tuple[HandoffExpect, ...] | None:
    if isinstance(raw, str) and raw.strip().lower() == "none":
        return ()
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]" if isinstance(raw, list) else where
        if not isinstance(item, dict) or not item:
            problems.append(f"{at}: expected 'none' or a mapping of {_known(HANDOFF_KEYS)}")
            continue
        bad = [k for k in item if k not in HANDOFF_KEYS]
        for key in bad:
            problems.append(f"{at}: unknown key {key!r} (known: {_known(HANDOFF_KEYS)})")
        if not all(isinstance(v, str) for v in item.values()):
            problems.append(f"{at}: values must be strings")
            continue
        kind = item.get("type")
        if kind is not None and kind not in ("announced", "discrete"):
            problems.append(f"{at}: type must be announced or discrete, not {kind!r}")
        out.append(HandoffExpect(item.get("to"), item.get("from"), kind, item.get("tool")))
    return tuple(out)


def parse_expect(raw: Any, where: str, problems: list[str]) -> Expect | None:
    """An :class:`Expect` from a mapping; every problem is appended (naming ``where``)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of {_known(EXPECT_KEYS)}")
        return None
    for key in raw:
        if key not in EXPECT_KEYS:
            problems.append(f"{where}: unknown key {key!r} (known: {_known(EXPECT_KEYS)})")
    fields: dict[str, Any] = {}
    for key in ("agent", "judge"):
        if key in raw:
            if isinstance(raw[key], str) and raw[key].strip():
                fields[key] = raw[key].strip()
            else:
                problems.append(f"{where}: {key}: expected a non-empty string")
    if "handoff" in raw:
        fields["handoffs"] = _handoffs(raw["handoff"], f"{where}: handoff", problems)
    calls = raw.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            problems.append(f"{where}: tool_calls: expected a list")
        else:
            parsed = [_tool_call(c, f"{where}: tool_calls[{i}]", problems) for i, c in enumerate(calls)]
            fields["tool_calls"] = tuple(c for c in parsed if c is not None)
    banned = raw.get("no_tool_calls")
    if banned is not None:
        banned = [banned] if isinstance(banned, str) else banned
        if not isinstance(banned, list) or not all(isinstance(b, str) for b in banned):
            problems.append(f"{where}: no_tool_calls: expected a list of tool names")
        else:
            fields["no_tool_calls"] = tuple(banned)
    for key in ("reply", "transcript"):
        if key in raw:
            fields[key] = parse_matcher(raw[key], f"{where}: {key}", problems, text=True)
    if "ended" in raw:
        if isinstance(raw["ended"], bool):
            fields["ended"] = raw["ended"]
        else:
            problems.append(f"{where}: ended: expected true or false")
    if "within_ms" in raw:
        budget = raw["within_ms"]
        if isinstance(budget, int | float) and not isinstance(budget, bool) and budget > 0:
            fields["within_ms"] = float(budget)
        else:
            problems.append(f"{where}: within_ms: expected a positive number of milliseconds")
    return Expect(**fields)


# --- checking -----------------------------------------------------------------------------------
Problem = tuple[str, str, str]  # (expectation, expected, actual)


def _calls_text(calls: list[dict[str, Any]]) -> str:
    if not calls:
        return "no tool calls"
    return "; ".join(f"{c.get('name')}({_as_text(c.get('args') or {})})" for c in calls)


def _handoffs_text(handoffs: list[dict[str, Any]]) -> str:
    if not handoffs:
        return "no handoff"
    return "; ".join(f"{h.get('from')} -> {h.get('to')} ({h.get('type')})" for h in handoffs)


def check_expect(expect: Expect, obs: TurnObservation, render: Render = _plain) -> list[Problem]:
    """Every expectation (but ``judge``, asked by the runner) that ``obs`` does not meet."""
    out: list[Problem] = []
    if expect.agent is not None and obs.agent.casefold() != render(expect.agent).casefold():
        out.append(("agent", expect.agent, obs.agent or "(none)"))
    if expect.handoffs is not None:
        if not expect.handoffs and obs.handoffs:
            out.append(("handoff", "none", _handoffs_text(obs.handoffs)))
        at = 0
        for i, want in enumerate(expect.handoffs):
            found = next((j for j in range(at, len(obs.handoffs)) if want.matches(obs.handoffs[j])), None)
            if found is None:
                out.append((f"handoff[{i}]", want.describe(), _handoffs_text(obs.handoffs)))
                break
            at = found + 1
    at = 0
    for i, want in enumerate(expect.tool_calls):
        calls = obs.tool_calls
        found = next((j for j in range(at, len(calls)) if want.matches(calls[j], render)), None)
        if found is None:
            out.append((f"tool_calls[{i}]", want.describe(render), _calls_text(obs.tool_calls)))
            break
        at = found + 1
    called = [c.get("name") for c in obs.tool_calls]
    for name in expect.no_tool_calls:
        if name in called:
            out.append(("no_tool_calls", f"no call of {name}", _calls_text(obs.tool_calls)))
    texts = (("reply", expect.reply, obs.reply), ("transcript", expect.transcript, obs.transcript))
    for key, matcher, value in texts:
        if matcher is not None and not matcher.check(value, render):
            out.append((key, matcher.describe(render), repr(value) if value else "(nothing)"))
    if expect.ended is not None and obs.ended is not expect.ended:
        out.append(("ended", str(expect.ended).lower(), str(obs.ended).lower()))
    if expect.within_ms is not None:
        first = obs.first_audio_ms
        if first is None or first > expect.within_ms:
            actual = "no agent audio" if first is None else f"first audio after {first:g} ms"
            out.append(("within_ms", f"first audio within {expect.within_ms:g} ms", actual))
    return out
