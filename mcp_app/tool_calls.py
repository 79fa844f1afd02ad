"""One MCP tool call, with the rule for repeating it once after a lost session.

A lost session (streamable HTTP's 404 "Session not found" after a server restart, a broken SSE
stream, a closed stdio pipe, a refused connection) is reconnected and the call retried ONCE -
unless the connection broke after the request left over the network, the server may have run it,
and the tool is not marked read-only or idempotent: repeating a payment or a booking is worse
than failing. A local (stdio) child that died is almost always found dead at the next call, so
that one is repeated.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from mcp.shared.exceptions import McpError

from mcp_app.connection import Connection
from mcp_app.failures import ServerError, SessionLost, classify
from mcp_app.servers import ServerPool

logger = logging.getLogger("mcp_app.tool_calls")


def safe_to_repeat(conn: Connection, tool: str) -> bool:
    """Whether the server marks ``tool`` read-only or idempotent (MCP tool annotations)."""
    spec = next((t for t in conn.tools if t.name == tool), None)
    notes = spec.annotations if spec is not None else None
    return bool(notes is not None and (notes.readOnlyHint or notes.idempotentHint))


async def call_tool(
    pool: ServerPool, server: str, tool: str, arguments: dict, timeout: float | None = None
) -> Any:
    """Call ``tool`` on ``server``; reconnect and retry ONCE on a lost session."""
    state = pool.states.get(server)
    if state is None:
        raise ServerError(f"MCP server {server!r} is not connected (was it removed?)", "unknown")
    read_timeout = timedelta(seconds=timeout or state.config.timeout)
    for attempt in (1, 2):
        conn = state.conn
        if conn is None or not conn.alive:
            conn = await pool.connect(state)
        try:
            result = await conn.request(
                lambda s: s.call_tool(tool, arguments, read_timeout_seconds=read_timeout)
            )
        except SessionLost as exc:
            if not pool.current(state):
                raise ServerError(f"MCP server {server!r} was removed", "unknown") from None
            await pool.drop(state, conn)
            may_have_run = exc.maybe_ran and state.config.transport != "stdio"
            if attempt == 1 and not (may_have_run and not safe_to_repeat(conn, tool)):
                logger.info("MCP server %s: session lost (%s); reconnecting and retrying once", server, exc)
                continue
            if attempt == 1:  # it may have run: not repeated
                await pool.connect(state)  # a server that is gone is "unreachable", as for any call
                logger.warning(
                    "MCP server %s: connection lost during %s (%s); not repeated", server, tool, exc
                )
                raise ServerError(
                    f"MCP server {server!r} lost the connection during {tool!r}, which may have run: "
                    "not repeated, as the tool is not marked read-only or idempotent",
                    "lost",
                    maybe_ran=True,
                ) from None
            error = ServerError(f"MCP server {server!r} lost the session again: {exc}", "lost")
            pool.set_status(state, "unhealthy", error.message)
            raise error from None
        except McpError as exc:
            raise classify(exc, state.config) from None
        if state.status != "healthy":
            pool.set_status(state, "healthy", None)
        return result
    raise AssertionError("unreachable")  # pragma: no cover
