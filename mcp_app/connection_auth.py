"""The credentials one MCP connection presents: a static bearer token or headers, or an OAuth
token source.

The token source of a stored server saves the tokens it refreshes to the store and re-reads them
from it, so that a refresh done by one worker is used by the others (a refresh token is often
single-use). A connection test (``persist=False``) never writes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from mcp_app.oauth import BearerAuth, OAuthTokens, TokenSource
from mcp_app.server_config import ServerConfig
from voiceagent.logging import register_secrets


def token_source(config: ServerConfig, store: Any = None) -> TokenSource | None:
    """The OAuth token source of ``config`` (None without OAuth), kept in ``store`` if given."""
    if config.oauth is None:
        return None
    save = load = None
    if store is not None:
        name = config.name

        async def save(tokens: OAuthTokens) -> None:
            register_secrets([tokens.access_token, tokens.refresh_token])
            await asyncio.to_thread(store.save_tokens, name, tokens)

        async def load() -> OAuthTokens | None:
            try:
                return await asyncio.to_thread(store.load_tokens, name)
            except Exception:
                return None

    return TokenSource(config.name, config.oauth, config.tokens, save=save, load=load, timeout=config.timeout)


def request_headers(config: ServerConfig, tokens: TokenSource | None) -> dict[str, str]:
    """The configured headers, plus the static bearer token when OAuth does not supply one."""
    headers = dict(config.headers)
    if config.auth_token and tokens is None:
        headers["Authorization"] = f"Bearer {config.auth_token}"
    return headers


def http_auth(tokens: TokenSource | None) -> httpx.Auth | None:
    """The httpx auth flow that adds (and refreshes) the OAuth bearer token, if there is one."""
    return BearerAuth(tokens) if tokens is not None else None
