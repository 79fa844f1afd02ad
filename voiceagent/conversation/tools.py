"""The central tool registry: built-in tools, MCP tools and handoff tools all live here.

Built-in tools (``agents_app``) register with the :func:`tool` decorator, MCP tools (``mcp_app``,
named ``<server>_<tool>``) register :class:`ToolSpec` objects with ``source="mcp"`` and
``server=<server>``, and handoff tools are derived from the agent specs by
:func:`register_handoff_tools`. A conversation picks its agent's tools with
:meth:`ToolRegistry.specs_for`, offers them to the model (:meth:`ToolSpec.to_openai` /
:meth:`ToolSpec.to_realtime`) and runs the calls with :meth:`ToolRegistry.execute`, which never
raises except for :class:`asyncio.CancelledError` (barge-in cancels running tools).

:attr:`ToolRegistry.version` increases on every change, so a conversation notices on its next turn
that the tool set changed (an MCP server connected or went away, an agent was edited).

Pure asyncio and the standard library plus ``jsonschema``: no Django, no ORM, no Channels.
"""

from __future__ import annotations

import asyncio
import collections.abc
import copy
import inspect
import json
import logging
import re
import threading
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .specs import GENERIC_HANDOFF_TOOL, AgentSpec, HandoffMap, HandoffSpec

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ERROR_EXCEPTION",
    "ERROR_FAILED",
    "ERROR_TIMEOUT",
    "ERROR_UNKNOWN_TOOL",
    "ERROR_VALIDATION",
    "HANDOFF_SOURCE",
    "REGISTRY",
    "TOOL_NAME_RE",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "execute",
    "execute_spec",
    "handoff_tool_specs",
    "parse_docstring",
    "register_handoff_tools",
    "resolve_handoff",
    "tool",
    "tool_spec_from_function",
]

DEFAULT_TIMEOUT_S = 10.0
HANDOFF_SOURCE = "handoff"
ToolSource = Literal["builtin", "mcp", "handoff"] | str

ERROR_VALIDATION = "validation_error"
ERROR_TIMEOUT = "timeout"
ERROR_EXCEPTION = "exception"
ERROR_UNKNOWN_TOOL = "unknown_tool"
ERROR_FAILED = "failed"

# What the OpenAI chat-completions and realtime APIs accept as a function name.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

ToolFunc = Callable[..., Awaitable[Any]]


# --------------------------------------------------------------------------------------------------
# Context and result
# --------------------------------------------------------------------------------------------------


class ToolError(Exception):
    """A tool failed in a way it can put in words (a remote server unreachable or lost, the tool
    reporting an error): the model is told the message, the log gets one WARNING. Why not a plain
    exception: those are bugs, logged at ERROR with their traceback, which an outage of someone
    else's server is not."""


@dataclass
class ToolContext:
    """What a tool may know about the call; injected into a ``ctx`` parameter.

    ``memory`` is the session's working memory: the tool may read and update it in place.
    """

    session_id: str = ""
    agent: str = ""
    scenario: str = ""
    memory: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


