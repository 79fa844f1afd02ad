"""The tool registry: name -> :class:`ToolSpec`, changed copy-on-write with a version that a
conversation checks each turn, plus the default :data:`REGISTRY` and its module-level
:func:`tool` decorator and :func:`execute`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .execution import execute_spec
from .schema import tool_spec_from_function
from .values import DEFAULT_TIMEOUT_S, ERROR_UNKNOWN_TOOL, ToolContext, ToolResult, ToolSource, ToolSpec

logger = logging.getLogger(__name__)


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
