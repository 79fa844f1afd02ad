"""The render budget of prompt templates: operations, characters produced and time, per render.

A prompt template is code an API-key holder writes, rendered at every turn. Jinja2's sandbox
stops attribute escapes but not work: ``{% for a in range(20000) %}{% for b in range(20000) %}``
or ``{{ 'x' * 10**9 }}`` would hold a worker for seconds or exhaust its memory. So every render
runs against a :class:`Meter` (in a context variable, so a render in a worker thread has its own):

- each loop iteration, call (functions, methods, macros), filter and intercepted operator is one
  *operation*; more than :data:`BUDGET` ``operations`` stops the render, calls nested deeper
  than ``depth`` too (a recursive macro, before Python's own stack gives out);
- every string the template makes (its output, ``~`` joins, ``*``/``+``/``%`` results, filter
  results) counts toward ``characters``; an operation that *would* make a value over the limit
  (``'x' * 10**9``, ``'x'.ljust(10**9)``, ``'%999999999s' % x``, ``s|replace('x', s)``,
  ``[1]|slice(10**8)``) is refused before it runs: widths and counts of the filters and str
  methods that take them, format widths, the size of a replace or a join;
- the clock is read at every operation; past ``seconds`` the render stops.

:func:`instrument` rewrites a parsed template so loops, joins and output go through the meter;
:class:`BudgetedSandbox` meters calls, filters and operators. A stopped render raises
:class:`TemplateBudgetExceeded`, whose message names the limit (shown to whoever saved the
template, logged at run time).
"""

from __future__ import annotations

import contextvars
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes, pass_context
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment


@dataclass(frozen=True)
class RenderBudget:
    """What one render of one prompt may spend (documented in README, Production)."""

    operations: int = 20_000
    characters: int = 200_000
    seconds: float = 0.5
    depth: int = 50  # calls inside calls (a recursive macro), before Python's own stack limit


#: The budget of every prompt render (save-time trial renders and turns alike).
BUDGET = RenderBudget()


class TemplateBudgetExceeded(Exception):
    """A render stopped because it would exceed its budget; the message names the limit."""


class Meter:
    """The budget spent so far by one render."""

    def __init__(self, budget: RenderBudget) -> None:
        self.budget = budget
        self.operations = 0
        self.characters = 0
        self.depth = 0
        self.deadline = time.monotonic() + budget.seconds

    def tick(self, count: int = 1) -> None:
        self.operations += count
        if self.operations > self.budget.operations:
            raise TemplateBudgetExceeded(
                f"the template needs more than {self.budget.operations} operations "
                "(loop iterations, calls, filters)"
            )
        if time.monotonic() > self.deadline:
            raise TemplateBudgetExceeded(f"the template takes longer than {self.budget.seconds} s to render")

    def allow_size(self, size: int) -> None:
        """Refuse, before it is made, a value of ``size`` characters or items over the limit."""
        if size > self.budget.characters:
            raise TemplateBudgetExceeded(
                f"the template makes a value of {size} characters or items, over the limit of "
                f"{self.budget.characters}"
            )

    def produce(self, size: int) -> None:
        self.characters += size
        if self.characters > self.budget.characters:
            raise TemplateBudgetExceeded(
                f"the template produces more than {self.budget.characters} characters"
            )


_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("prompt_meter", default=None)


def metered(budget: RenderBudget, render: Callable[[], str]) -> str:
    """Run ``render`` against a fresh meter; a recursion too deep is a budget overrun too."""
    token = _METER.set(Meter(budget))
    try:
        return render()
    except RecursionError:
        raise TemplateBudgetExceeded("the template nests (recursive macros or loops) too deeply") from None
    finally:
        _METER.reset(token)


def _meter() -> Meter:
    meter = _METER.get()
    if meter is None:  # rendered outside metered(): the budget still applies
        meter = Meter(BUDGET)
        _METER.set(meter)
    return meter


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0


def _check_sizes(args: Iterable[Any], kwargs: dict[str, Any]) -> None:
    """The numbers handed to a width- or count-taking filter or method: refuse huge ones."""
    meter = _meter()
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool):
            meter.allow_size(abs(value))


_PERCENT_SPEC = re.compile(r"%[#0\- +]*(\d*)(?:\.(\d*))?")
_BRACE_FIELD = re.compile(r"\{[^{}]*\}")
_DIGITS = re.compile(r"\d+")


def _check_format(template: Any) -> None:
    """The widths and precisions of a ``%`` or ``str.format`` template (``'%999999999s'``)."""
    if not isinstance(template, str):
        return
    meter = _meter()
    for width, precision in _PERCENT_SPEC.findall(template):
        for number in (width, precision):
            if number:
                meter.allow_size(int(number))
    for field in _BRACE_FIELD.findall(template):
        for number in _DIGITS.findall(field):
            meter.allow_size(int(number))


