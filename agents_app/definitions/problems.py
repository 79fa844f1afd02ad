"""What is wrong with a definition, and what a load found.

Every validator reports :class:`Problem` objects instead of raising, so the file loader, the
admin forms and the REST views can show all of them at once.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from voiceagent.conversation.specs import AgentSpec, ScenarioSpec


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


def has_errors(problems: Iterable[Problem]) -> bool:
    """Whether any of ``problems`` is an error (warnings skip nothing)."""
    return any(p.is_error for p in problems)


def suggest(value: str, choices: Iterable[str]) -> str:
    """A " (did you mean ...?)" hint for a misspelt name, or nothing."""
    match = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {match[0]!r}?)" if match else ""
