"""The MCP connection manager: one owner task per server session, on one long-lived event loop.

Where the sessions live
-----------------------
The manager runs its own event loop in a daemon thread (``mcp-manager``), started on first use
(or by the ``core`` startup step) and stopped by the ``core`` cleanup. Every MCP session, every
health check and the cross-worker listener run on that loop; everything else reaches it through
``asyncio.run_coroutine_threadsafe``:

- sync code (DRF views, admin, management commands, tests with Django's test client) calls
  :meth:`McpManager.run`, which blocks the calling thread, never the loop;
- async code on another loop (the ASGI server's loop, a conversation's tool call, lifecycle
  hooks) awaits :meth:`McpManager.arun` (``asyncio.wrap_future``; cancelling the caller cancels
  the work on the manager loop, so a barge-in still stops a running tool call).

Why not the ASGI server's loop: it does not exist under WSGI, in management commands or in tests,
and ``async_to_sync`` creates a fresh loop per call, while an MCP session must stay on ONE
long-lived loop (its transport tasks and anyio cancel scopes are bound to the task that opened
them). One dedicated loop behaves the same everywhere, keeps MCP stream traffic off the audio
loop, and costs one thread hop per tool call (measured by ``bench/bench_mcp.py``).

One owner task per connection
-----------------------------
:class:`_Connection` starts a task that enters the transport context (streamable HTTP with an
``httpx.AsyncClient`` carrying the headers, bearer/OAuth auth and timeouts; SSE; or stdio with an
explicit environment), then the ``ClientSession``; initializes and lists every tool page
(cursor) under ONE deadline (the server's ``timeout``: ``initialize`` can hang); then waits on a
stop event and exits the contexts itself. Requests from other tasks use the session directly
(same loop) and race the request against the connection's ``lost`` future, so a dead transport
fails the call at once instead of at the read timeout.

Lost sessions (streamable HTTP's 404 "Session not found" after a server restart, a broken SSE
stream, a closed stdio pipe, a refused connection): the call reconnects and is retried ONCE.

Transport detection: ``transport`` omitted -> streamable HTTP first; when that answers with an
HTTP 4xx other than 401/403 (or 404 on initialize), SSE (the MCP backwards-compatibility rule).
The transport that worked is reported and remembered.

Health states (``status`` of a server)
--------------------------------------
- ``unknown``: configured, no connection attempted yet (environment servers before startup step
  8 reaches them, runtime servers loaded from the database before their first connect).
- ``unknown`` -> ``healthy``: ``initialize`` and the complete tool listing succeeded.
- ``unknown``/``healthy`` -> ``unhealthy`` (``error`` set): a connect failed or timed out, the
  server refused our credentials (401/403, OAuth refresh impossible), a ping failed and the one
  reconnect that follows failed too, or a tool call failed on a lost session and its one
  reconnect-and-retry failed.
- ``unhealthy`` -> ``healthy`` (``error`` cleared): a later connect, ping or call succeeds. The
  health loop pings every connected server every ``health_interval`` seconds (default 30) and
  tries to reconnect every unhealthy one, so a server that comes back turns healthy without
  anyone calling it.
- A tool that answers ``isError`` or times out does NOT change the status (the server is up).
- Tools stay registered while a server is unhealthy (calls fail fast with a clear error and
  trigger the reconnect), so conversations do not see tools flap; they go away only when the
  server is removed. A reconnect re-lists the tools and re-syncs the registry (version bumps only
  if something changed); a ``notifications/tools/list_changed`` from the server does the same.

Several workers
---------------
The database (:class:`mcp_app.models.McpServer`) is the shared truth. After a worker adds,
updates (OAuth callback, admin edit) or removes a runtime server it sends
``{"type": "mcp.changed", "name", "action": "added"|"updated"|"removed", "origin"}`` to the
channel-layer group ``mcp``. Each manager runs a listener task on its loop, with its OWN layer
instance (``channel_layers.make_backend``: a layer may only ``receive`` on one loop): it
subscribes with ``new_channel()`` + ``group_add`` (renewed hourly, before the group expiry) and,
for messages from other workers, reloads the row and reconnects (added/updated) or disconnects and
unregisters (removed). A missed message is repaired by the health loop, which also reconciles the
runtime servers in memory with the database rows. With the in-memory channel layer (one process)
there is nobody to notify and the listener does not run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

import anyio
import httpx
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from mcp_app.breakwatch import BreakWatch, install_log_filter
from mcp_app.oauth import BearerAuth, OAuthError, OAuthTokens, TokenSource
from mcp_app.security import public_url
from mcp_app.server_config import ServerConfig
from mcp_app.tools import MCP_SOURCE, assign_names, parameters_schema, result_value, tool_record
from voiceagent.conversation.tools import REGISTRY, ToolError, ToolRegistry, ToolSpec
from voiceagent.logging import redact, register_secrets

logger = logging.getLogger("mcp_app.manager")
install_log_filter()  # a late reply for a closed session is no error (mcp_app.breakwatch)

T = TypeVar("T")
SSE_READ_TIMEOUT = 300.0
HEALTH_INTERVAL = 30.0
PING_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
GROUP = "mcp"
GROUP_RENEW_S = 3600.0
RECONCILE_GRACE_S = 10.0
CLIENT_INFO = types.Implementation(name="voiceagent", version="1.0")
SESSION_TERMINATED = 32600  # what the SDK reports for streamable HTTP's 404 "Session not found"


# --------------------------------------------------------------------------------------------------
# Configuration and errors
# --------------------------------------------------------------------------------------------------


class ServerError(Exception):
    """A server operation failed. ``kind``: ``unknown`` (no such server), ``duplicate``,
    ``config``, ``unreachable``, ``timeout``, ``auth``, ``protocol``, ``lost``."""

    def __init__(self, message: str, kind: str):
        super().__init__(redact(message))
        self.kind = kind

    @property
    def message(self) -> str:
        return str(self)


class _Lost(Exception):
    """The session under a request went away (retry once on a fresh one). ``maybe_ran``: it went
    away after the request left, so the server may have run it - a tool call is then repeated only
    when the tool says it is safe to (read-only or idempotent)."""

    def __init__(self, message: str, *, maybe_ran: bool = False):
        super().__init__(message)
        self.maybe_ran = maybe_ran


def _safe_to_repeat(conn: Any, tool: str) -> bool:
    """Whether the server marks ``tool`` read-only or idempotent (MCP tool annotations)."""
    spec = next((t for t in conn.tools if t.name == tool), None)
    notes = spec.annotations if spec is not None else None
    return bool(notes is not None and (notes.readOnlyHint or notes.idempotentHint))


def _leaves(exc: BaseException):
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc
        if exc.__cause__ is not None and not isinstance(exc, ServerError | OAuthError):
            yield from _leaves(exc.__cause__)


def _is_lost_mcp_error(exc: BaseException) -> bool:
    return isinstance(exc, McpError) and exc.error.code in (SESSION_TERMINATED, types.CONNECTION_CLOSED)


def classify(exc: BaseException, config: ServerConfig) -> ServerError:
    """A :class:`ServerError` with a one-line reason for any failure of connect or call."""
    if isinstance(exc, ServerError):
        return exc
    where = config.where
    leaves = [e for e in _leaves(exc) if not isinstance(e, asyncio.CancelledError)] or [exc]
    for leaf in leaves:
        if isinstance(leaf, OAuthError):
            kind = "unreachable" if leaf.kind == "unreachable" else "auth"
            return ServerError(f"MCP server {config.name!r}: OAuth: {leaf}", kind)
    for leaf in leaves:
        if isinstance(leaf, httpx.HTTPStatusError):
            code = leaf.response.status_code
            if code in (401, 403):
                return ServerError(
                    f"MCP server {config.name!r} refused our credentials (HTTP {code}): the token is expired "
                    "or invalid",
                    "auth",
                )
            return ServerError(f"MCP server {config.name!r} at {where} answered HTTP {code}", "protocol")
    for leaf in leaves:
        if isinstance(leaf, httpx.TimeoutException | TimeoutError):
            return ServerError(
                f"MCP server {config.name!r} at {where} did not answer within {config.timeout:g} s", "timeout"
            )
        if isinstance(leaf, httpx.TransportError | OSError):
            reason = str(leaf) or type(leaf).__name__
            return ServerError(
                f"MCP server {config.name!r} at {where} is unreachable: {reason}", "unreachable"
            )
    for leaf in leaves:
        if _is_lost_mcp_error(leaf) or isinstance(
            leaf, _Lost | anyio.ClosedResourceError | anyio.BrokenResourceError
        ):
            return ServerError(f"MCP server {config.name!r} at {where} closed the session", "lost")
        if isinstance(leaf, McpError):
            if leaf.error.code == 408:
                return ServerError(
                    f"MCP server {config.name!r} did not answer within {config.timeout:g} s", "timeout"
                )
            return ServerError(f"MCP server {config.name!r}: {leaf.error.message}", "protocol")
    leaf = leaves[0]
    return ServerError(f"MCP server {config.name!r} at {where}: {type(leaf).__name__}: {leaf}", "protocol")


def _should_fall_back(exc: BaseException) -> bool:
    """Streamable HTTP refused in a way that means "old SSE server": HTTP 4xx other than 401/403."""
    for leaf in _leaves(exc):
        if isinstance(leaf, httpx.HTTPStatusError):
            code = leaf.response.status_code
            return 400 <= code < 500 and code not in (401, 403)
        if isinstance(leaf, McpError) and leaf.error.code == SESSION_TERMINATED:
            return True  # the SDK's rendering of a 404 on initialize
    return False


def _errlog():
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")


# --------------------------------------------------------------------------------------------------
# One connection
# --------------------------------------------------------------------------------------------------


class _Session(ClientSession):
    """A ClientSession that says when its receive loop ends (the transport's read side closed)."""

    def __init__(self, *args: Any, on_closed: Callable[[], None], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._on_closed = on_closed

    async def _receive_loop(self) -> None:
        try:
            await super()._receive_loop()
        finally:
            self._on_closed()


class _Connection:
    """One MCP session, opened and closed by its own owner task."""

    def __init__(
        self,
        config: ServerConfig,
        transport: str,
        token_source: TokenSource | None = None,
        on_tools_changed: Callable[[], None] | None = None,
    ):
        self.config = config
        self.transport = transport
        self.token_source = token_source
        self.on_tools_changed = on_tools_changed
        self.session: ClientSession | None = None
        self.tools: list[types.Tool] = []
        self.lost: asyncio.Future | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.session is not None and self.lost is not None and not self.lost.done()

    def _headers(self) -> dict[str, str]:
        headers = dict(self.config.headers)
        if self.config.auth_token and self.token_source is None:
            headers["Authorization"] = f"Bearer {self.config.auth_token}"
        return headers

    def _auth(self) -> httpx.Auth | None:
        return BearerAuth(self.token_source) if self.token_source is not None else None

    async def _open_transport(self, stack: contextlib.AsyncExitStack):
        cfg = self.config
        if self.transport == "stdio":
            params = StdioServerParameters(
                command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=_errlog()))
        elif self.transport == "sse":
            read, write = await stack.enter_async_context(
                sse_client(
                    cfg.url,
                    headers=self._headers(),
                    timeout=cfg.timeout,
                    sse_read_timeout=SSE_READ_TIMEOUT,
                    auth=self._auth(),
                )
            )
        else:
            # what create_mcp_http_client makes, with a transport that reports a broken stream
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    headers=self._headers(),
                    timeout=httpx.Timeout(cfg.timeout, read=max(cfg.timeout, SSE_READ_TIMEOUT)),
                    auth=self._auth(),
                    transport=BreakWatch(httpx.AsyncHTTPTransport(), self._stream_broke),
                )
            )
            read, write, _ = await stack.enter_async_context(
                streamable_http_client(cfg.url, http_client=client)
            )
        return read, write

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            if self.on_tools_changed is not None:
                self.on_tools_changed()
        elif isinstance(message, Exception):
            logger.debug("MCP server %s: transport reported %s", self.config.name, type(message).__name__)

    def _session_closed(self) -> None:
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(_Lost("the server closed the stream"))
        self._stop.set()

    def _stream_broke(self, exc: BaseException) -> None:
        """A response stream of this session broke (reset, cut short): the session is lost now, not
        when the request waiting on it times out (see :mod:`mcp_app.breakwatch`)."""
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(_Lost(f"the connection broke ({type(exc).__name__})"))
        self._stop.set()

    async def open(self) -> None:
        """Connect, initialize and list the tools within ``timeout``; raise on failure."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        self.lost = loop.create_future()
        self._task = loop.create_task(self._own(ready), name=f"mcp-owner-{self.config.name}")
        try:
            # the owner enforces the deadline itself; this outer bound only guards against a task
            # that does not react to its own cancel scope
            await asyncio.wait_for(asyncio.shield(ready), self.config.timeout + CLOSE_TIMEOUT)
        except TimeoutError:
            await self.close()
            raise TimeoutError(f"no answer within {self.config.timeout:g} s") from None
        except asyncio.CancelledError:
            await asyncio.shield(self.close())
            raise

    async def _own(self, ready: asyncio.Future) -> None:
        error: BaseException | None = None
        timeout = self.config.timeout
        try:
            with anyio.CancelScope() as scope:
                scope.deadline = anyio.current_time() + timeout
                async with contextlib.AsyncExitStack() as stack:
                    read, write = await self._open_transport(stack)
                    session = await stack.enter_async_context(
                        _Session(
                            read,
                            write,
                            on_closed=self._session_closed,
                            read_timeout_seconds=timedelta(seconds=timeout),
                            message_handler=self._on_message,
                            client_info=CLIENT_INFO,
                        )
                    )
                    await session.initialize()
                    self.tools = await _list_all_tools(session)
                    scope.deadline = math.inf
                    self.session = session
                    ready.set_result(None)
                    await self._stop.wait()
            if scope.cancelled_caught and not ready.done():
                error = TimeoutError(f"no answer within {timeout:g} s")
        except asyncio.CancelledError:
            error = _Lost("connection cancelled")
            raise
        except BaseException as exc:
            error = exc
        finally:
            self.session = None
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else _Lost("connection closed"))
                ready.exception()  # retrieved: no "exception was never retrieved" noise
            if self.lost is not None and not self.lost.done():
                self.lost.set_result(error if error is not None else _Lost("connection closed"))

    async def request(self, make: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Run one request on this session; :class:`_Lost` if the session goes away under it."""
        session = self.session
        lost = self.lost
        if session is None or lost is None or lost.done():
            raise _Lost("not connected")
        task = asyncio.ensure_future(make(session))
        try:
            await asyncio.wait((task, lost), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            reason = lost.result()
            message = str(reason) if isinstance(reason, _Lost) else classify(reason, self.config).message
            raise _Lost(message, maybe_ran=True)
        try:
            return task.result()
        except McpError as exc:
            if _is_lost_mcp_error(exc):  # the server answered that it does not know the session
                raise _Lost(exc.error.message) from exc
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise _Lost(type(exc).__name__, maybe_ran=True) from exc

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Ask the owner to exit its contexts; cancel it if it does not within ``timeout``."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=2.0)


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(1000):  # a server that never stops paging is cut off
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            break
    return tools


# --------------------------------------------------------------------------------------------------
# Tools in the registry
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=True)
class McpToolCall:
    """The ``func`` of a registered MCP tool: calls ``tool`` on ``server`` through the manager."""

    manager: McpManager = field(compare=False, hash=False, repr=False)
    manager_id: str
    server: str
    tool: str
    timeout: float

    async def __call__(self, /, **arguments: Any) -> Any:
        try:
            result = await self.manager.arun(
                self.manager.call_tool(self.server, self.tool, arguments, self.timeout)
            )
        except ServerError as exc:  # unreachable, lost, refused: the server's trouble, told to the model
            raise ToolError(exc.message) from None
        return result_value(result)


