"""MCP tools as registry tools: names, schemas, results, and agent tool-list expansion.

Pure Python (no Django), so the engine may import :func:`expand_tool_names`.

- A server's tool ``t`` is registered as ``<server>_<t>``, sanitised to ``[A-Za-z0-9_-]`` and cut
  to 64 characters (with a short hash of the full name when cut, so two long names never clash).
- The MCP ``inputSchema`` is kept as the tool's parameters (made an ``object`` schema if the
  server left ``type`` out; a schema the validator rejects is replaced by a permissive one, and
  the server validates the arguments itself).
- :func:`expand_tool_names` lets an agent list a bare server name to get all its tools.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from voiceagent.conversation.tools import TOOL_NAME_RE, ToolError, ToolRegistry

logger = logging.getLogger("mcp_app.tools")

MCP_SOURCE = "mcp"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PERMISSIVE = {"type": "object", "properties": {}, "additionalProperties": True}


def prefixed_name(server: str, tool: str) -> str:
    """``<server>_<tool>`` made a valid registry name (1-64 of ``A-Z a-z 0-9 _ -``)."""
    full = f"{server}_{tool}"
    clean = _UNSAFE.sub("_", full)
    if len(clean) <= 64:
        return clean
    return f"{clean[:55]}_{_digest(full)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def assign_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """``{prefixed name: tool name}`` for one server's tools, unique even after sanitising."""
    result: dict[str, str] = {}
    for tool in tools:
        name = prefixed_name(server, tool)
        if name in result:  # two tool names that sanitise to the same string
            name = f"{name[:55]}_{_digest(f'{server}_{tool}')}"
        if not TOOL_NAME_RE.match(name):  # pragma: no cover - prefixed_name guarantees it
            continue
        result[name] = tool
    return result


def parameters_schema(input_schema: dict | None, where: str = "") -> dict:
    """The registry schema for an MCP ``inputSchema``."""
    if not isinstance(input_schema, dict):
        return copy.deepcopy(_PERMISSIVE)
    schema = copy.deepcopy(input_schema)
    if schema.get("type") is None:
        schema["type"] = "object"
    if schema.get("type") != "object":
        logger.warning("MCP tool %s: input schema is not an object schema; accepting any arguments", where)
        return copy.deepcopy(_PERMISSIVE)
    schema.setdefault("properties", {})
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        logger.warning("MCP tool %s: invalid input schema (%s); accepting any arguments", where, exc.message)
        return copy.deepcopy(_PERMISSIVE)
    return schema


def tool_record(server: str, prefixed: str, tool: Any) -> dict:
    """The spec's "MCP tool record" for an ``mcp.types.Tool``."""
    schema = tool.inputSchema if isinstance(tool.inputSchema, dict) else {}
    return {
        "name": tool.name,
        "prefixed_name": prefixed,
        "description": tool.description or "",
        "server_name": server,
        "input_schema": {
            "type": schema.get("type", "object"),
            "properties": schema.get("properties", {}),
            "required": schema.get("required", []),
            **{k: v for k, v in schema.items() if k not in ("type", "properties", "required")},
        },
    }


def tool_records(server: str, tools: Iterable[Any], names: dict[str, str]) -> list[dict]:
    """The tool records of ``names`` (``{prefixed: tool name}``) among a server's ``tools``."""
    by_tool = {t.name: t for t in tools}
    return [tool_record(server, p, by_tool[t]) for p, t in names.items() if t in by_tool]


class McpToolError(ToolError):
    """The MCP server answered the call with ``isError`` (the model is told; not a bug of ours)."""


def result_value(result: Any) -> Any:
    """What the model sees from a ``CallToolResult``: structured content, else the text (parsed when
    it is one JSON document), else the content blocks."""
    if result.isError:
        text = "\n".join(getattr(c, "text", "") for c in result.content if getattr(c, "type", "") == "text")
        raise McpToolError(text or "the MCP tool reported an error")
    if result.structuredContent is not None:
        return result.structuredContent
    blocks = list(result.content)
    if all(getattr(c, "type", "") == "text" for c in blocks):
        text = "\n".join(c.text for c in blocks)
        if len(blocks) == 1 and text[:1] in "{[":
            try:  # a JSON document sent as text: hand the model the value, not a quoted string
                return json.loads(text)
            except ValueError:
                pass
        return text
    return [c.model_dump(mode="json", exclude_none=True) for c in blocks]


def expand_tool_names(names: Iterable[str], registry: ToolRegistry) -> list[str]:
    """An agent's tool list with each bare MCP server name replaced by all of that server's tools
    (see :meth:`ToolRegistry.expand_names`, which the engine uses)."""
    return registry.expand_names(names)
