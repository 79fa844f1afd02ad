"""What one worker knows of one MCP server right now: its config, connection, tools and health."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from mcp_app.connection import Connection
from mcp_app.oauth import TokenSource
from mcp_app.security import public_url
from mcp_app.server_config import ServerConfig


@dataclass
class ServerState:
    config: ServerConfig
    status: str = "unknown"
    error: str | None = None
    conn: Connection | None = None
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
