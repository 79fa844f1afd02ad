"""MCP in the service lifecycle: the manager (step 1 ``core``), the servers (deferred step 8
``mcp``), the ``/readiness`` check ``mcp`` and the ``/ready`` ``details.mcp_servers`` source.

Install with ``mcp_app.lifecycle.install(cycle)`` (idempotent per lifecycle); the module also
works as a ``LIFECYCLE_PLUGINS`` entry (``register`` = ``install``).
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings

from mcp_app.manager import McpManager, get_manager
from voiceagent.health.checks import register_check
from voiceagent.health.views import set_mcp_status_source
from voiceagent.lifecycle import Lifecycle

logger = logging.getLogger("mcp_app.lifecycle")
_installed: set[int] = set()


async def start_manager() -> str:
    manager = get_manager()
    await asyncio.to_thread(manager.start)
    return "MCP connection manager loop started"


async def stop_manager() -> None:
    await get_manager().astop()


def _startup_configs(manager: McpManager):
    loader = getattr(manager.store, "startup_configs", None)
    if loader is not None:
        return loader()
    from mcp_app.store import environment_configs

    return environment_configs()


async def start_servers() -> str:
    """Step 8: validate the configured servers (environment + stored runtime ones), register tools."""
    manager = get_manager()
    configs = await asyncio.to_thread(_startup_configs, manager)
    if not configs:
        return "no MCP servers configured"
    records = await manager.arun(manager.startup(configs))
    parts = []
    for name, record in records.items():
        mark = " (required)" if record.get("required") else ""
        parts.append(f"{name}{mark} {record['status']} ({record['tools_count']} tools)")
    return f"{len(records)} MCP servers: " + ", ".join(parts)


def status_source() -> dict[str, dict]:
    return get_manager().status_map()


def readiness_check() -> tuple[str, str]:
    """``not_configured`` with no servers; ``unhealthy`` when a REQUIRED server is unhealthy."""
    records = get_manager().records()
    if not records:
        configured = settings.CONFIG.MCP_ENABLED_SERVERS
        if configured:
            return "healthy", f"{len(configured)} MCP servers configured, not validated yet (startup step 8)"
        return "not_configured", "no MCP servers configured"
    failing_required = [r for r in records if r["required"] and r["status"] == "unhealthy"]
    parts = []
    for r in records:
        flag = "required" if r["required"] else r["source"]
        text = f"{r['name']} ({flag}): {r['status']}, {r['tools_count']} tools"
        if r["status"] == "unhealthy" and r["error"]:
            text += f" - {r['error']}"
        parts.append(text)
    return ("unhealthy" if failing_required else "healthy"), "; ".join(parts)


def install(cycle: Lifecycle) -> None:
    if id(cycle) in _installed:
        return
    _installed.add(id(cycle))
    cycle.register("core", "mcp-manager", start=start_manager, stop=stop_manager)
    cycle.register("mcp", "mcp-servers", start=start_servers)
    register_check("mcp", readiness_check)
    set_mcp_status_source(status_source)


register = install
