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

The package is split by job: :mod:`.values` (the value types), :mod:`.schema` (a spec from a
function), :mod:`.execution` (validate and run one call), :mod:`.registry` and :mod:`.handoff`;
this ``__init__`` is the public face every caller imports from.
"""

from __future__ import annotations

from .execution import execute_spec
from .handoff import handoff_tool_specs, register_handoff_tools, resolve_handoff
from .registry import REGISTRY, ToolRegistry, execute, tool
from .schema import parse_docstring, tool_spec_from_function
from .values import (
    DEFAULT_TIMEOUT_S,
    ERROR_EXCEPTION,
    ERROR_FAILED,
    ERROR_TIMEOUT,
    ERROR_UNKNOWN_TOOL,
    ERROR_VALIDATION,
    HANDOFF_SOURCE,
    TOOL_NAME_RE,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
)

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
