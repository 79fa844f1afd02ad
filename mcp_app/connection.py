"""One MCP session, owned by one task: open, request, notice its loss, close.

:class:`Connection` starts an owner task that enters the transport context (streamable HTTP with
an ``httpx.AsyncClient`` carrying the headers, bearer/OAuth auth and timeouts; SSE; or stdio with
an explicit environment, see :mod:`mcp_app.transports`), then the ``ClientSession``; initializes
and lists every tool page (cursor) under ONE deadline (the server's ``timeout``: ``initialize``
can hang); then waits on a stop event and exits the contexts itself - anyio cancel scopes must be
left by the task that entered them. Requests from other tasks use the session directly (same
loop) and race the request against the connection's ``lost`` future, so a dead transport fails
the call at once instead of at the read timeout.

Transport detection (:func:`open_connection`): ``transport`` omitted -> streamable HTTP first;
when that answers with an HTTP 4xx other than 401/403 (or 404 on initialize), SSE (the MCP
backwards-compatibility rule). The transport that worked is reported on the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import anyio
from mcp import ClientSession, types
from mcp.shared.exceptions import McpError

from mcp_app.breakwatch import install_log_filter
from mcp_app.failures import ServerError, SessionLost, classify, is_lost_mcp_error, should_fall_back
from mcp_app.oauth import TokenSource
from mcp_app.server_config import ServerConfig
from mcp_app.transports import open_transport
from voiceagent.logging import register_secrets

logger = logging.getLogger("mcp_app.connection")
install_log_filter()  # a late reply for a closed session is no error (mcp_app.breakwatch)

T = TypeVar("T")
CLOSE_TIMEOUT = 5.0
CLIENT_INFO = types.Implementation(name="voiceagent", version="1.0")


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


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool of the server, following ``nextCursor`` (at most 1000 pages)."""
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


class Connection:
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
        self.closing = False  # we close it: its loss is no news
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.session is not None and self.lost is not None and not self.lost.done()

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
            self.lost.set_result(SessionLost("the server closed the stream"))
        self._stop.set()

    def _stream_broke(self, exc: BaseException) -> None:
        """A response stream of this session broke (reset, cut short): the session is lost now, not
        when the request waiting on it times out (see :mod:`mcp_app.breakwatch`)."""
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(SessionLost(f"the connection broke ({type(exc).__name__})"))
        self._stop.set()

    async def open(self) -> None:
        """Connect, initialize and list the tools within ``timeout``; raise on failure."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        self.lost = loop.create_future()
        # The owner lives as long as the connection: in a clean context, not the one of the request
        # that happened to open it (its request id would tag the connection's log lines for hours).
        self._task = loop.create_task(
            self._own(ready), name=f"mcp-owner-{self.config.name}", context=contextvars.Context()
        )
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
                    read, write = await open_transport(
                        stack, self.config, self.transport, self.token_source, self._stream_broke
                    )
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
                    self.tools = await list_all_tools(session)
                    scope.deadline = math.inf
                    self.session = session
                    ready.set_result(None)
                    await self._stop.wait()
            if scope.cancelled_caught and not ready.done():
                error = TimeoutError(f"no answer within {timeout:g} s")
        except asyncio.CancelledError:
            error = SessionLost("connection cancelled")
            raise
        except BaseException as exc:
            error = exc
        finally:
            self.session = None
            if not ready.done():
                ready.set_exception(
                    error if isinstance(error, Exception) else SessionLost("connection closed")
                )
                ready.exception()  # retrieved: no "exception was never retrieved" noise
            if self.lost is not None and not self.lost.done():
                self.lost.set_result(error if error is not None else SessionLost("connection closed"))

    async def request(self, make: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Run one request on this session; :class:`SessionLost` if the session goes away under it."""
        session = self.session
        lost = self.lost
        if session is None or lost is None or lost.done():
            raise SessionLost("not connected")
        task = asyncio.ensure_future(make(session))
        try:
            await asyncio.wait((task, lost), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            reason = lost.result()
            message = (
                str(reason) if isinstance(reason, SessionLost) else classify(reason, self.config).message
            )
            raise SessionLost(message, maybe_ran=True)
        try:
            return task.result()
        except McpError as exc:
            if is_lost_mcp_error(exc):  # the server answered that it does not know the session
                raise SessionLost(exc.error.message) from exc
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise SessionLost(type(exc).__name__, maybe_ran=True) from exc

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Ask the owner to exit its contexts; cancel it if it does not within ``timeout``."""
        self.closing = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=2.0)


async def open_connection(
    config: ServerConfig,
    transport: str | None,
    token_source: TokenSource | None,
    on_tools_changed: Callable[[], None] | None = None,
) -> Connection:
    """Open a connection, detecting the transport when ``transport`` is None; :class:`ServerError`."""
    register_secrets(config.secrets())
    candidates = [transport] if transport else ["streamable-http", "sse"]
    for index, candidate in enumerate(candidates):
        conn = Connection(config, candidate, token_source, on_tools_changed)
        try:
            await conn.open()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if index + 1 < len(candidates) and should_fall_back(exc):
                logger.info(
                    "MCP server %s: streamable HTTP refused (%s); trying SSE",
                    config.name,
                    classify(exc, config).message,
                )
                continue
            raise classify(exc, replace(config, transport=candidate)) from None
        return conn
    raise ServerError(f"MCP server {config.name!r}: no transport worked", "unreachable")  # pragma: no cover
