"""Notice a broken MCP connection the moment a response stream breaks.

Why: over streamable HTTP a tool call's answer comes back on the call's own POST response (an SSE
stream). When that connection is reset or cut short (the server crashed, a proxy dropped the
flow), the ``mcp`` SDK logs the error at DEBUG and carries on: the call then waits out its whole
read timeout (30 s by default) for an answer that can never come, and is reported as a timeout.
:class:`BreakWatch` wraps the HTTP client's transport and calls ``on_break`` when any response
stream fails with a transport error, so the connection is marked lost at once and the manager's
reconnect-and-retry-once applies, as for every other lost session.

:class:`LateReplyFilter` covers the other side of closing a session with a response in flight (a
ping timed out on a slow link, a broken stream): the answer that arrives meanwhile finds the
session's stream closed, and the SDK logs that as an ERROR with a traceback. It is expected, so
it is dropped (installed on the SDK's logger by :func:`install_log_filter`).

:class:`LostServerFilter` covers a server that dies: the SDK logs its SSE reader's broken stream as
an ERROR with a 40-line traceback, and its failed session termination (the DELETE to a server that
is gone) as a WARNING. Both are the loss the pool reports itself, once, naming the server
(``ServerPool._lost``: one WARNING): the SDK's lines become one-line DEBUG records.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import anyio
import httpx

__all__ = ["BreakWatch", "LateReplyFilter", "LostServerFilter", "install_log_filter"]

SDK_LOGGER = "mcp.client.streamable_http"
SSE_LOGGER = "mcp.client.sse"
_LOST_MESSAGES = ("Error in sse_reader", "Error in post_writer", "Session termination failed")
_TRANSPORT_ERRORS = (httpx.TransportError, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


class BreakWatch(httpx.AsyncBaseTransport):
    """An httpx transport that reports response streams broken by a transport error."""

    def __init__(self, inner: httpx.AsyncBaseTransport, on_break: Callable[[BaseException], None]):
        self._inner = inner
        self._on_break = on_break

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        response.stream = _WatchedStream(response.stream, self._on_break)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _WatchedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, on_break: Callable[[BaseException], None]):
        self._inner = inner
        self._on_break = on_break

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.TransportError as exc:  # reset, truncated body: not a cancel, not a clean end
            self._on_break(exc)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


class LateReplyFilter(logging.Filter):
    """Drops the SDK's "Error parsing SSE message" when the error is the closed stream of a session
    we closed (``anyio.ClosedResourceError``); a real parse error is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError)


class LostServerFilter(logging.Filter):
    """Turns the SDK's report of a server gone (a broken SSE stream, a session termination that
    could not reach it) into a one-line DEBUG record; any other error stays as it was."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if not message.startswith(_LOST_MESSAGES):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not isinstance(exc, _TRANSPORT_ERRORS):
            return True  # a real bug in the stream handling: keep the ERROR and its traceback
        if exc is not None:
            record.msg = f"{message}: {type(exc).__name__}: {str(exc)[:200]}"
            record.args = None
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        # handlers pass every level: a DEBUG record is only kept where DEBUG is wanted
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def install_log_filter() -> None:
    """Once per process (idempotent)."""
    sdk = logging.getLogger(SDK_LOGGER)
    if not any(isinstance(f, LateReplyFilter) for f in sdk.filters):
        sdk.addFilter(LateReplyFilter())
    for name in (SDK_LOGGER, SSE_LOGGER):
        logger = logging.getLogger(name)
        if not any(isinstance(f, LostServerFilter) for f in logger.filters):
            logger.addFilter(LostServerFilter())
