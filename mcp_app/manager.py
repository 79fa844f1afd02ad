"""The MCP connection manager: the public face of MCP at runtime (views, admin, lifecycle, tests).

It owns one event loop in a daemon thread (``mcp-manager``, :mod:`mcp_app.loop_thread`), started
on first use (or by the ``core`` startup step) and stopped by the ``core`` cleanup. Every MCP
session, every health check and the cross-worker listener run on that loop; sync code calls
:meth:`McpManager.run`, async code on another loop awaits :meth:`McpManager.arun`. The
operations (``add``, ``ensure``, ``remove``, ``test``, ``call_tool``, ``check``, ``startup``,
``reload``, ``reconcile``) are coroutines to run there.

Where the parts live:

- :mod:`mcp_app.server_config` - :class:`ServerConfig`, what it takes to connect one server;
- :mod:`mcp_app.connection` - one session held by one owner task, transport detection
  (:mod:`mcp_app.transports` for stdio / SSE / streamable HTTP, :mod:`mcp_app.connection_auth`
  for bearer and OAuth credentials); :mod:`mcp_app.failures` names what went wrong;
- :mod:`mcp_app.servers` - the known servers, their connections and status;
- :mod:`mcp_app.registration` - their tools in the shared registry as ``<server>_<tool>``;
- :mod:`mcp_app.tool_calls` - a call, and when a lost one is repeated;
- :mod:`mcp_app.health` - the health states, pings, reconnects and reconcile;
- :mod:`mcp_app.change_feed` - notifying the other workers and applying their changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mcp_app import health
from mcp_app.change_feed import GROUP, ChangeFeed, default_layer
from mcp_app.connection import open_connection
from mcp_app.connection_auth import token_source
from mcp_app.failures import ServerError
from mcp_app.loop_thread import LoopThread
from mcp_app.registration import ToolRegistrar
from mcp_app.server_config import ServerConfig
from mcp_app.server_state import ServerState
from mcp_app.servers import ServerPool
from mcp_app.tool_calls import call_tool
from mcp_app.tools import assign_names, tool_records
from voiceagent.conversation.tools import REGISTRY, ToolRegistry
from voiceagent.observability import metrics

logger = logging.getLogger("mcp_app.manager")

T = TypeVar("T")


class McpManager:
    """This worker's MCP servers: connect, register their tools, call them, keep them healthy."""

    def __init__(
        self,
        registry: ToolRegistry = REGISTRY,
        store: Any = None,
        *,
        layer_factory: Callable[[], Any] | None = default_layer,
        group: str = GROUP,
        health_interval: float = health.HEALTH_INTERVAL,
    ):
        self.registry = registry
        self.layer_factory = layer_factory
        self.group = group
        self.health_interval = health_interval
        self.reconcile_grace = health.RECONCILE_GRACE_S
        self.instance_id = uuid.uuid4().hex
        self._runner = LoopThread("mcp-manager", self._start_background)
        self._tools = ToolRegistrar(registry, self, self.instance_id)
        self._pool = ServerPool(self._tools, self._runner.spawn, store)
        self._feed = ChangeFeed(group, self.instance_id, self._apply_change)
        self._background: list[asyncio.Task] = []

    @property
    def store(self) -> Any:
        """Where runtime servers, their status and OAuth tokens are kept (None: nowhere)."""
        return self._pool.store

    @store.setter
    def store(self, store: Any) -> None:
        self._pool.store = store

    @property
    def _states(self) -> dict[str, ServerState]:
        return self._pool.states

    @property
    def notifications_received(self) -> int:
        return self._feed.received

    # --- the loop thread ----------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._runner.loop

    @property
    def running(self) -> bool:
        return self._runner.running

    def start(self) -> None:
        """Start the loop thread and the background tasks (idempotent, thread-safe)."""
        self._runner.start()

    def _start_background(self) -> None:
        loop = asyncio.get_running_loop()
        rounds = health.run_rounds(lambda: self.health_interval, self._health_round)
        self._background.append(loop.create_task(rounds, name="mcp-health"))
        listener = self._feed.start(self.layer_factory)
        if listener is not None:
            self._background.append(listener)

    def stop(self, timeout: float = 15.0) -> None:
        """Close every session, unregister the tools, stop the loop thread (idempotent)."""
        if self._runner.stop(self._shutdown, timeout):
            self._feed.listening.clear()

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def _shutdown(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        self._runner.cancel_spawned()
        states = list(self._states.values())
        await asyncio.gather(*(self._pool.drop(s) for s in states), return_exceptions=True)
        self._tools.unregister_all()
        for s in states:
            s.registered = False
        self._states.clear()
        await self._feed.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the manager loop and wait for it (from any thread but the loop's)."""
        return self._runner.run(coro, timeout)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the manager loop from any loop (directly when already on it)."""
        return await self._runner.arun(coro)

    # --- read-only views (any thread) ---------------------------------------------------------
    def names(self) -> list[str]:
        return list(self._states)

    def has(self, name: str) -> bool:
        return name in self._states

    def records(self) -> list[dict]:
        return [s.record() for s in list(self._states.values())]

    def record(self, name: str) -> dict | None:
        state = self._states.get(name)
        return state.record() if state is not None else None

    def status_map(self) -> dict[str, dict]:
        """``{name: {"status", "tools_count"}}`` for ``/ready``."""
        return {
            s.config.name: {"status": s.status, "tools_count": len(s.names)}
            for s in list(self._states.values())
        }

    def tool_records(self, name: str) -> list[dict]:
        state = self._states.get(name)
        return tool_records(name, state.tools, state.names) if state is not None else []

    # --- operations (run these on the manager loop: run()/arun()) -----------------------------
    async def add(self, config: ServerConfig) -> dict:
        """Connect a NEW server, register its tools; the record. Nothing is kept on failure."""
        name = config.name
        if name in self._states:
            raise ServerError(f"An MCP server named {name!r} already exists; remove it first.", "duplicate")
        state = ServerState(config)
        self._states[name] = state
        try:
            await self._pool.connect(state)
        except BaseException:
            if self._states.get(name) is state:
                del self._states[name]
            await self._pool.drop(state)
            await self._pool.flush_writes()
            raise
        self._tools.register(state)
        self._pool.persist(state)
        await self._pool.flush_writes()
        return state.record()

    async def ensure(self, config: ServerConfig, *, reconnect: bool = False) -> dict:
        """Know ``config`` (replacing a different one of that name) and try to connect it.

        A failure leaves the server known and ``unhealthy``; its tools register when it connects.
        """
        name = config.name
        existing = self._states.get(name)
        if existing is not None and existing.config == config and not reconnect:
            if existing.conn is not None and existing.conn.alive:
                return existing.record()
            state = existing
        else:
            state = ServerState(config, registered=True)
            if existing is not None:
                state.names = dict(existing.names)  # keep the tools offered until the new list is in
                state.tools = list(existing.tools)
            self._states[name] = state
            if existing is not None:
                await self._pool.drop(existing)
        state.registered = True
        with contextlib.suppress(ServerError):
            await self._pool.connect(state)
        await self._pool.flush_writes()
        return state.record()

    async def remove(self, name: str) -> int:
        """Disconnect and forget ``name``; the number of tools unregistered."""
        state = self._states.pop(name, None)
        removed = self._tools.unregister(name)
        if state is not None:
            await self._pool.drop(state)
        if state is not None or removed:
            logger.info("MCP server %s removed (%d tools unregistered)", name, removed)
        return removed

    async def test(self, config: ServerConfig) -> tuple[str, list[dict]]:
        """Connect, initialize and list tools WITHOUT registering; ``(transport, tool records)``."""
        conn = await open_connection(config, config.transport, token_source(config))
        try:
            assigned = assign_names(config.name, [t.name for t in conn.tools])
            return conn.transport, tool_records(config.name, conn.tools, assigned)
        finally:
            await conn.close()

    async def call_tool(self, server: str, tool: str, arguments: dict, timeout: float | None = None) -> Any:
        """Call ``tool`` on ``server``; reconnect and retry ONCE on a lost session. Counted in the
        metrics by server and outcome (``ok``, ``tool_error``, the failure's kind, ``cancelled``,
        ``error``)."""
        outcome = "error"
        try:
            result = await call_tool(self._pool, server, tool, arguments, timeout)
            outcome = "tool_error" if getattr(result, "isError", False) else "ok"
            return result
        except ServerError as exc:
            outcome = exc.kind
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            metrics.mcp_call(server, outcome)

    async def check(self, name: str) -> str:
        """Health check one server: ping (or connect); returns the resulting status."""
        return await health.check(self._pool, name)

    async def check_all(self) -> dict[str, str]:
        return await health.check_all(self._pool)

    async def refresh_tools(self, name: str) -> None:
        """Re-list a connected server's tools (``tools/list_changed``) and re-sync the registry."""
        await self._pool.refresh_tools(name)

    async def startup(self, configs: list[ServerConfig]) -> dict[str, dict]:
        """Connect every configured server concurrently; failures are logged, never raised."""
        states = []
        for config in configs:
            existing = self._states.get(config.name)
            if existing is not None and existing.config == config:
                states.append(existing)
                continue
            state = ServerState(config, registered=True)
            self._states[config.name] = state
            states.append(state)
        await asyncio.gather(*(self._startup_one(s) for s in states))
        await self._pool.flush_writes()
        return {s.config.name: s.record() for s in states}

    async def _startup_one(self, state: ServerState) -> None:
        cfg = state.config
        try:
            await self._pool.connect(state)
        except ServerError as exc:
            if cfg.required:
                logger.error(
                    "required MCP server %s failed validation: %s; the service continues", cfg.name, exc
                )
            else:
                logger.warning(
                    "optional MCP server %s failed validation: %s; the service continues", cfg.name, exc
                )
            return
        except Exception as exc:  # pragma: no cover - classify() covers the known failures
            self._pool.set_status(state, "unhealthy", f"{type(exc).__name__}: {exc}")
            logger.exception("MCP server %s: unexpected failure", cfg.name)
            return
        self._tools.register(state)
        self._pool.persist(state)

    async def reload(self, name: str, *, reconnect: bool = True) -> dict | None:
        """Re-read ``name`` from the store and apply it: (re)connect with that config, or remove it
        if gone. ``reconnect=False`` keeps a live connection whose configuration did not change."""
        if self.store is None:
            return self.record(name)
        config = await asyncio.to_thread(self.store.load, name)
        if config is None:
            await self.remove(name)
            return None
        return await self.ensure(config, reconnect=reconnect)

    # --- health and the other workers ---------------------------------------------------------
    async def reconcile(self) -> None:
        """Make the runtime servers in memory match the database (repairs missed notifications)."""
        await health.reconcile(self._pool, self.reconcile_grace, self.ensure, self.remove)

    async def _health_round(self) -> None:
        await self.reconcile()
        await self.check_all()

    async def notify(self, name: str, action: str) -> bool:
        """Tell the other workers that ``name`` was ``added`` / ``updated`` / ``removed``."""
        return await self._feed.notify(name, action)

    def wait_listening(self, timeout: float = 5.0) -> bool:
        return self._feed.listening.wait(timeout)

    async def _apply_change(self, name: str, action: str) -> None:
        if action == "removed":
            await self.remove(name)
        else:  # "updated" (new tokens, admin edit) always reconnects; "added" only if needed
            await self.reload(name, reconnect=action != "added")


# --------------------------------------------------------------------------------------------------
# The process's manager
# --------------------------------------------------------------------------------------------------

_manager: McpManager | None = None
_manager_lock = threading.Lock()


def get_manager() -> McpManager:
    """The process-wide manager (created on first use, with the database store)."""
    global _manager
    with _manager_lock:
        if _manager is None:
            from mcp_app.store import DbStore

            _manager = McpManager(store=DbStore())
        return _manager


def set_manager(manager: McpManager | None) -> McpManager | None:
    """Replace the process-wide manager (tests); returns the previous one."""
    global _manager
    with _manager_lock:
        previous, _manager = _manager, manager
        return previous
