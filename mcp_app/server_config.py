"""What it takes to connect one MCP server, as an immutable value.

Its own module so that the manager (which connects servers) and the store (which turns database
rows and environment variables into configs) both import it and neither imports the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from mcp_app.oauth import OAuthConfig, OAuthTokens

DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class ServerConfig:
    """Everything needed to connect one server. Secrets are kept out of ``repr``."""

    name: str
    url: str = ""
    transport: str | None = None  # None: detect (streamable HTTP, then SSE)
    timeout: float = DEFAULT_TIMEOUT
    headers: dict = field(default_factory=dict, repr=False, compare=True, hash=False)
    auth_token: str = field(default="", repr=False)
    command: str = ""
    args: tuple = ()
    env: dict = field(default_factory=dict, repr=False, hash=False)
    source: str = "runtime"  # environment | runtime
    required: bool = False
    oauth: OAuthConfig | None = field(default=None, repr=False)
    tokens: OAuthTokens | None = field(default=None, repr=False, compare=False)
    config_error: str | None = None
    created_at: float | None = field(default=None, compare=False)

    @property
    def has_auth(self) -> bool:
        return bool(
            self.auth_token
            or self.oauth is not None
            or any(k.lower() == "authorization" for k in self.headers)
        )

    @property
    def where(self) -> str:
        return f"stdio command {os.path.basename(self.command)!r}" if self.transport == "stdio" else self.url

    def secrets(self) -> list[str]:
        values = [self.auth_token, *self.headers.values(), *self.env.values()]
        if self.oauth is not None:
            values.append(self.oauth.client_secret)
        if self.tokens is not None:
            values += [self.tokens.access_token, self.tokens.refresh_token]
        return [v for v in values if isinstance(v, str) and v]