def _check_replace(text: Any, old: Any = "", new: Any = "", count: Any = -1, *_: Any, **__: Any) -> None:
    """The size a replace would make, before it makes it (``s|replace('x', s)`` squares ``s``)."""
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _meter().allow_size(len(text) + hits * (len(new) - len(old)))


#: Filters whose numeric arguments are widths or counts of what they make.
_SIZE_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate", "slice", "batch", "tojson"})
#: str methods whose numeric arguments are widths.
_SIZE_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def _check_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """What a call would make, for the calls that can make a lot: str methods, ``lipsum``."""
    target = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
    owner = getattr(target, "__self__", None)
    name = getattr(target, "__name__", "")
    if isinstance(owner, str):
        if name in _SIZE_METHODS:
            _check_sizes(args, kwargs)
        elif name == "replace":
            _check_replace(owner, *args, **kwargs)
        elif name in ("format", "format_map"):
            _check_format(owner)
        elif name == "join" and args and isinstance(args[0], list | tuple):
            _meter().allow_size(sum(len(str(x)) for x in args[0]) + len(owner) * len(args[0]))
    elif name == "generate_lorem_ipsum":
        _check_sizes(args, kwargs)


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every call, filter and size-making operator metered."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _metered_filter(name, func) for name, func in self.filters.items()}
        self.filters.update(_budget_iter=_budget_iter, _budget_join=_budget_join, _budget_out=_budget_out)
        self.globals["range"] = _budget_range

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        meter = _meter()
        meter.tick()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if _sized(seq) and isinstance(times, int):
                    meter.allow_size(len(seq) * max(times, 0))
        elif operator == "+" and _sized(left) and _sized(right):
            meter.allow_size(len(left) + len(right))
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            meter.allow_size(abs(left).bit_length() * max(right, 0) // 8)  # the result's bytes
        elif operator == "%":
            _check_format(left)
        result = super().call_binop(context, operator, left, right)
        meter.produce(_sized(result) if isinstance(result, str) else 0)
        return result

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        meter = _meter()
        meter.tick()
        _check_call(__obj, args, {k: v for k, v in kwargs.items() if not k.startswith("_")})
        meter.depth += 1
        try:
            if meter.depth > meter.budget.depth:
                raise TemplateBudgetExceeded(
                    f"the template nests calls more than {meter.budget.depth} deep (a recursive macro?)"
                )
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            meter.depth -= 1
        if isinstance(result, str):
            meter.produce(len(result))
        return result


def _metered_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A built-in filter that ticks, refuses what would make a huge value and counts what it makes."""

    @functools.wraps(func)  # keeps jinja's pass_context / pass_environment marker
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        meter = _meter()
        meter.tick()
        leading = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0  # (context,)
        value, rest = (args[leading], args[leading + 1 :]) if len(args) > leading else (None, ())
        if name in _SIZE_FILTERS:
            _check_sizes(rest, kwargs)
        elif name == "format":
            _check_format(value)
        elif name == "replace":
            _check_replace(value, *rest, **kwargs)
        result = func(*args, **kwargs)
        if isinstance(result, str):
            meter.produce(len(result))
        return result

    return wrapper


def _budget_range(*args: int) -> range:
    items = range(*args)
    _meter().tick()
    if len(items) > BUDGET.operations:
        raise TemplateBudgetExceeded(
            f"range() of {len(items)} items is over the limit of {BUDGET.operations} operations"
        )
    return items


@pass_context
def _budget_iter(context: Context, iterable: Any) -> Iterator[Any]:
    meter = _meter()
    for item in iterable:
        meter.tick()
        yield item


@pass_context
def _budget_join(context: Context, parts: list[Any]) -> str:
    meter = _meter()
    texts = [str(part) for part in parts]
    meter.allow_size(sum(map(len, texts)))
    text = "".join(texts)
    meter.produce(len(text))
    return text


@pass_context
def _budget_out(context: Context, value: Any) -> Any:
    if isinstance(value, str):
        _meter().produce(len(value))
    return value


def _wrap(node: nodes.Expr, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def instrument(ast: nodes.Template) -> nodes.Template:
    """Route the template's loops, ``~`` joins and output through the meter (in place)."""
    for loop in ast.find_all(nodes.For):
        loop.iter = _wrap(loop.iter, "_budget_iter")
    for output in ast.find_all(nodes.Output):
        output.nodes = [_wrap(child, "_budget_out") for child in output.nodes]
    for parent in ast.find_all(nodes.Node):
        for field in parent.fields:
            value = getattr(parent, field, None)
            if isinstance(value, nodes.Concat):
                setattr(parent, field, _as_join(value))
            elif isinstance(value, list):
                setattr(parent, field, [_as_join(v) if isinstance(v, nodes.Concat) else v for v in value])
    return ast


def _as_join(concat: nodes.Concat) -> nodes.Filter:
    return _wrap(nodes.List(list(concat.nodes), lineno=concat.lineno), "_budget_join")
