"""Local MCP peers for tests and benchmarks: real servers written with ``mcp.server.fastmcp``.

- :func:`build_server` - a FastMCP server with a few demo tools (``echo``, ``add``, ``whoami``
  returning the Authorization header it received, ``slow``, ``fail``) plus ``n_tools`` generated
  ones (listed in pages of 40 with a cursor when ``paged``), optionally OAuth-protected.
- :class:`PeerServer` - serves a FastMCP app (streamable HTTP at ``/mcp`` or SSE at ``/sse``) with
  uvicorn on 127.0.0.1 in a background thread; ``stop()`` kills it abruptly, ``restart()`` brings a
  NEW server instance up on the same port (old MCP sessions are unknown to it).
- :class:`MemoryAuthProvider` - an in-memory, auto-approving OAuth authorization server for
  ``mcp.server.auth`` (authorize redirects straight back with ``code`` and ``state``).
- ``python mcp_peers.py stdio`` runs the demo server over stdio; ``python mcp_peers.py http
  --port N --tools 100`` serves streamable HTTP (benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp import types
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.fastmcp import Context, FastMCP
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

PAGE_SIZE = 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------------
# OAuth authorization server (in memory, auto-approving)
# --------------------------------------------------------------------------------------------------


class MemoryAuthProvider:
    """``OAuthAuthorizationServerProvider`` keeping everything in dicts; approves every request."""

    def __init__(
        self,
        client_id: str = "voice-agent",
        client_secret: str | None = "client-secret-value",
        redirect_uris: tuple[str, ...] = ("http://127.0.0.1:9/oauth/callback",),
        scope: str = "mcp read",
        access_ttl: int = 3600,
    ):
        self.client_id = client_id
        self.client_secret = client_secret
        self.access_ttl = access_ttl
        self.clients: dict[str, OAuthClientInformationFull] = {
            client_id: OAuthClientInformationFull(
                client_id=client_id,
                client_secret=client_secret,
                redirect_uris=[AnyUrl(u) for u in redirect_uris],
                token_endpoint_auth_method="client_secret_post" if client_secret else "none",
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=scope,
            )
        }
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.authorize_requests: list[AuthorizationParams] = []
        self.issued: list[str] = []
        self.refresh_count = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id or ""] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self.authorize_requests.append(params)
        code = "code_" + secrets.token_hex(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(client.client_id, authorization_code.scopes)

    async def load_refresh_token(self, client, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotation: the old refresh token is spent
        self.refresh_count += 1
        return self._issue(client.client_id, scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str]) -> OAuthToken:
        access = "at_" + secrets.token_hex(16)
        refresh = "rt_" + secrets.token_hex(16)
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=int(time.time()) + self.access_ttl
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        self.issued.append(access)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.access_ttl,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )

    def expire_access_tokens(self) -> None:
        """Every issued access token is now expired (the server answers 401 to it)."""
        for token in self.access.values():
            token.expires_at = int(time.time()) - 10


# --------------------------------------------------------------------------------------------------
# The demo server
# --------------------------------------------------------------------------------------------------


def build_server(
    name: str = "demo",
    *,
    n_tools: int = 0,
    paged: bool = False,
    auth_provider: MemoryAuthProvider | None = None,
    issuer_url: str | None = None,
    calls: list | None = None,
) -> FastMCP:
    kwargs: dict[str, Any] = {}
    if auth_provider is not None:
        kwargs["auth_server_provider"] = auth_provider
        kwargs["auth"] = AuthSettings(
            issuer_url=issuer_url,
            resource_server_url=None,
            required_scopes=["mcp"],
            client_registration_options=ClientRegistrationOptions(enabled=False),
        )
    mcp = FastMCP(name, host="127.0.0.1", log_level="WARNING", **kwargs)
    record = calls if calls is not None else []

    @mcp.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        record.append(("echo", text))
        return text

    @mcp.tool(description="Add two numbers.")
    def add(a: float, b: float) -> float:
        record.append(("add", a, b))
        return a + b

    @mcp.tool(description="Report the Authorization and X-Custom headers this request carried.")
    def whoami(ctx: Context) -> dict:
        request = getattr(ctx.request_context, "request", None)
        headers = getattr(request, "headers", {}) or {}
        record.append(("whoami",))
        return {"authorization": headers.get("authorization"), "x_custom": headers.get("x-custom")}

    @mcp.tool(description="Sleep, then answer.", annotations=types.ToolAnnotations(readOnlyHint=True))
    async def slow(seconds: float) -> str:
        record.append(("slow", seconds))
        await asyncio.sleep(seconds)
        return "done"

    @mcp.tool(description="Always fails.")
    def fail(message: str) -> str:
        raise ValueError(message)

    for i in range(n_tools):
        mcp.add_tool(_numbered(i), name=f"tool_{i:03d}", description=f"Generated tool number {i}.")

    if paged:
        everything: list[types.Tool] = []

        async def list_paged(request: types.ListToolsRequest | None = None) -> types.ListToolsResult:
            if not everything:
                everything.extend(await mcp.list_tools())
            if request is None:  # the server's own cache refresh
                return types.ListToolsResult(tools=everything)
            cursor = request.params.cursor if request.params and request.params.cursor else "0"
            start = int(cursor)
            page = everything[start : start + PAGE_SIZE]
            following = start + PAGE_SIZE
            return types.ListToolsResult(
                tools=page, nextCursor=str(following) if following < len(everything) else None
            )

        mcp._mcp_server.list_tools()(list_paged)
    return mcp


def _numbered(i: int) -> Callable[..., dict]:
    def tool(x: int = 0) -> dict:
        return {"tool": i, "x": x}

    return tool


# --------------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------------


class PeerServer:
    """A FastMCP app served by uvicorn on 127.0.0.1 in a thread; ``kind`` is ``http`` or ``sse``."""

    def __init__(self, factory: Callable[[], FastMCP], kind: str = "http", port: int | None = None):
        self.factory = factory
        self.kind = kind
        self.port = port or free_port()
        self.mcp: FastMCP | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp" if self.kind == "http" else f"{self.base}/sse"

    def start(self) -> PeerServer:
        self.mcp = self.factory()
        app = self.mcp.streamable_http_app() if self.kind == "http" else self.mcp.sse_app()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"mcp-peer-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"MCP peer on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.should_exit = True
        self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._server = None

    def restart(self) -> PeerServer:
        self.stop()
        return self.start()

    def __enter__(self) -> PeerServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transport", choices=["stdio", "http", "sse"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--name", default="demo")
    args = parser.parse_args()
    mcp = build_server(args.name, n_tools=args.tools)
    if args.transport == "stdio":
        mcp.run("stdio")
        return
    mcp.settings.port = args.port or free_port()
    print(f"listening on 127.0.0.1:{mcp.settings.port}", flush=True)
    mcp.run("streamable-http" if args.transport == "http" else "sse")


if __name__ == "__main__":
    main()
