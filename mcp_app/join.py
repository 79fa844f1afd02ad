"""A turn naming an MCP server this worker does not know yet waits for it, briefly.

A server added through another worker (or host) reaches this one through the change feed
(:mod:`mcp_app.change_feed`) a moment later; a conversation here whose agent names it may take its
next turn before that. Without this, the turn went on without the server's tools ("an MCP server
added through one host is used by the other's next turn" failed about one time in two). The wait is
bounded (:data:`JOIN_WAIT_S`) and tried at most once per name every :data:`RETRY_AFTER_S`, so an
agent naming a server that exists nowhere costs one short wait, not one per turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from math import inf

logger = logging.getLogger("mcp_app")

JOIN_WAIT_S = 3.0
RETRY_AFTER_S = 30.0
_tried: dict[str, float] = {}


def _joinable(manager, name: str) -> bool:
    """Unknown here (its notification is on the way), or known and still connecting (waiting for
    that connect is the wait). A server known to be down is the health loop's, not the turn's."""
    record = manager.record(name)
    return record is None or record["status"] == "unknown"


async def join_servers(names: Iterable[str]) -> bool:
    """Load ``names`` this worker's manager does not hold from the database and connect them (at
    most :data:`JOIN_WAIT_S`); whether any was tried (the caller then resolves its tools again)."""
    from mcp_app.manager import get_manager

    manager = get_manager()
    if not manager.running:
        return False
    now = time.monotonic()
    todo = [
        n
        for n in dict.fromkeys(names)
        if _joinable(manager, n) and now - _tried.get(n, -inf) >= RETRY_AFTER_S
    ]
    if not todo:
        return False
    for name in todo:
        _tried[name] = now

    async def one(name: str) -> None:
        try:
            record = await manager.arun(manager.reload(name, reconnect=False))
        except Exception as exc:  # the turn goes on without it; the health loop retries
            logger.warning("MCP server %s: not joined for a turn: %s", name, exc)
            return
        if record is not None:
            logger.info("MCP server %s joined this worker for a turn (status %s)", name, record.get("status"))

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(one(n) for n in todo)), JOIN_WAIT_S)
    return True
