"""A parsed dialog file as immutable data: what the parser builds and the matcher walks.

Kept apart from the parser so the matcher and the provider depend on the shape of a dialog, not on
how YAML becomes one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentDialog", "Arg", "Dialog", "DialogError", "Rule", "Template", "ToolAction"]


class DialogError(ValueError):
    """A dialog file is malformed; the message names the file and the place."""


@dataclass(frozen=True)
class Template:
    """A compiled Jinja template and the source it came from."""

    source: str
    compiled: Any

    def render(self, ctx: Mapping[str, Any]) -> str:
        return self.compiled.render(ctx)


@dataclass(frozen=True)
class Arg:
    """One tool-call argument as written in the file."""

    kind: str  # "template" | "literal" | "list" | "json"
    value: Any


@dataclass(frozen=True)
class ToolAction:
    """A tool call a rule makes: the tool's name and its argument specs."""

    name: str
    args: dict[str, Arg]


@dataclass(frozen=True)
class Rule:
    """One rule: where it is in the file, what it matches, its condition, reply and tool calls."""

    where: str
    patterns: tuple[re.Pattern[str], ...]
    when: Callable[[Mapping[str, Any]], bool] | None
    reply: Template | None
    tools: tuple[ToolAction, ...]


@dataclass(frozen=True)
class AgentDialog:
    """The section of one agent (or the file's ``defaults``)."""

    rules: tuple[Rule, ...] = ()
    after_tool: dict[str, tuple[Rule, ...]] = field(default_factory=dict)
    fallback: Template | None = None
    after_tool_fallback: Template | None = None


@dataclass(frozen=True)
class Dialog:
    """One parsed dialog file."""

    name: str
    origin: str
    agents: dict[str, AgentDialog]
    defaults: AgentDialog
    patterns: dict[str, str]
    macros: Template | None = None

    def layers(self, agent: str) -> tuple[AgentDialog, ...]:
        """The sections tried for ``agent``, in order: its own, then the file's defaults."""
        own = self.agents.get(agent)
        return (own, self.defaults) if own is not None else (self.defaults,)
