"""Notice a broken MCP connection the moment a response stream breaks.

Why: over streamable HTTP a tool call's answer comes back on the call's own POST response (an SSE
stream). When that connection is reset or cut short (the server crashed, a proxy dropped the
flow), the ``mcp`` SDK logs the error at DEBUG and carries on: the call then waits out its whole
read timeout (30 s by default) for an answer that can never come, and is reported as a timeout.
:class:`BreakWatch` wraps the HTTP client's transport and calls ``on_break`` when any response
stream fails with a transport error, so the connection is marked lost at once and the manager's
reconnect-and-retry-once applies, as for every other lost session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx

__all__ = ["BreakWatch"]


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
