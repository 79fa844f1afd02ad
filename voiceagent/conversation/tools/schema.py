"""A :class:`ToolSpec` from a plain ``async def``: the description and parameter texts from its
docstring (Google ``Args:`` or Sphinx ``:param:``), the JSON schema from its type hints.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from .values import DEFAULT_TIMEOUT_S, ToolContext, ToolFunc, ToolSource, ToolSpec

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
