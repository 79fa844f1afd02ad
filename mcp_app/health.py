"""Health of the MCP servers: ping, reconnect, and reconcile with the database.

Health states (``status`` of a server)
--------------------------------------
- ``unknown``: configured, no connection attempted yet (environment servers before startup step
  8 reaches them, runtime servers loaded from the database before their first connect).
- ``unknown`` -> ``healthy``: ``initialize`` and the complete tool listing succeeded.
- ``unknown``/``healthy`` -> ``unhealthy`` (``error`` set): a connect failed or timed out, the
  server refused our credentials (401/403, OAuth refresh impossible), a ping failed and the one
  reconnect that follows failed too, or a tool call failed on a lost session and its one
  reconnect-and-retry failed.
- ``unhealthy`` -> ``healthy`` (``error`` cleared): a later connect, ping or call succeeds. The
  health loop pings every connected server every ``health_interval`` seconds (default 30) and
  tries to reconnect every unhealthy one, so a server that comes back turns healthy without
  anyone calling it.
- A tool that answers ``isError`` or times out does NOT change the status (the server is up).
- Tools stay registered while a server is unhealthy (calls fail fast with a clear error and
  trigger the reconnect), so conversations do not see tools flap; they go away only when the
  server is removed.

Each round also reconciles the runtime servers in memory with the database rows, which repairs a
cross-worker notification that was missed (:mod:`mcp_app.change_feed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp_app.failures import ServerError
from mcp_app.server_config import ServerConfig
from mcp_app.servers import ServerPool

logger = logging.getLogger("mcp_app.health")

HEALTH_INTERVAL = 30.0
PING_TIMEOUT = 10.0
RECONCILE_GRACE_S = 10.0


async def check(pool: ServerPool, name: str) -> str:
    """Health check one server: ping (or connect); returns the resulting status."""
    state = pool.states.get(name)
    if state is None:
        return "unknown"
    conn = state.conn
    if conn is not None and conn.alive:
        try:
            async with asyncio.timeout(min(state.config.timeout, PING_TIMEOUT)):
                await conn.request(lambda s: s.send_ping())
        except Exception as exc:
            logger.info("MCP server %s: ping failed (%s); reconnecting", name, type(exc).__name__)
            await pool.drop(state, conn)
        else:
            pool.set_status(state, "healthy", None)
            return state.status
    with contextlib.suppress(ServerError):
        await pool.connect(state)
    return state.status


async def check_all(pool: ServerPool) -> dict[str, str]:
    """Check every known server concurrently; ``{name: status}``."""
    names = list(pool.states)
    results = await asyncio.gather(*(check(pool, n) for n in names), return_exceptions=True)
    return {n: (r if isinstance(r, str) else "unhealthy") for n, r in zip(names, results, strict=True)}


async def reconcile(
    pool: ServerPool,
    grace: float,
    ensure: Callable[[ServerConfig], Awaitable[Any]],
    remove: Callable[[str], Awaitable[Any]],
) -> None:
    """Make the runtime servers in memory match the database (repairs missed notifications).

    A row younger than ``grace`` past its connect time is being added by another worker right now,
    and a server known for less than ``grace`` may not be stored yet: both are left alone.
    """
    if pool.store is None:
        return
    try:
        rows = await asyncio.to_thread(pool.store.runtime_configs)
    except Exception as exc:
        logger.debug("MCP reconcile skipped: %s", exc)
        return
    stored = {c.name: c for c in rows}
    now = time.time()
    for name, config in stored.items():
        young = config.created_at is not None and now - config.created_at < 2 * config.timeout + grace
        if name not in pool.states and not young:
            logger.info("MCP server %s found in the database; connecting", name)
            await ensure(config)
    for name, state in list(pool.states.items()):
        if (
            state.config.source == "runtime"
            and name not in stored
            and time.monotonic() - state.created > grace
        ):
            logger.info("MCP server %s no longer in the database; removing", name)
            await remove(name)


async def run_rounds(interval: Callable[[], float], one_round: Callable[[], Awaitable[Any]]) -> None:
    """Run ``one_round`` every ``interval()`` seconds until cancelled; a failed round is logged."""
    while True:
        await asyncio.sleep(interval())
        try:
            await one_round()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("MCP health check round failed")
