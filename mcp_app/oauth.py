"""OAuth 2.0 authorization code flow with PKCE (S256, always) for MCP servers.

- :func:`authorization_url` builds the URL the user opens, with exactly ``client_id``,
  ``response_type=code``, ``redirect_uri``, ``state``, ``code_challenge``,
  ``code_challenge_method=S256`` and ``scope`` (added to whatever query ``auth_url`` already has).
- :func:`fetch_metadata` reads ``/.well-known/oauth-authorization-server`` at ``auth_url``'s
  origin when it exists; :func:`check_pkce_support` refuses a server that publishes
  ``code_challenge_methods_supported`` without ``S256``.
- :func:`exchange_code` / :func:`refresh_tokens` talk to ``token_url`` (form POST, the client
  secret, when given, sent as ``client_secret_post``); tokens keep an absolute expiry.
- :class:`TokenSource` hands out a valid access token, refreshing it with the refresh token
  before use when it has expired (or when the MCP server answers 401), and persists refreshed
  tokens through a callback; :class:`BearerAuth` puts it on every HTTP request as
  ``Authorization: Bearer``.

Token values never appear in exceptions or logs.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx

logger = logging.getLogger("mcp_app.oauth")

EXPIRY_SKEW_S = 30.0  # refresh this long before the stated expiry
AUTH_PARAMS = (
    "client_id",
    "response_type",
    "redirect_uri",
    "state",
    "code_challenge",
    "code_challenge_method",
    "scope",
)


@dataclass(frozen=True)
class OAuthConfig:
    client_id: str
    auth_url: str
    token_url: str
    scope: str = ""
    redirect_uri: str = ""
    client_secret: str = ""

    def __repr__(self) -> str:  # never the secret
        return f"OAuthConfig(client_id={self.client_id!r}, token_url={self.token_url!r})"


@dataclass(frozen=True)
class OAuthTokens:
    access_token: str
    refresh_token: str = ""
    expires_at: float | None = None  # epoch seconds

    def expired(self, skew: float = EXPIRY_SKEW_S) -> bool:
        return self.expires_at is not None and time.time() >= self.expires_at - skew

    def __repr__(self) -> str:
        return f"OAuthTokens(expires_at={self.expires_at!r}, has_refresh={bool(self.refresh_token)})"


class OAuthError(Exception):
    """``kind``: ``rejected`` (the authorization server said no), ``unreachable``, ``invalid``
    (unusable answer), ``unsupported`` (no S256) or ``expired`` (no way to refresh)."""

    def __init__(self, message: str, kind: str = "rejected"):
        super().__init__(message)
        self.kind = kind


def new_state() -> str:
    return secrets.token_urlsafe(32)


def pkce_pair() -> tuple[str, str]:
    """``(code_verifier, code_challenge)`` for S256 (RFC 7636: 43-128 characters)."""
    verifier = secrets.token_urlsafe(64)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def authorization_url(config: OAuthConfig, state: str, code_challenge: str) -> str:
    parts = urlsplit(config.auth_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in AUTH_PARAMS]
    query += [
        ("client_id", config.client_id),
        ("response_type", "code"),
        ("redirect_uri", config.redirect_uri),
        ("state", state),
        ("code_challenge", code_challenge),
        ("code_challenge_method", "S256"),
        ("scope", config.scope),
    ]
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def metadata_url(auth_url: str) -> str:
    parts = urlsplit(auth_url)
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server"


async def fetch_metadata(auth_url: str, timeout: float = 5.0) -> dict | None:
    """The authorization server's RFC 8414 metadata, or ``None`` when it publishes none."""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.get(metadata_url(auth_url), headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        logger.info("OAuth metadata of %s not available: %s", metadata_url(auth_url), type(exc).__name__)
        return None
    if response.status_code != 200:
        return None
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def check_pkce_support(metadata: dict | None) -> None:
    if not metadata or "code_challenge_methods_supported" not in metadata:
        return
    methods = metadata.get("code_challenge_methods_supported") or []
    if "S256" not in methods:
        raise OAuthError(
            "The authorization server does not support PKCE with S256 "
            f"(code_challenge_methods_supported: {', '.join(map(str, methods)) or 'none'}).",
            "unsupported",
        )


