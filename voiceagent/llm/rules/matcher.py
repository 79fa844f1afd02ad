"""Deciding a round: which rule fires for this request, and what it says and calls.

Pure: given a parsed :class:`Dialog` and a ``ChatRequest`` it does no I/O, so the same request
always gives the same :class:`Decision`. The order rules are tried in is described in
:mod:`voiceagent.llm.rules`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError
from jinja2.runtime import Macro

from voiceagent.conversation.providers import ChatRequest
from voiceagent.llm.rules.context import template_context
from voiceagent.llm.rules.dialog import Arg, Dialog, Rule, Template, ToolAction
from voiceagent.llm.rules.history import History, offered_names

logger = logging.getLogger(__name__)

__all__ = ["RENDER_ERRORS", "Decision", "decide"]

# What a template or a `when` expression can raise at run time (a rule that raises is skipped).
RENDER_ERRORS = (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError)


@dataclass
class Decision:
    """What the agent says and calls this round, and which rule (or fallback) decided it."""

    reply: str
    calls: list[tuple[str, dict[str, Any]]]
    rule: str


# A rule applied but needs a tool the agent is not offered: the agent's fallback answers instead.
_NOT_OFFERED = Decision("", [], "tool not offered")


def decide(request: ChatRequest, dialog: Dialog, generic: Dialog) -> Decision:
    """The decision of this round; ``generic`` supplies the fallbacks a file leaves out."""
    conv = History.read(list(request.messages or []))
    offered = offered_names(request.tools)
    ctx = template_context(request, conv, offered, dialog.patterns)
    if dialog.macros is not None:  # the file's macros, seeing this request's names
        module = dialog.macros.compiled.make_module(vars=ctx)
        ctx.update({k: v for k, v in vars(module).items() if isinstance(v, Macro)})
    layers = dialog.layers(request.agent)

    if conv.last_role == "user":
        decision = _first([rule for layer in layers for rule in layer.rules], ctx, offered, ctx["text"])
        if decision is not None and decision is not _NOT_OFFERED:
            return decision
        fallback = next((layer.fallback for layer in layers if layer.fallback is not None), None)
        fallback = fallback or generic.defaults.fallback
        return Decision(_render(fallback, ctx), [], "fallback")

    if conv.last_role == "tool" and conv.trailing_results:
        results = {name: result for name, result in conv.trailing_results}
        for name, result in reversed(conv.trailing_results):
            tool_ctx = {**ctx, "tool": name, "result": result, "results": results}
            rules = [rule for layer in layers for rule in layer.after_tool.get(name, ())]
            decision = _first(rules, tool_ctx, offered, None)
            if decision is _NOT_OFFERED:
                break
            if decision is not None:
                return decision
        else:
            if any(isinstance(r, Mapping) and r.get("handoff") is True for _, r in conv.trailing_results):
                return Decision("", [], "after handoff")
        name, result = conv.trailing_results[-1]
        tool_ctx = {**ctx, "tool": name, "result": result, "results": results}
        template = next(
            (layer.after_tool_fallback for layer in layers if layer.after_tool_fallback is not None),
            None,
        )
        template = template or generic.defaults.after_tool_fallback
        return Decision(_render(template, tool_ctx), [], "after_tool_fallback")

    return Decision("", [], "nothing to answer")


def _first(rules: list[Rule], ctx: dict[str, Any], offered: set[str], text: str | None) -> Decision | None:
    """The first rule that applies; :data:`_NOT_OFFERED` when it needs a tool not offered."""
    for rule in rules:
        decision = _try(rule, ctx, offered, text)
        if decision is _NOT_OFFERED:
            logger.debug("offline dialog rule %s needs a tool not offered; fallback", rule.where)
            return _NOT_OFFERED
        if decision is not None:
            return decision
    return None


def _try(rule: Rule, ctx: dict[str, Any], offered: set[str], text: str | None) -> Decision | None:
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
        reply = _render(rule.reply, local) if rule.reply is not None else ""
        calls = [(action.name, _args(action, local)) for action in rule.tools]
    except RENDER_ERRORS as exc:
        logger.warning("offline dialog rule %s skipped: %s", rule.where, exc)
        return None
    return Decision(reply, calls, rule.where)


def _render(template: Template | None, ctx: Mapping[str, Any]) -> str:
    if template is None:
        return ""
    return " ".join(template.render(ctx).split())


def _args(action: ToolAction, ctx: Mapping[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for key, spec in action.args.items():
        value = _arg_value(spec, ctx)
        if value is None or value == "" or value == []:
            continue
        args[key] = value
    return args


def _arg_value(spec: Arg, ctx: Mapping[str, Any]) -> Any:
    if spec.kind == "literal":
        return spec.value
    if spec.kind == "template":
        return spec.value.render(ctx).strip()
    if spec.kind == "list":
        items = [_arg_value(item, ctx) for item in spec.value]
        return [item for item in items if item not in (None, "")]
    rendered = spec.value.render(ctx).strip()
    return json.loads(rendered) if rendered else None