@dataclass
class ToolResult:
    """The outcome of one tool call; ``error`` is ``{"type": ..., "message": ...}`` when not ``ok``."""

    name: str
    ok: bool
    result: Any = None
    error: dict | None = None
    duration_ms: float = 0.0

    @classmethod
    def failure(cls, name: str, error_type: str, message: str, duration_ms: float = 0.0) -> ToolResult:
        return cls(
            name=name, ok=False, error={"type": error_type, "message": message}, duration_ms=duration_ms
        )

    @property
    def is_handoff(self) -> bool:
        """True when a handoff tool asked for a transfer (resolve it with :func:`resolve_handoff`)."""
        return self.ok and isinstance(self.result, dict) and self.result.get("handoff") is True

    def to_model_content(self) -> str:
        """The JSON string the model sees as the function's output."""
        if not self.ok:
            return json.dumps({"error": self.error}, ensure_ascii=False, default=str)
        return json.dumps(self.result, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------------------------------
# ToolSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """One callable tool. ``parameters`` is a JSON schema of type ``object`` (treat it as read-only).

    ``func`` is called with the validated arguments as keyword arguments, plus the
    :class:`ToolContext` as ``context_param`` (detected automatically for a parameter named
    ``ctx``) when set.
    """

    name: str
    description: str
    parameters: dict = field(hash=False)
    func: ToolFunc = field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: ToolSource = "builtin"
    server: str | None = None
    context_param: str | None = None
    _validator: Any = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_RE.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use 1-64 characters from A-Z a-z 0-9 _ -")
        if not callable(self.func):
            raise TypeError(f"tool {self.name!r}: func must be an async callable")
        if not isinstance(self.timeout_s, int | float) or isinstance(self.timeout_s, bool):
            raise TypeError(f"tool {self.name!r}: timeout_s must be a number")
        if self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be > 0")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema with type 'object'")
        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(f"tool {self.name!r}: invalid parameters schema: {exc.message}") from exc
        object.__setattr__(self, "_validator", Draft202012Validator(self.parameters))
        if self.context_param is None and "ctx" in _parameter_names(self.func):
            object.__setattr__(self, "context_param", "ctx")

    @property
    def validator(self) -> Draft202012Validator:
        return self._validator

    def to_openai(self) -> dict:
        """Chat-completions shape: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def to_realtime(self) -> dict:
        """Realtime-API shape: ``{"type": "function", "name": ..., ...}``."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }


def _parameter_names(func: Callable[..., Any]) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return ()


# --------------------------------------------------------------------------------------------------
# Schema derivation from type hints and docstrings
# --------------------------------------------------------------------------------------------------

_ARGS_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)\s*:\s*$", re.IGNORECASE
)
_ANY_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns?|Yields?|Raises|"
    r"Examples?|Notes?|Attributes|See Also|Warnings?|Todo|References)\s*:\s*$",
    re.IGNORECASE,
)
_GOOGLE_PARAM_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(first paragraph, {param: description})`` from a Google (``Args:``) or Sphinx docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()

    summary: list[str] = []
    for line in lines:
        text = line.strip()
        if not text or _ANY_SECTION_RE.match(text) or text.startswith(":"):
            break
        summary.append(text)

    params: dict[str, str] = {}
    in_args = False
    section_indent = 0
    item_indent: int | None = None
    current: str | None = None  # parameter whose description continues on the next lines
    for line in lines:
        text = line.strip()
        if _ARGS_SECTION_RE.match(text):
            in_args, section_indent, item_indent, current = True, _indent(line), None, None
            continue
        if in_args:
            if not text:
                current = None
                continue
            if _indent(line) <= section_indent:
                in_args = False  # the section ended; the line may still be Sphinx-style
            else:
                if item_indent is None:
                    item_indent = _indent(line)
                if _indent(line) <= item_indent:
                    match = _GOOGLE_PARAM_RE.match(text)
                    current = match.group(1) if match else None
                    if match:
                        params[current] = match.group(2).strip()
                elif current is not None:
                    params[current] = f"{params[current]} {text}".strip()
                continue
        match = _SPHINX_PARAM_RE.match(text)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current is not None and text and not text.startswith(":") and _indent(line) > 0:
            params[current] = f"{params[current]} {text}".strip()
        else:
            current = None
    return " ".join(summary), {name: text for name, text in params.items() if text}


_NONE_TYPE = type(None)
_LIST_ORIGINS = (list, collections.abc.Sequence, collections.abc.MutableSequence)
_DICT_ORIGINS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SCALARS: dict[Any, dict] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
}


def _split_optional(annotation: Any) -> tuple[Any, bool]:
    """``(annotation without None, whether None was allowed)``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(annotation)
        rest = tuple(a for a in args if a is not _NONE_TYPE)
        if len(rest) != len(args):
            if len(rest) == 1:
                return rest[0], True
            return typing.Union[rest], True  # noqa: UP007 - building a Union from a tuple
    if origin is Literal:
        args = typing.get_args(annotation)
        rest = tuple(a for a in args if a is not None)
        if len(rest) != len(args) and rest:
            return Literal[rest], True
    return annotation, False


def _literal_schema(values: tuple[Any, ...]) -> dict:
    schema: dict[str, Any] = {}
    kinds = {type(v) for v in values}
    if kinds == {str}:
        schema["type"] = "string"
    elif kinds == {bool}:
        schema["type"] = "boolean"
    elif kinds == {int}:
        schema["type"] = "integer"
    elif kinds <= {int, float}:
        schema["type"] = "number"
    schema["enum"] = list(values)
    return schema


def _annotation_schema(annotation: Any, where: str) -> dict:
    """JSON schema for a parameter annotation (``Annotated`` and ``None`` already stripped)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    if annotation in (list, typing.List, collections.abc.Sequence):  # noqa: UP006
        return {"type": "array"}
    if annotation in (dict, typing.Dict, collections.abc.Mapping):  # noqa: UP006
        return {"type": "object"}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _annotation_schema(args[0], where)
    if origin is Literal:
        return _literal_schema(args)
    if origin in _LIST_ORIGINS:
        items = _annotation_schema(_split_optional(args[0])[0], where) if args else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if origin in _DICT_ORIGINS:
        if len(args) == 2 and args[0] is not str:
            raise TypeError(f"{where}: dict keys must be str for a JSON object, got {args[0]!r}")
        values = _annotation_schema(args[1], where) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    if origin is typing.Union or origin is types.UnionType:
        inner, nullable = _split_optional(annotation)
        if nullable:
            return _annotation_schema(inner, where)
        return {"anyOf": [_annotation_schema(arg, where) for arg in args]}
    raise TypeError(
        f"{where}: unsupported annotation {annotation!r}; use str/int/float/bool/list/dict/Literal "
        "or pass schema="
    )


def _strip_annotated(annotation: Any, doc: str | None) -> tuple[Any, str | None]:
    """``Annotated[X, "text"]`` -> ``(X, doc or "text")``."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        return base, doc or next((m for m in meta if isinstance(m, str)), None)
    return annotation, doc


def _json_default(value: Any) -> tuple[bool, Any]:
    try:
        return True, json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return False, None


def _parameter_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    """The resolved parameter annotations of ``fn`` (the return annotation is never evaluated)."""
    target = inspect.unwrap(fn)
    annotations = {k: v for k, v in inspect.get_annotations(target).items() if k != "return"}

    def stub() -> None:  # carries the parameter annotations only
        pass

    stub.__annotations__ = annotations
    try:
        localns = dict(inspect.getclosurevars(target).nonlocals)
    except (TypeError, ValueError):
        localns = {}
    try:
        return typing.get_type_hints(
            stub, globalns=getattr(target, "__globals__", {}), localns=localns, include_extras=True
        )
    except Exception as exc:
        raise TypeError(
            f"tool {name!r}: cannot resolve the type hints of {fn.__qualname__}: {exc}; pass schema="
        ) from exc


def _derive(fn: Callable[..., Any], name: str) -> tuple[str, dict, str | None, tuple[str, ...]]:
    """``(description, parameters schema, context parameter, params to default to None)``."""
    hints = _parameter_hints(fn, name)
    description, param_docs = parse_docstring(inspect.getdoc(fn))
    properties: dict[str, dict] = {}
    required: list[str] = []
    fill_none: list[str] = []
    context_param: str | None = None
    additional = False
    for pname, param in inspect.signature(fn).parameters.items():
        annotation = hints.get(pname, param.annotation)
        if pname == "ctx" or annotation is ToolContext:
            context_param = pname
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            additional = True
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"tool {name!r}: positional-only parameter {pname!r} is not supported")
        where = f"tool {name!r}, parameter {pname!r}"
        doc = param_docs.get(pname)
        annotation, doc = _strip_annotated(annotation, doc)
        annotation, nullable = _split_optional(annotation)
        annotation, doc = _strip_annotated(annotation, doc)
        schema = _annotation_schema(annotation, where)
        if doc:
            schema["description"] = doc
        has_default = param.default is not inspect.Parameter.empty
        if has_default and param.default is not None:
            ok, value = _json_default(param.default)
            if ok:
                schema["default"] = value
        if not has_default and nullable:
            fill_none.append(pname)
        if not has_default and not nullable:
            required.append(pname)
        properties[pname] = schema
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": additional,
    }
    return description, parameters, context_param, tuple(fill_none)