# --------------------------------------------------------------------------------------------------
# Per-server state
# --------------------------------------------------------------------------------------------------


@dataclass
class ServerState:
    config: ServerConfig
    status: str = "unknown"
    error: str | None = None
    conn: _Connection | None = None
    tools: list = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # prefixed -> tool name
    transport_used: str | None = None
    token_source: TokenSource | None = None
    registered: bool = False  # tools of this server belong in the registry
    connected_at: float | None = None
    checked_at: float | None = None
    created: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def record(self) -> dict:
        """The spec's "MCP server record" (plus ``required``)."""
        cfg = self.config
        return {
            "name": cfg.name,
            "url": public_url(cfg.url),
            "transport": self.transport_used or cfg.transport or "streamable-http",
            "timeout": cfg.timeout,
            "status": self.status,
            "tools_count": len(self.names),
            "tool_names": list(self.names),
            "error": self.error,
            "source": cfg.source,
            "has_auth": cfg.has_auth,
            "required": cfg.required,
        }


# --------------------------------------------------------------------------------------------------
# The manager
# --------------------------------------------------------------------------------------------------


def _default_layer():
    """A private channel layer for the listener, or None with the in-memory layer (one process)."""
    from channels.layers import channel_layers
    from django.conf import settings

    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
    if not backend or backend.endswith("InMemoryChannelLayer"):
        return None
    return channel_layers.make_backend("default")


