"""Helpers shared by the MCP tests (configs, addresses)."""

from __future__ import annotations

import os
from pathlib import Path

from mcp_peers import free_port

PEERS_SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "mcp_peers.py")
REDIRECT_URI = "http://127.0.0.1:9/oauth/callback"
DEMO_TOOLS = ["demo_echo", "demo_add", "demo_whoami", "demo_slow", "demo_fail"]


def make_config(**env: str):
    """A Config like the process's, with ``env`` on top of the real environment."""
    from voiceagent.config import load_config

    base = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "CACHE_"))}
    base.update(env)
    return load_config(base)


def production_config(**env: str):
    return make_config(
        ENVIRONMENT="production",
        SECRET_KEY="k" * 30 + "abcdefghijklmnopqrstuvwxyz0123",
        ALLOWED_HOSTS="testserver,localhost",
        API_KEYS="test-api-key-123456",
        **env,
    )


def dead_url() -> str:
    """An address where nothing listens."""
    return f"http://127.0.0.1:{free_port()}/mcp"