def tool_spec_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    schema: dict | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    source: ToolSource = "builtin",
    server: str | None = None,
) -> ToolSpec:
    """Build (without registering) the :class:`ToolSpec` of an ``async def`` function."""
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {name or getattr(fn, '__name__', fn)!r} must be an async def function")
    tool_name = name or fn.__name__
    derived_description, parameters, context_param, fill_none = _derive(fn, tool_name)
    func: ToolFunc = fn
    if fill_none:
        # ``x: str | None`` without a default is optional for the model; pass None when omitted.
        async def with_none_defaults(*args: Any, **kwargs: Any) -> Any:
            for pname in fill_none:
                kwargs.setdefault(pname, None)
            return await fn(*args, **kwargs)

        with_none_defaults.__name__ = getattr(fn, "__name__", tool_name)
        with_none_defaults.__qualname__ = getattr(fn, "__qualname__", tool_name)
        with_none_defaults.__doc__ = fn.__doc__
        func = with_none_defaults
    return ToolSpec(
        name=tool_name,
        description=description if description is not None else derived_description,
        parameters=schema if schema is not None else parameters,
        func=func,
        timeout_s=timeout_s,
        source=source,
        server=server,
        context_param=context_param,
    )


# --------------------------------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data; leaves that are not serialisable become ``str(leaf)``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _parse_arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any] | str:
    """The argument dict, or an error message."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            return f"arguments are not valid JSON: {exc}"
    if not isinstance(arguments, Mapping):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    return dict(arguments)


def _validation_problems(spec: ToolSpec, arguments: dict[str, Any]) -> list[str]:
    problems = []
    for error in sorted(spec.validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path]):
        path = ".".join(str(p) for p in error.absolute_path)
        problems.append(f"{path}: {error.message}" if path else error.message)
    return problems


async def execute_spec(
    spec: ToolSpec, arguments: Mapping[str, Any] | str | None, ctx: ToolContext | None = None
) -> ToolResult:
    """Validate ``arguments`` and run ``spec``; never raises except :class:`asyncio.CancelledError`."""
    started = time.perf_counter()

    def elapsed() -> float:
        return round((time.perf_counter() - started) * 1000.0, 3)

    parsed = _parse_arguments(arguments)
    if isinstance(parsed, str):
        logger.info("tool %s: rejected arguments (%s)", spec.name, parsed.split(":", 1)[0])
        return ToolResult.failure(spec.name, ERROR_VALIDATION, parsed, elapsed())
    problems = _validation_problems(spec, parsed)
    if problems:
        # Argument values may be secrets: log the argument names only.
        logger.info("tool %s: %d invalid argument(s); given: %s", spec.name, len(problems), sorted(parsed))
        message = f"invalid arguments for tool {spec.name!r}: " + "; ".join(problems)
        return ToolResult.failure(spec.name, ERROR_VALIDATION, message, elapsed())

    kwargs = dict(parsed)
    if spec.context_param:
        kwargs[spec.context_param] = ctx if ctx is not None else ToolContext()

    scope: asyncio.Timeout | None = None
    try:
        # asyncio.timeout rather than wait_for: it runs in this task, so a barge-in cancel is never
        # swallowed (the 3.11 wait_for race), and expired() tells our deadline from the tool's own
        # TimeoutError.
        async with asyncio.timeout(spec.timeout_s) as scope:
            value = spec.func(**kwargs)
            if inspect.isawaitable(value):
                value = await value
    except TimeoutError as exc:
        if scope is not None and scope.expired():
            logger.warning("tool %s timed out after %g s", spec.name, spec.timeout_s)
            return ToolResult.failure(
                spec.name,
                ERROR_TIMEOUT,
                f"tool {spec.name!r} timed out after {spec.timeout_s:g} s",
                elapsed(),
            )
        return _exception_result(spec, exc, parsed, elapsed())
    except ToolError as exc:
        logger.warning("tool %s failed: %s", spec.name, exc)
        return ToolResult.failure(spec.name, ERROR_FAILED, str(exc), elapsed())
    except Exception as exc:
        return _exception_result(spec, exc, parsed, elapsed())
    return ToolResult(name=spec.name, ok=True, result=_jsonable(value), duration_ms=elapsed())


def _exception_result(spec: ToolSpec, exc: Exception, arguments: dict, duration_ms: float) -> ToolResult:
    logger.exception(
        "tool %s raised %s; argument names: %s", spec.name, type(exc).__name__, sorted(arguments)
    )
    return ToolResult.failure(spec.name, ERROR_EXCEPTION, f"{type(exc).__name__}: {exc}", duration_ms)


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------


class ToolRegistry:
    """Name -> :class:`ToolSpec`; copy-on-write under a lock, so readers never see a half change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tools: dict[str, ToolSpec] = {}
        self._version = 0

    @property
    def version(self) -> int:
        """Increases on every change of the tool set."""
        return self._version

    def _commit(self, tools: dict[str, ToolSpec]) -> None:
        self._tools = tools
        self._version += 1

    def register(self, spec: ToolSpec, replace: bool = False) -> ToolSpec:
        if not isinstance(spec, ToolSpec):
            raise TypeError(f"expected a ToolSpec, got {type(spec).__name__}")
        with self._lock:
            if spec.name in self._tools and not replace:
                raise ValueError(f"tool {spec.name!r} is already registered")
            self._commit({**self._tools, spec.name: spec})
        logger.debug("registered tool %s (source=%s)", spec.name, spec.source)
        return spec

    def unregister(self, name: str) -> bool:
        """Remove ``name``; False if it was not registered."""
        with self._lock:
            if name not in self._tools:
                return False
            self._commit({n: s for n, s in self._tools.items() if n != name})
        return True

    def unregister_where(
        self,
        predicate: Callable[[ToolSpec], bool] | None = None,
        *,
        server: str | None = None,
        source: str | None = None,
    ) -> int:
        """Remove every tool matching all given filters (at least one); returns how many."""
        if predicate is None and server is None and source is None:
            raise ValueError("unregister_where needs a predicate, server= or source=")

        def matches(spec: ToolSpec) -> bool:
            return (
                (server is None or spec.server == server)
                and (source is None or spec.source == source)
                and (predicate is None or bool(predicate(spec)))
            )

        with self._lock:
            keep = {n: s for n, s in self._tools.items() if not matches(s)}
            removed = len(self._tools) - len(keep)
            if removed:
                self._commit(keep)
        return removed

    def sync(self, specs: Iterable[ToolSpec], where: Callable[[ToolSpec], bool]) -> bool:
        """Make the tools matching ``where`` exactly ``specs``, atomically (one version bump).

        Every spec must match ``where``; a name taken by a tool that does not match raises
        ``ValueError`` before anything changes. Returns whether anything changed.
        """
        incoming: dict[str, ToolSpec] = {}
        for spec in specs:
            if spec.name in incoming:
                raise ValueError(f"duplicate tool name {spec.name!r}")
            if not where(spec):
                raise ValueError(f"tool {spec.name!r} does not belong to the group being synced")
            incoming[spec.name] = spec
        with self._lock:
            for name in incoming:
                old = self._tools.get(name)
                if old is not None and not where(old):
                    raise ValueError(f"tool {name!r} is already registered (source={old.source})")
            tools = {n: s for n, s in self._tools.items() if not where(s) or n in incoming}
            changed = len(tools) != len(self._tools)
            for name, spec in incoming.items():
                if tools.get(name) != spec:
                    tools[name] = spec
                    changed = True
            if changed:
                self._commit(tools)
        return changed

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return list(self._tools.values())

    def specs_for(self, names: Iterable[str]) -> list[ToolSpec]:
        """The specs of ``names`` in order, without duplicates; unknown names are skipped."""
        tools = self._tools
        seen: set[str] = set()
        result = []
        for name in names:
            spec = tools.get(name)
            if spec is not None and name not in seen:
                seen.add(name)
                result.append(spec)
        return result

    def expand_names(self, names: Iterable[str]) -> list[str]:
        """An agent's tool list with each bare server name (MCP) replaced by all of that server's tools.

        A registered tool name wins over a server of the same name; unknown names stay (callers
        skip or report them). Order is kept, duplicates dropped.
        """
        tools = self._tools
        by_server: dict[str, list[str]] | None = None
        result: list[str] = []
        seen: set[str] = set()
        for name in names:
            expanded = [name]
            if name not in tools:
                if by_server is None:
                    by_server = {}
                    for spec in tools.values():
                        if spec.server:
                            by_server.setdefault(spec.server, []).append(spec.name)
                expanded = by_server.get(name, [name])
            for item in expanded:
                if item not in seen:
                    seen.add(item)
                    result.append(item)
        return result

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def tool(
        self,
        name: str | Callable[..., Any] | None = None,
        description: str | None = None,
        schema: dict | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        source: ToolSource = "builtin",
        server: str | None = None,
        replace: bool = False,
    ) -> Any:
        """Decorator registering an ``async def`` as a tool; usable bare (``@tool``) or called.

        The schema comes from the type hints and the docstring (first paragraph = description,
        ``Args:`` / ``:param x:`` = parameter descriptions) unless ``schema=`` is given. A ``ctx``
        parameter receives the :class:`ToolContext`. The function is returned unchanged.
        """

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            spec = tool_spec_from_function(
                fn,
                name=name if isinstance(name, str) else None,
                description=description,
                schema=schema,
                timeout_s=timeout_s,
                source=source,
                server=server,
            )
            self.register(spec, replace=replace)
            return fn

        if callable(name):
            return decorator(name)
        return decorator

    async def execute(
        self, name: str, arguments: Mapping[str, Any] | str | None, ctx: ToolContext | None = None
    ) -> ToolResult:
        """Run tool ``name``; errors come back as a :class:`ToolResult`, cancellation propagates."""
        spec = self._tools.get(name)
        if spec is None:
            logger.info("call of unknown tool %s", name)
            return ToolResult.failure(name, ERROR_UNKNOWN_TOOL, f"unknown tool {name!r}")
        return await execute_spec(spec, arguments, ctx)