class McpManager:
    def __init__(
        self,
        registry: ToolRegistry = REGISTRY,
        store: Any = None,
        *,
        layer_factory: Callable[[], Any] | None = _default_layer,
        group: str = GROUP,
        health_interval: float = HEALTH_INTERVAL,
    ):
        self.registry = registry
        self.store = store
        self.layer_factory = layer_factory
        self.group = group
        self.health_interval = health_interval
        self.reconcile_grace = RECONCILE_GRACE_S
        self.instance_id = uuid.uuid4().hex
        self.notifications_received = 0
        self._states: dict[str, ServerState] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._background: list[asyncio.Task] = []
        self._spawned: set[asyncio.Task] = set()
        self._writes: set[asyncio.Task] = set()
        self._layer: Any = None
        self._listening = threading.Event()

    # --- the loop thread ----------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def running(self) -> bool:
        return self._loop is not None and self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the loop thread and the background tasks (idempotent, thread-safe)."""
        with self._start_lock:
            if self.running:
                return
            loop = asyncio.new_event_loop()
            started = threading.Event()
            thread = threading.Thread(
                target=self._run_loop, args=(loop, started), name="mcp-manager", daemon=True
            )
            thread.start()
            started.wait(5)
            self._loop, self._thread = loop, thread
            loop.call_soon_threadsafe(self._start_background)
        logger.debug("MCP manager loop started")

    def _run_loop(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _start_background(self) -> None:
        loop = asyncio.get_running_loop()
        self._background.append(loop.create_task(self._health_loop(), name="mcp-health"))
        layer = None
        if self.layer_factory is not None:
            try:
                layer = self.layer_factory()
            except Exception as exc:
                logger.warning("MCP change notifications disabled: channel layer unavailable (%s)", exc)
        self._layer = layer
        if layer is not None:
            self._background.append(loop.create_task(self._listen(), name="mcp-listener"))

    def stop(self, timeout: float = 15.0) -> None:
        """Close every session, unregister the tools, stop the loop thread (idempotent)."""
        with self._start_lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            if thread.is_alive():
                try:
                    asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout)
                except Exception as exc:
                    logger.warning("MCP manager shutdown incomplete: %s", exc)
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout)
            self._loop = self._thread = None
            self._listening.clear()
        logger.debug("MCP manager stopped")

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def _shutdown(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        for task in list(self._spawned):
            task.cancel()
        states = list(self._states.values())
        await asyncio.gather(*(self._drop(s) for s in states), return_exceptions=True)
        self.registry.unregister_where(predicate=self._owns)
        for s in states:
            s.registered = False
        self._states.clear()
        if self._layer is not None:
            with contextlib.suppress(Exception):
                await self._layer.close_pools()
            self._layer = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the manager loop and wait for it (from any thread but the loop's)."""
        self.start()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("McpManager.run() called on the manager loop; await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"MCP operation did not finish within {timeout:g} s") from None

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the manager loop from any loop (directly when already on it)."""
        if self._loop is not None and asyncio.get_running_loop() is self._loop:
            return await coro
        self.start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))  # type: ignore[arg-type]

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

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
        if state is None:
            return []
        by_tool = {t.name: t for t in state.tools}
        return [tool_record(name, p, by_tool[t]) for p, t in state.names.items() if t in by_tool]

    # --- status ------------------------------------------------------------------------------
    def _set_status(self, state: ServerState, status: str, error: str | None) -> None:
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
        if self._states.get(state.config.name) is state:
            self._persist_state(state)

    def _persist_state(self, state: ServerState) -> None:
        if self.store is None:
            return
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
                await asyncio.to_thread(self.store.save_state, name, **values)
            except Exception as exc:
                logger.debug("MCP server %s: state not stored: %s", name, exc)

        task = self._spawn(save(), f"mcp-persist-{name}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _flush_writes(self) -> None:
        """Wait for pending state writes, so a caller's next database write never races them."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    # --- connecting --------------------------------------------------------------------------
    def _token_source(self, config: ServerConfig, persist: bool) -> TokenSource | None:
        if config.oauth is None:
            return None
        save = load = None
        if persist and self.store is not None:
            name = config.name

            async def save(tokens: OAuthTokens) -> None:
                register_secrets([tokens.access_token, tokens.refresh_token])
                await asyncio.to_thread(self.store.save_tokens, name, tokens)

            async def load() -> OAuthTokens | None:
                try:
                    return await asyncio.to_thread(self.store.load_tokens, name)
                except Exception:
                    return None

        return TokenSource(
            config.name, config.oauth, config.tokens, save=save, load=load, timeout=config.timeout
        )

    async def _open(
        self,
        config: ServerConfig,
        transport: str | None,
        token_source: TokenSource | None,
        on_tools_changed: Callable[[], None] | None = None,
    ) -> _Connection:
        """Open a connection, detecting the transport when ``transport`` is None."""
        register_secrets(config.secrets())
        candidates = [transport] if transport else ["streamable-http", "sse"]
        for index, candidate in enumerate(candidates):
            conn = _Connection(config, candidate, token_source, on_tools_changed)
            try:
                await conn.open()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if index + 1 < len(candidates) and _should_fall_back(exc):
                    logger.info(
                        "MCP server %s: streamable HTTP refused (%s); trying SSE",
                        config.name,
                        classify(exc, config).message,
                    )
                    continue
                raise classify(exc, replace(config, transport=candidate)) from None
            return conn
        raise ServerError(
            f"MCP server {config.name!r}: no transport worked", "unreachable"
        )  # pragma: no cover

    async def _connect(self, state: ServerState) -> _Connection:
        """The live connection of ``state``, connecting if needed; sets the status."""
        async with state.lock:
            conn = state.conn
            if conn is not None and conn.alive:
                return conn
            cfg = state.config
            if cfg.config_error:
                error = ServerError(f"MCP server {cfg.name!r} is misconfigured: {cfg.config_error}", "config")
                self._set_status(state, "unhealthy", error.message)
                raise error
            if state.token_source is None:
                state.token_source = self._token_source(cfg, persist=True)
            name = cfg.name
            try:
                conn = await self._open(
                    cfg,
                    state.transport_used or cfg.transport,
                    state.token_source,
                    lambda: self._spawn(self.refresh_tools(name), f"mcp-tools-{name}"),
                )
            except ServerError as exc:
                self._set_status(state, "unhealthy", exc.message)
                raise
            if self._states.get(name) is not state:  # removed while connecting
                await conn.close()
                raise ServerError(f"MCP server {name!r} was removed", "unknown")
            state.conn = conn
            state.transport_used = conn.transport
            state.tools = list(conn.tools)
            state.connected_at = time.time()
            if state.registered:
                self._register(state)
            self._set_status(state, "healthy", None)
            return conn

    async def _drop(self, state: ServerState, conn: _Connection | None = None) -> None:
        """Close the state's connection (only ``conn``, if given and still current)."""
        current = state.conn
        if conn is not None and current is not conn:
            return
        state.conn = None
        if current is not None:
            await current.close()

    # --- registry ----------------------------------------------------------------------------
    def _owns(self, spec: ToolSpec) -> bool:
        return isinstance(spec.func, McpToolCall) and spec.func.manager_id == self.instance_id

    def _register(self, state: ServerState) -> list[str]:
        name = state.config.name
        assigned = assign_names(name, [t.name for t in state.tools])
        by_tool = {t.name: t for t in state.tools}
        specs: list[ToolSpec] = []
        names: dict[str, str] = {}
        for prefixed, tool_name in assigned.items():
            other = self.registry.get(prefixed)
            if other is not None and not (self._owns(other) and other.server == name):
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
                    func=McpToolCall(self, self.instance_id, name, tool_name, state.config.timeout),
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
            changed = self.registry.sync(specs, where=lambda s: self._owns(s) and s.server == name)
        except ValueError as exc:  # a name was taken between the check and the sync
            logger.warning("MCP server %s: tools not registered: %s", name, exc)
            return list(state.names)
        state.names = names
        state.registered = True
        if changed:
            logger.info("MCP server %s: %d tools registered", name, len(names))
        return list(names)

    def _unregister(self, name: str) -> int:
        return self.registry.unregister_where(predicate=lambda s: self._owns(s) and s.server == name)

    # --- operations (run these on the manager loop: run()/arun()) -----------------------------
    async def add(self, config: ServerConfig) -> dict:
        """Connect a NEW server, register its tools; the record. Nothing is kept on failure."""
        name = config.name
        if name in self._states:
            raise ServerError(f"An MCP server named {name!r} already exists; remove it first.", "duplicate")
        state = ServerState(config)
        self._states[name] = state
        try:
            await self._connect(state)
        except BaseException:
            if self._states.get(name) is state:
                del self._states[name]
            await self._drop(state)
            await self._flush_writes()
            raise
        self._register(state)
        self._persist_state(state)
        await self._flush_writes()
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
                await self._drop(existing)
        state.registered = True
        with contextlib.suppress(ServerError):
            await self._connect(state)
        await self._flush_writes()
        return state.record()

    async def remove(self, name: str) -> int:
        """Disconnect and forget ``name``; the number of tools unregistered."""
        state = self._states.pop(name, None)
        removed = self._unregister(name)
        if state is not None:
            await self._drop(state)
        if state is not None or removed:
            logger.info("MCP server %s removed (%d tools unregistered)", name, removed)
        return removed

    async def test(self, config: ServerConfig) -> tuple[str, list[dict]]:
        """Connect, initialize and list tools WITHOUT registering; ``(transport, tool records)``."""
        conn = await self._open(config, config.transport, self._token_source(config, persist=False))
        try:
            assigned = assign_names(config.name, [t.name for t in conn.tools])
            by_tool = {t.name: t for t in conn.tools}
            return conn.transport, [tool_record(config.name, p, by_tool[t]) for p, t in assigned.items()]
        finally:
            await conn.close()

    async def call_tool(self, server: str, tool: str, arguments: dict, timeout: float | None = None) -> Any:
        """Call ``tool`` on ``server``; reconnect and retry ONCE on a lost session."""
        state = self._states.get(server)
        if state is None:
            raise ServerError(f"MCP server {server!r} is not connected (was it removed?)", "unknown")
        read_timeout = timedelta(seconds=timeout or state.config.timeout)
        for attempt in (1, 2):
            conn = state.conn
            if conn is None or not conn.alive:
                conn = await self._connect(state)
            try:
                result = await conn.request(
                    lambda s: s.call_tool(tool, arguments, read_timeout_seconds=read_timeout)
                )
            except _Lost as exc:
                if self._states.get(server) is not state:
                    raise ServerError(f"MCP server {server!r} was removed", "unknown") from None
                await self._drop(state, conn)
                # over the network a cut can fall after the server ran the call; a local (stdio) child
                # that died is almost always found dead at the next call, so that one is repeated
                may_have_run = exc.maybe_ran and state.config.transport != "stdio"
                if attempt == 1 and not (may_have_run and not _safe_to_repeat(conn, tool)):
                    logger.info(
                        "MCP server %s: session lost (%s); reconnecting and retrying once", server, exc
                    )
                    continue
                if attempt == 1:  # it may have run: repeating a payment or a booking is worse than failing
                    await self._connect(state)  # a server that is gone is "unreachable", as for any call
                    logger.warning(
                        "MCP server %s: connection lost during %s (%s); not repeated", server, tool, exc
                    )
                    raise ServerError(
                        f"MCP server {server!r} lost the connection during {tool!r}, which may have run: "
                        "not repeated, as the tool is not marked read-only or idempotent",
                        "lost",
                    ) from None
                error = ServerError(f"MCP server {server!r} lost the session again: {exc}", "lost")
                self._set_status(state, "unhealthy", error.message)
                raise error from None
            except McpError as exc:
                raise classify(exc, state.config) from None
            if state.status != "healthy":
                self._set_status(state, "healthy", None)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def check(self, name: str) -> str:
        """Health check one server: ping (or connect); returns the resulting status."""
        state = self._states.get(name)
        if state is None:
            return "unknown"
        conn = state.conn
        if conn is not None and conn.alive:
            try:
                async with asyncio.timeout(min(state.config.timeout, PING_TIMEOUT)):
                    await conn.request(lambda s: s.send_ping())
            except Exception as exc:
                logger.info("MCP server %s: ping failed (%s); reconnecting", name, type(exc).__name__)
                await self._drop(state, conn)
            else:
                self._set_status(state, "healthy", None)
                return state.status
        with contextlib.suppress(ServerError):
            await self._connect(state)
        return state.status

    async def check_all(self) -> dict[str, str]:
        names = list(self._states)
        results = await asyncio.gather(*(self.check(n) for n in names), return_exceptions=True)
        return {n: (r if isinstance(r, str) else "unhealthy") for n, r in zip(names, results, strict=True)}

    async def refresh_tools(self, name: str) -> None:
        """Re-list a connected server's tools (``tools/list_changed``) and re-sync the registry."""
        state = self._states.get(name)
        if state is None or state.conn is None or not state.conn.alive:
            return
        try:
            state.tools = await state.conn.request(_list_all_tools)
        except Exception as exc:
            logger.info("MCP server %s: tool list refresh failed: %s", name, type(exc).__name__)
            return
        if state.registered:
            self._register(state)
            self._persist_state(state)

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
        await self._flush_writes()
        return {s.config.name: s.record() for s in states}

    async def _startup_one(self, state: ServerState) -> None:
        cfg = state.config
        try:
            await self._connect(state)
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
            self._set_status(state, "unhealthy", f"{type(exc).__name__}: {exc}")
            logger.exception("MCP server %s: unexpected failure", cfg.name)
            return
        self._register(state)
        self._persist_state(state)

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

    # --- background: health + reconcile ------------------------------------------------------
    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            try:
                await self.reconcile()
                await self.check_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("MCP health check round failed")

    async def reconcile(self) -> None:
        """Make the runtime servers in memory match the database (repairs missed notifications)."""
        if self.store is None:
            return
        try:
            rows = await asyncio.to_thread(self.store.runtime_configs)
        except Exception as exc:
            logger.debug("MCP reconcile skipped: %s", exc)
            return
        stored = {c.name: c for c in rows}
        now = time.time()
        for name, config in stored.items():
            young = (
                config.created_at is not None
                and now - config.created_at < 2 * config.timeout + self.reconcile_grace
            )
            if name not in self._states and not young:
                logger.info("MCP server %s found in the database; connecting", name)
                await self.ensure(config)
        for name, state in list(self._states.items()):
            if (
                state.config.source == "runtime"
                and name not in stored
                and time.monotonic() - state.created > self.reconcile_grace
            ):
                logger.info("MCP server %s no longer in the database; removing", name)
                await self.remove(name)

    # --- cross-worker notifications ----------------------------------------------------------
    async def notify(self, name: str, action: str) -> bool:
        """Tell the other workers that ``name`` was ``added`` / ``updated`` / ``removed``."""
        if self._layer is None:
            return False
        message = {"type": "mcp.changed", "name": name, "action": action, "origin": self.instance_id}
        try:
            await self._layer.group_send(self.group, message)
        except Exception as exc:
            logger.warning(
                "MCP change of %s not broadcast (%s); other workers catch up on their next check", name, exc
            )
            return False
        return True

    def wait_listening(self, timeout: float = 5.0) -> bool:
        return self._listening.wait(timeout)

    async def _listen(self) -> None:
        layer = self._layer
        delay = 1.0
        while True:
            renew: asyncio.Task | None = None
            try:
                channel = await layer.new_channel("mcp")
                await layer.group_add(self.group, channel)
                renew = asyncio.get_running_loop().create_task(self._renew_group(channel))
                self._listening.set()
                delay = 1.0
                while True:
                    message = await layer.receive(channel)
                    await self._on_changed(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._listening.clear()
                logger.warning("MCP change listener: %s; retrying in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            finally:
                if renew is not None:
                    renew.cancel()

    async def _renew_group(self, channel: str) -> None:
        while True:
            await asyncio.sleep(GROUP_RENEW_S)
            with contextlib.suppress(Exception):
                await self._layer.group_add(self.group, channel)

    async def _on_changed(self, message: dict) -> None:
        if message.get("type") != "mcp.changed" or message.get("origin") == self.instance_id:
            return
        name, action = message.get("name"), message.get("action")
        if not isinstance(name, str):
            return
        self.notifications_received += 1
        logger.info("MCP server %s %s on another worker; applying here", name, action)
        try:
            if action == "removed":
                await self.remove(name)
            else:  # "updated" (new tokens, admin edit) always reconnects; "added" only if needed
                await self.reload(name, reconnect=action != "added")
        except Exception:
            logger.exception("MCP server %s: applying the change from another worker failed", name)


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
