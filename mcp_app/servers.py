"""The servers one worker knows, each with at most one live connection and a health status.

:class:`ServerPool` is the only place that connects a server, drops its connection, changes its
status and writes that status to the store, so the health checks, the tool calls and the
manager's operations all move a server between states the same way (see :mod:`mcp_app.health`
for the states).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from mcp_app.connection import Connection, list_all_tools, open_connection
from mcp_app.connection_auth import token_source
from mcp_app.failures import ServerError
from mcp_app.registration import ToolRegistrar
from mcp_app.server_state import ServerState

logger = logging.getLogger("mcp_app.servers")

Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task]


class ServerPool:
    """Per-server state, connections and status; runs on the manager loop."""

    def __init__(self, tools: ToolRegistrar, spawn: Spawn, store: Any = None):
        self.tools = tools
        self.store = store
        self.states: dict[str, ServerState] = {}
        self._spawn = spawn
        self._writes: set[asyncio.Task] = set()

    def current(self, state: ServerState) -> bool:
        """Whether ``state`` is still the one known under its name (not removed or replaced)."""
        return self.states.get(state.config.name) is state

    # --- status ------------------------------------------------------------------------------
    def set_status(self, state: ServerState, status: str, error: str | None) -> None:
        state.checked_at = time.time()
        changed = (state.status, state.error) != (status, error)
        previous = state.status
        state.status, state.error = status, error
        if not changed:
            return
        if status == "healthy":
            logger.info(
                "MCP server %s: %s -> healthy (%d tools, %s)",
                state.config.name,
                previous,
                len(state.tools),
                state.transport_used,
            )
        elif status == "unhealthy":
            logger.warning("MCP server %s: %s -> unhealthy: %s", state.config.name, previous, error)
        if self.current(state):
            self.persist(state)

    def persist(self, state: ServerState) -> None:
        """Write the state's status and tool names to the store, off the loop, in the background."""
        if self.store is None:
            return
        store = self.store
        values = {
            "status": state.status,
            "error": state.error or "",
            "tool_names": list(state.names),
            "transport": state.transport_used,
            "connected": state.status == "healthy",
        }
        name = state.config.name

        async def save() -> None:
            try:
                await asyncio.to_thread(store.save_state, name, **values)
            except Exception as exc:
                logger.debug("MCP server %s: state not stored: %s", name, exc)

        task = self._spawn(save(), f"mcp-persist-{name}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def flush_writes(self) -> None:
        """Wait for pending state writes, so a caller's next database write never races them."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    # --- connecting --------------------------------------------------------------------------
    async def connect(self, state: ServerState) -> Connection:
        """The live connection of ``state``, connecting if needed; sets the status."""
        async with state.lock:
            conn = state.conn
            if conn is not None and conn.alive:
                return conn
            cfg = state.config
            if cfg.config_error:
                error = ServerError(f"MCP server {cfg.name!r} is misconfigured: {cfg.config_error}", "config")
                self.set_status(state, "unhealthy", error.message)
                raise error
            if state.token_source is None:
                state.token_source = token_source(cfg, self.store)
            name = cfg.name
            try:
                conn = await open_connection(
                    cfg,
                    state.transport_used or cfg.transport,
                    state.token_source,
                    lambda: self._spawn(self.refresh_tools(name), f"mcp-tools-{name}"),
                )
            except ServerError as exc:
                self.set_status(state, "unhealthy", exc.message)
                raise
            if not self.current(state):  # removed while connecting
                await conn.close()
                raise ServerError(f"MCP server {name!r} was removed", "unknown")
            state.conn = conn
            assert conn.lost is not None
            conn.lost.add_done_callback(
                lambda lost: self._lost(state, conn, lost), context=contextvars.Context()
            )
            state.transport_used = conn.transport
            state.tools = list(conn.tools)
            state.connected_at = time.time()
            if state.registered:
                self.tools.register(state)
            self.set_status(state, "healthy", None)
            return conn

    def _lost(self, state: ServerState, conn: Connection, lost: asyncio.Future) -> None:
        """A connection went away under us (the server died or closed, a stdio child exited): the
        server is unhealthy NOW - one WARNING - and the next call or health round reconnects."""
        if conn.closing or state.conn is not conn or not self.current(state):
            return
        reason = lost.result() if not lost.cancelled() else None
        if isinstance(reason, ServerError):
            why = reason.message
        else:
            where = "its process exited" if state.config.transport == "stdio" else "the connection was lost"
            why = f"MCP server {state.config.name!r}: {where}" + (f" ({reason})" if reason else "")
        self.set_status(state, "unhealthy", why)
        self._spawn(self.drop(state, conn), f"mcp-drop-{state.config.name}")

    async def drop(self, state: ServerState, conn: Connection | None = None) -> None:
        """Close the state's connection (only ``conn``, if given and still current)."""
        current = state.conn
        if conn is not None and current is not conn:
            return
        state.conn = None
        if current is not None:
            await current.close()

    async def refresh_tools(self, name: str) -> None:
        """Re-list a connected server's tools (``tools/list_changed``) and re-sync the registry."""
        state = self.states.get(name)
        if state is None or state.conn is None or not state.conn.alive:
            return
        try:
            state.tools = await state.conn.request(list_all_tools)
        except Exception as exc:
            logger.info("MCP server %s: tool list refresh failed: %s", name, type(exc).__name__)
            return
        if state.registered:
            self.tools.register(state)
            self.persist(state)
