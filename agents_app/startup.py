"""What agents_app contributes to the service lifecycle (wired in ``AgentsAppConfig.ready``).

Step 5 ``agents`` loads the definition files into the catalog and watches them; the ``core``
cleanup makes the history and session states that conversations queued durable before the
process exits; the ``agents`` readiness check says whether a scenario can be served.
"""

from __future__ import annotations

import asyncio
import logging

from agents_app.catalog import catalog, sync_files
from agents_app.sessions import db_call, history_writer, state_writer

logger = logging.getLogger("voiceagent.components")
_watch_task: asyncio.Task | None = None


def _load_agents() -> str:
    from django.db import close_old_connections

    try:
        result = sync_files()
        catalog.reload()
    finally:
        close_old_connections()
    errors = len(result.errors)
    note = f"{len(catalog.agents)} agents, {len(catalog.scenarios)} scenarios served"
    if errors or catalog.skipped:
        note += f"; {errors} definition error(s), skipped: {'; '.join(catalog.skipped) or 'none'}"
    return note


async def start_agents() -> str:
    global _watch_task
    note = await db_call(_load_agents)
    _watch_task = asyncio.get_running_loop().create_task(catalog.watch(), name="catalog-watch")
    return note


async def stop_agents() -> None:
    if _watch_task is not None:
        _watch_task.cancel()
        await asyncio.gather(_watch_task, return_exceptions=True)


def agents_check() -> tuple[str, str]:
    if not catalog.loaded:
        return "unhealthy", "agents not loaded (startup step 5 failed or has not run)"
    if not catalog.scenarios:
        return "unhealthy", "no valid scenario loaded"
    detail = f"{len(catalog.agents)} agents, {len(catalog.scenarios)} scenarios"
    if catalog.skipped:
        return "unhealthy", f"{detail}; invalid and skipped: {'; '.join(catalog.skipped)}"
    return "healthy", detail


async def flush_writers() -> None:
    """History queued by conversations reaches the database; states a cache outage held back get
    one last attempt."""
    await history_writer().flush()
    left = await state_writer().flush()
    if left:
        shown = ", ".join(left[:10]) + (" ..." if len(left) > 10 else "")
        why = "session cache unavailable at shutdown: the state of %d session(s) is not written: %s"
        logger.warning(why, len(left), shown)