REGISTRY = ToolRegistry()


def tool(
    name: str | Callable[..., Any] | None = None,
    description: str | None = None,
    schema: dict | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **kwargs: Any,
) -> Any:
    """:meth:`ToolRegistry.tool` on the default :data:`REGISTRY`."""
    return REGISTRY.tool(name, description, schema, timeout_s, **kwargs)


async def execute(
    name: str, arguments: Mapping[str, Any] | str | None, ctx: ToolContext | None = None
) -> ToolResult:
    """:meth:`ToolRegistry.execute` on the default :data:`REGISTRY`."""
    return await REGISTRY.execute(name, arguments, ctx)


# --------------------------------------------------------------------------------------------------
# Handoff tools
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _HandoffCall:
    """The function of a handoff tool; a value (not a closure) so re-registration is a no-op."""

    target_agent: str | None = None  # None: the generic tool, the model names the target

    async def __call__(self, reason: str = "", target_agent: str | None = None) -> dict:
        return {
            "handoff": True,
            "target_agent": self.target_agent if self.target_agent is not None else target_agent,
            "reason": reason or "",
        }


_REASON_SCHEMA = {"type": "string", "description": "Why the conversation is being transferred."}


def handoff_tool_specs(
    agents: Mapping[str, AgentSpec], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[ToolSpec]:
    """One tool per agent ``handoff.trigger`` plus the generic ``handoff_to_agent``.

    The tools only report the requested transfer; which handoff it is (and its type) is decided by
    :func:`resolve_handoff` with the active scenario's :class:`HandoffMap`. When two agents share a
    trigger, the first one (in mapping order) names the tool.
    """
    specs: dict[str, ToolSpec] = {}
    for key, agent in agents.items():
        trigger = agent.handoff_trigger
        if not trigger:
            continue
        agent_name = agent.name or key
        if trigger == GENERIC_HANDOFF_TOOL:
            logger.warning("agent %s: handoff trigger %s is the generic tool; ignored", agent_name, trigger)
            continue
        if trigger in specs:
            logger.warning(
                "agents %s and %s share the handoff trigger %s",
                specs[trigger].func.target_agent,  # type: ignore[attr-defined]
                agent_name,
                trigger,
            )
            continue
        if not TOOL_NAME_RE.match(trigger):
            where = f" ({agent.origin})" if agent.origin else ""
            raise ValueError(
                f"agent {agent_name!r}{where}: handoff trigger {trigger!r} is not a valid tool name "
                "(1-64 characters from A-Z a-z 0-9 _ -)"
            )
        description = f"Transfer the conversation to {agent_name}"
        description += f": {agent.description.strip()}" if agent.description.strip() else "."
        specs[trigger] = ToolSpec(
            name=trigger,
            description=description,
            parameters={
                "type": "object",
                "properties": {"reason": dict(_REASON_SCHEMA)},
                "required": [],
                "additionalProperties": False,
            },
            func=_HandoffCall(agent_name),
            timeout_s=timeout_s,
            source=HANDOFF_SOURCE,
        )
    generic = ToolSpec(
        name=GENERIC_HANDOFF_TOOL,
        description="Transfer the conversation to another agent, named by target_agent.",
        parameters={
            "type": "object",
            "properties": {
                "target_agent": {"type": "string", "description": "Name of the agent to transfer to."},
                "reason": dict(_REASON_SCHEMA),
            },
            "required": ["target_agent"],
            "additionalProperties": False,
        },
        func=_HandoffCall(None),
        timeout_s=timeout_s,
        source=HANDOFF_SOURCE,
    )
    return [*specs.values(), generic]


def register_handoff_tools(registry: ToolRegistry, agents: Mapping[str, AgentSpec]) -> list[str]:
    """Make ``registry``'s handoff tools match ``agents``: idempotent, removes stale triggers.

    Raises ``ValueError`` (changing nothing) when a trigger collides with a non-handoff tool.
    Returns the names of the handoff tools now registered.
    """
    specs = handoff_tool_specs(agents)
    registry.sync(specs, where=lambda spec: spec.source == HANDOFF_SOURCE)
    return [spec.name for spec in specs]


def resolve_handoff(
    handoff_map: HandoffMap,
    from_agent: str,
    tool_name: str,
    arguments: Mapping[str, Any] | str | None = None,
) -> HandoffSpec | None:
    """The handoff ``tool_name`` performs from ``from_agent`` in this scenario, or ``None``.

    The generic tool takes its target from ``arguments["target_agent"]``; the type (announced /
    discrete) comes from the scenario's edge (see :meth:`HandoffMap.resolve`).
    """
    if not handoff_map.is_handoff_tool(tool_name):
        return None
    target: str | None = None
    if tool_name == GENERIC_HANDOFF_TOOL:
        parsed = _parse_arguments(arguments)
        value = parsed.get("target_agent") if isinstance(parsed, dict) else None
        target = value.strip() if isinstance(value, str) else None
    return handoff_map.resolve(from_agent, tool_name, target)