async def _token_request(
    config: OAuthConfig, form: dict[str, str], timeout: float, previous_refresh: str = ""
) -> OAuthTokens:
    form = {**form, "client_id": config.client_id}
    if config.client_secret:
        form["client_secret"] = config.client_secret
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.post(config.token_url, data=form, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise OAuthError(f"the token endpoint is unreachable ({type(exc).__name__})", "unreachable") from None
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        error = data.get("error") if isinstance(data, dict) else None
        description = data.get("error_description") if isinstance(data, dict) else None
        reason = ": ".join(str(x) for x in (error, description) if x) or "no reason given"
        raise OAuthError(f"the token endpoint refused the request (HTTP {response.status_code}, {reason})")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("access_token"), str)
        or not data["access_token"]
    ):
        raise OAuthError("the token endpoint answered without an access_token", "invalid")
    token_type = str(data.get("token_type", "bearer")).lower()
    if token_type != "bearer":
        raise OAuthError(
            f"the token endpoint issued a {token_type!r} token; only bearer is supported", "invalid"
        )
    expires_at = None
    try:
        if data.get("expires_in") is not None:
            expires_at = time.time() + float(data["expires_in"])
    except (TypeError, ValueError):
        expires_at = None
    refresh = data.get("refresh_token") if isinstance(data.get("refresh_token"), str) else ""
    return OAuthTokens(
        access_token=data["access_token"], refresh_token=refresh or previous_refresh, expires_at=expires_at
    )


async def exchange_code(
    config: OAuthConfig, code: str, code_verifier: str, timeout: float = 10.0
) -> OAuthTokens:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": config.redirect_uri,
        "code_verifier": code_verifier,
    }
    return await _token_request(config, form, timeout)


async def refresh_tokens(config: OAuthConfig, refresh_token: str, timeout: float = 10.0) -> OAuthTokens:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if config.scope:
        form["scope"] = config.scope
    return await _token_request(config, form, timeout, previous_refresh=refresh_token)


TokensSaver = Callable[[OAuthTokens], Awaitable[None]]
TokensLoader = Callable[[], Awaitable["OAuthTokens | None"]]


class TokenSource:
    """A server's current OAuth tokens; refreshes before use when expired. Use on one event loop."""

    def __init__(
        self,
        server: str,
        config: OAuthConfig,
        tokens: OAuthTokens | None,
        *,
        save: TokensSaver | None = None,
        load: TokensLoader | None = None,
        timeout: float = 10.0,
    ):
        self.server = server
        self.config = config
        self.tokens = tokens
        self._save = save
        self._load = load
        self._timeout = timeout
        self._lock: asyncio.Lock | None = None
        self.refreshes = 0

    async def token(self, *, force_refresh: bool = False, rejected: str | None = None) -> str:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current = self.tokens
            if current is not None:
                if rejected is not None and current.access_token != rejected and not current.expired():
                    return current.access_token  # someone refreshed while this request was out
                if not force_refresh and not current.expired():
                    return current.access_token
            if self._load is not None:  # another worker may have refreshed (and rotated) already
                stored = await self._load()
                if (
                    stored is not None
                    and (current is None or stored.access_token != current.access_token)
                    and stored.access_token != rejected
                    and not stored.expired()
                ):
                    self.tokens = stored
                    return stored.access_token
                if stored is not None and current is not None and stored.refresh_token:
                    current = replace(current, refresh_token=stored.refresh_token)
                elif stored is not None and current is None:
                    current = stored
            if current is None:
                raise OAuthError(
                    f"MCP server {self.server!r} has no OAuth token: run the OAuth flow", "expired"
                )
            if not current.refresh_token:
                raise OAuthError(
                    f"the OAuth access token of MCP server {self.server!r} is expired or invalid and there "
                    "is no refresh token: run the OAuth flow again",
                    "expired",
                )
            fresh = await refresh_tokens(self.config, current.refresh_token, self._timeout)
            self.tokens = fresh
            self.refreshes += 1
            logger.info("MCP server %s: OAuth access token refreshed", self.server)
            if self._save is not None:
                try:
                    await self._save(fresh)
                except Exception as exc:  # the token still works for this process
                    logger.warning("MCP server %s: could not store the refreshed token: %s", self.server, exc)
            return fresh.access_token


class BearerAuth(httpx.Auth):
    """``Authorization: Bearer <token>`` from a :class:`TokenSource`; one refresh-and-retry on 401."""

    def __init__(self, source: TokenSource):
        self.source = source

    def sync_auth_flow(self, request):  # pragma: no cover - only async clients are used
        raise RuntimeError("BearerAuth works with httpx.AsyncClient only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self.source.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            fresh = await self.source.token(force_refresh=True, rejected=token)
            if fresh != token:
                request.headers["Authorization"] = f"Bearer {fresh}"
                yield request
