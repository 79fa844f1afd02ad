"""The three wires an MCP connection can run over: stdio (a child process), SSE and streamable HTTP.

Each is entered on the caller's exit stack, so the owner task of the connection (see
:mod:`mcp_app.connection`) opens and closes it in the same task, as anyio's cancel scopes require.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import httpx
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcp_app.breakwatch import BreakWatch
from mcp_app.connection_auth import http_auth, request_headers
from mcp_app.oauth import TokenSource
from mcp_app.server_config import ServerConfig

SSE_READ_TIMEOUT = 300.0


def _errlog() -> TextIO:
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")


async def open_transport(
    stack: contextlib.AsyncExitStack,
    config: ServerConfig,
    transport: str,
    tokens: TokenSource | None,
    on_broken: Callable[[BaseException], None],
) -> tuple[Any, Any]:
    """Enter ``transport`` for ``config`` on ``stack``; the ``(read, write)`` streams of the session.

    ``on_broken`` hears of a streamable-HTTP response stream that broke (:mod:`mcp_app.breakwatch`).
    """
    if transport == "stdio":
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env) or None
        )
        read, write = await stack.enter_async_context(stdio_client(params, errlog=_errlog()))
    elif transport == "sse":
        read, write = await stack.enter_async_context(
            sse_client(
                config.url,
                headers=request_headers(config, tokens),
                timeout=config.timeout,
                sse_read_timeout=SSE_READ_TIMEOUT,
                auth=http_auth(tokens),
            )
        )
    else:
        # what create_mcp_http_client makes, with a transport that reports a broken stream
        client = await stack.enter_async_context(
            httpx.AsyncClient(
                headers=request_headers(config, tokens),
                timeout=httpx.Timeout(config.timeout, read=max(config.timeout, SSE_READ_TIMEOUT)),
                auth=http_auth(tokens),
                transport=BreakWatch(httpx.AsyncHTTPTransport(), on_broken),
            )
        )
        read, write, _ = await stack.enter_async_context(
            streamable_http_client(config.url, http_client=client)
        )
    return read, write
