"""An MCP server's tools in the shared tool registry, as ``<server>_<tool>``.

Each registered tool's ``func`` is an :class:`McpToolCall` that runs the call on the manager's
loop; a manager recognises its own tools by its ``instance_id``, so tests with several managers on
one registry (and the built-in tools) are never touched. Tools stay registered while their server
is unhealthy and are re-synced on every (re)connect and ``tools/list_changed``; the registry's
version bumps only when something changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_app.failures import ServerError
from mcp_app.server_state import ServerState
from mcp_app.tools import MCP_SOURCE, assign_names, parameters_schema, result_value
from voiceagent.conversation.tools import ToolError, ToolRegistry, ToolSpec
from voiceagent.observability import tracing

logger = logging.getLogger("mcp_app.registration")


class ToolCaller(Protocol):
    """What a registered tool needs of the manager: its loop and its call."""

    async def arun(self, coro: Coroutine[Any, Any, Any]) -> Any: ...

    async def call_tool(
        self, server: str, tool: str, arguments: dict, timeout: float | None = None
    ) -> Any: ...


@dataclass(frozen=True, eq=True)
class McpToolCall:
    """The ``func`` of a registered MCP tool: calls ``tool`` on ``server`` through the manager."""

    manager: ToolCaller = field(compare=False, hash=False, repr=False)
    manager_id: str
    server: str
    tool: str
    timeout: float

    async def __call__(self, /, **arguments: Any) -> Any:
        try:
            with tracing.mcp_call(self.server, self.tool):  # on the caller's side: its session's trace
                result = await self.manager.arun(
                    self.manager.call_tool(self.server, self.tool, arguments, self.timeout)
                )
        except ServerError as exc:  # unreachable, lost, refused: the server's trouble, told to the model
            raise ToolError(exc.public, detail=exc.message) from None  # its address: the log's only
        return result_value(result)


class ToolRegistrar:
    """Registers and unregisters one manager's MCP tools in ``registry``."""

    def __init__(self, registry: ToolRegistry, caller: ToolCaller, instance_id: str):
        self.registry = registry
        self.caller = caller
        self.instance_id = instance_id

    def owns(self, spec: ToolSpec) -> bool:
        return isinstance(spec.func, McpToolCall) and spec.func.manager_id == self.instance_id

    def _owns_server(self, name: str) -> Callable[[ToolSpec], bool]:
        return lambda s: self.owns(s) and s.server == name

    def register(self, state: ServerState) -> list[str]:
        """Sync the registry with ``state.tools``; the prefixed names now registered."""
        name = state.config.name
        assigned = assign_names(name, [t.name for t in state.tools])
        by_tool = {t.name: t for t in state.tools}
        specs: list[ToolSpec] = []
        names: dict[str, str] = {}
        for prefixed, tool_name in assigned.items():
            other = self.registry.get(prefixed)
            if other is not None and not (self.owns(other) and other.server == name):
                logger.warning(
                    "MCP server %s: tool %s not registered: the name is taken by a %s tool",
                    name,
                    prefixed,
                    other.source,
                )
                continue
            tool = by_tool[tool_name]
            try:
                spec = ToolSpec(
                    name=prefixed,
                    description=(tool.description or tool.title or tool_name)[:1024],
                    parameters=parameters_schema(tool.inputSchema, prefixed),
                    func=McpToolCall(self.caller, self.instance_id, name, tool_name, state.config.timeout),
                    timeout_s=state.config.timeout,
                    source=MCP_SOURCE,
                    server=name,
                )
            except (ValueError, TypeError) as exc:
                logger.warning("MCP server %s: tool %s not registered: %s", name, prefixed, exc)
                continue
            specs.append(spec)
            names[prefixed] = tool_name
        try:
            changed = self.registry.sync(specs, where=self._owns_server(name))
        except ValueError as exc:  # a name was taken between the check and the sync
            logger.warning("MCP server %s: tools not registered: %s", name, exc)
            return list(state.names)
        state.names = names
        state.registered = True
        if changed:
            logger.info("MCP server %s: %d tools registered", name, len(names))
        return list(names)

    def unregister(self, name: str) -> int:
        """Remove server ``name``'s tools; how many there were."""
        return self.registry.unregister_where(predicate=self._owns_server(name))

    def unregister_all(self) -> None:
        self.registry.unregister_where(predicate=self.owns)
