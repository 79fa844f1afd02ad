"""Running one tool call: parse and validate the model's arguments, inject the context, enforce
the timeout, and turn every failure into a :class:`ToolResult` (only cancellation propagates, so
a barge-in still stops a running tool).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from .values import (
    ERROR_EXCEPTION,
    ERROR_FAILED,
    ERROR_TIMEOUT,
    ERROR_VALIDATION,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
)

logger = logging.getLogger(__name__)


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data; leaves that are not serialisable become ``str(leaf)``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return str(value)


def parse_arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any] | str:
    """The argument dict, or an error message (shared with :func:`..handoff.resolve_handoff`)."""
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

    parsed = parse_arguments(arguments)
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
        logger.warning("tool %s failed: %s", spec.name, getattr(exc, "detail", exc))
        return ToolResult.failure(spec.name, ERROR_FAILED, str(exc), elapsed())
    except Exception as exc:
        return _exception_result(spec, exc, parsed, elapsed())
    return ToolResult(name=spec.name, ok=True, result=_jsonable(value), duration_ms=elapsed())


def _exception_result(spec: ToolSpec, exc: Exception, arguments: dict, duration_ms: float) -> ToolResult:
    logger.exception(
        "tool %s raised %s; argument names: %s", spec.name, type(exc).__name__, sorted(arguments)
    )
    return ToolResult.failure(spec.name, ERROR_EXCEPTION, f"{type(exc).__name__}: {exc}", duration_ms)
