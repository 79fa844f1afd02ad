"""How an MCP connect or call failed, in one word (``ServerError.kind``) and one line.

The SDK, httpx, anyio and our OAuth client each fail in their own way, often wrapped in exception
groups; :func:`classify` digs out the leaf that matters so that views, admin and the model all see
one :class:`ServerError` with a reason a person can act on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anyio
import httpx
from mcp import types
from mcp.shared.exceptions import McpError

from mcp_app.oauth import OAuthError
from mcp_app.server_config import ServerConfig
from voiceagent.logging import redact

SESSION_TERMINATED = 32600  # what the SDK reports for streamable HTTP's 404 "Session not found"


class ServerError(Exception):
    """A server operation failed. ``kind``: ``unknown`` (no such server), ``duplicate``,
    ``config``, ``unreachable``, ``timeout``, ``auth``, ``protocol``, ``lost``."""

    def __init__(self, message: str, kind: str, *, maybe_ran: bool = False):
        super().__init__(redact(message))
        self.kind = kind
        self.maybe_ran = maybe_ran  # lost after the request left: the server may have run it

    @property
    def public(self) -> str:
        """What the model, the caller's socket and the history may see: the tool is unavailable and
        why in general terms - never the server's address (internal URLs, hosts, commands); the
        :attr:`message` with those goes to the log."""
        if self.maybe_ran:
            return (
                "the tool is unavailable: the connection to its server was lost during the call, "
                "which may have run; it was not repeated"
            )
        reason = _PUBLIC_REASONS.get(self.kind)
        return f"the tool is unavailable: {reason}" if reason else "the tool is unavailable"

    @property
    def message(self) -> str:
        return str(self)


_PUBLIC_REASONS = {
    "unreachable": "its server cannot be reached",
    "timeout": "its server did not answer in time",
    "auth": "its server refused our credentials",
    "lost": "the connection to its server was lost",
    "unknown": "its server is not connected",
}


class SessionLost(Exception):
    """The session under a request went away (retry once on a fresh one). ``maybe_ran``: it went
    away after the request left, so the server may have run it - a tool call is then repeated only
    when the tool says it is safe to (read-only or idempotent)."""

    def __init__(self, message: str, *, maybe_ran: bool = False):
        super().__init__(message)
        self.maybe_ran = maybe_ran


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc
        if exc.__cause__ is not None and not isinstance(exc, ServerError | OAuthError):
            yield from _leaves(exc.__cause__)


def is_lost_mcp_error(exc: BaseException) -> bool:
    """The server answered that it no longer knows the session (or the SDK saw it close)."""
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
        if is_lost_mcp_error(leaf) or isinstance(
            leaf, SessionLost | anyio.ClosedResourceError | anyio.BrokenResourceError
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


def should_fall_back(exc: BaseException) -> bool:
    """Streamable HTTP refused in a way that means "old SSE server": HTTP 4xx other than 401/403."""
    for leaf in _leaves(exc):
        if isinstance(leaf, httpx.HTTPStatusError):
            code = leaf.response.status_code
            return 400 <= code < 500 and code not in (401, 403)
        if isinstance(leaf, McpError) and leaf.error.code == SESSION_TERMINATED:
            return True  # the SDK's rendering of a 404 on initialize
    return False
