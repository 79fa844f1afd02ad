"""Prompt templates: the Jinja2 sandbox that renders them and the checks that guard them.

Templates are rendered in one immutable sandbox. At validation time a template may only use the
session variables (:data:`SESSION_VARIABLES`) and the ``agent_defaults`` keys that *every*
scenario containing the agent supplies; at render time an undefined value renders empty, so a
missing memory value never breaks a live turn. Unsafe attribute access (``__class__`` and
friends) raises :class:`jinja2.exceptions.SecurityError` instead of rendering.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from jinja2 import ChainableUndefined, Template, meta, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError

from agents_app.definitions.problems import Problem, suggest
from agents_app.definitions.template_budget import (
    BUDGET,
    BudgetedSandbox,
    TemplateBudgetExceeded,
    instrument,
    metered,
)
from voiceagent.conversation.specs import ScenarioSpec

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

_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


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


#: The one template environment: sandboxed, immutable (templates cannot modify ``memory``), every
#: render within :data:`~agents_app.definitions.template_budget.BUDGET`.
_ENV = BudgetedSandbox(
    undefined=_LenientUndefined,
    autoescape=False,
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=_finalize,
)


@functools.lru_cache(maxsize=512)
def _compile(source: str) -> Template:
    return _ENV.from_string(instrument(_ENV.parse(source)))


@functools.lru_cache(maxsize=512)
def _parse(source: str) -> nodes.Template:
    return _ENV.parse(source)


def render_prompt(template_source: str, variables: Mapping[str, Any]) -> str:
    """Render a prompt template; undefined values render empty, runs of blank lines collapse.

    Raises :class:`jinja2.TemplateSyntaxError` for a broken template (validation catches those
    first), :class:`jinja2.exceptions.SecurityError` for unsafe attribute access and
    :class:`TemplateBudgetExceeded` for a render over its budget (operations, characters, time).
    Blocking: call it from a worker thread in async code.
    """
    template = _compile(template_source)
    text = metered(BUDGET, lambda: template.render(dict(variables)))
    return _BLANK_LINES.sub("\n\n", text).strip()


def needs_rendering(template_source: str) -> bool:
    """Whether the source holds any Jinja syntax (plain text renders to itself, at no cost)."""
    return "{" in template_source


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
    elif not problems:
        problems.extend(_trial_render(source, file=file, field=field))
    if allowed_variables is not None:
        allowed = set(allowed_variables)
        for name in sorted(set(meta.find_undeclared_variables(ast)) - allowed):
            problems.append(
                Problem(
                    file,
                    field,
                    f"template uses undefined variable {name!r}{suggest(name, allowed)}; "
                    f"allowed are the session variables and the agent_defaults keys{context}",
                )
            )
    return problems


def _trial_render(source: str, *, file: str, field: str) -> list[Problem]:
    """Render once with no caller data: a template that cannot render within its budget even
    then (a loop bomb, a string bomb) is refused when saved rather than at every turn. Other
    errors depend on the caller's data and are not judged here."""
    try:
        render_prompt(source, prompt_variables(None, {}))
    except TemplateBudgetExceeded as exc:
        return [Problem(file, field, f"template cannot render within its budget: {exc}")]
    except Exception:
        return []
    return []


def allowed_variables_for(agent_name: str, scenarios: Iterable[ScenarioSpec | Mapping]) -> set[str]:
    """Session variables plus the ``agent_defaults`` keys every scenario containing the agent has."""
    keys: set[str] | None = None
    for scenario in scenarios:
        names, defaults = scenario_members_and_defaults(scenario)
        if agent_name not in names:
            continue
        keys = set(defaults) if keys is None else keys & set(defaults)
    return set(SESSION_VARIABLES) | (keys or set())


def scenario_members_and_defaults(scenario: ScenarioSpec | Mapping) -> tuple[list[str], list[str]]:
    """(agent names, ``agent_defaults`` keys) of a spec or of raw scenario data."""
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
