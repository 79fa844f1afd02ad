"""The built-in components plugged into the lifecycle's named steps, and their readiness checks.

This is the one place that says what each startup step does in this service. Feature packages
add their own hooks by calling :func:`voiceagent.lifecycle.Lifecycle.register` from here (one
function per step), so reading this file tells the whole startup story.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from django.conf import settings

from voiceagent import auth
from voiceagent.appconfig import appconfig
from voiceagent.health.checks import register_check
from voiceagent.lifecycle import Lifecycle

logger = logging.getLogger("voiceagent.components")
_installed: set[int] = set()


# --- step 1: core -------------------------------------------------------------------------------
def _cache_roundtrip() -> tuple[str, str]:
    from django.core.cache import cache

    key = f"readiness:{uuid.uuid4().hex}"
    cache.set(key, "1", 10)
    ok = cache.get(key) == "1"
    cache.delete(key)
    backend = "Redis" if settings.REDIS_URL else "local memory (single process)"
    where = f" at {settings.CONFIG.CACHE_HOST}:{settings.CONFIG.CACHE_PORT}" if settings.REDIS_URL else ""
    return (
        ("healthy", f"{backend}{where}: set/get ok")
        if ok
        else ("unhealthy", f"{backend}{where}: read-back failed")
    )


async def start_core() -> str:
    status, detail = await asyncio.wait_for(asyncio.to_thread(_cache_roundtrip), 5)
    if status != "healthy":
        raise RuntimeError(f"session cache: {detail}")
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    notes = [f"cache {detail}", f"channel layer {type(layer).__name__}", appconfig().start_timer()]
    return "; ".join(notes)


async def stop_core() -> None:
    await appconfig().stop_timer()
    from agents_app.sessions import history_writer, state_writer

    await history_writer().flush()  # history queued by conversations reaches the database
    left = await state_writer().flush()  # states a cache outage held back: one last attempt
    if left:
        shown = ", ".join(left[:10]) + (" ..." if len(left) > 10 else "")
        why = "session cache unavailable at shutdown: the state of %d session(s) is not written: %s"
        logger.warning(why, len(left), shown)
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    close = getattr(layer, "close_pools", None)
    if close is not None:
        await close()


def _auth_check() -> tuple[str, str]:
    mode = auth.auth_mode()
    env = settings.CONFIG.ENVIRONMENT
    if mode == "open":
        return "healthy", f"{env}: open, no API keys configured (every request allowed)"
    if mode == "locked":
        return "unhealthy", f"{env}: API keys required but none configured (every request is refused)"
    env_keys = len(settings.CONFIG.API_KEYS)
    return "healthy", f"{env}: API keys required ({env_keys} from API_KEYS, plus stored keys)"


async def announce_auth_mode() -> str:
    status, detail = await asyncio.to_thread(_auth_check)
    if auth.auth_mode() == "open":
        logger.warning(
            "API authentication is OFF: development mode with no API keys configured. "
            "Set API_KEYS or run `manage.py create_api_key` before exposing this service."
        )
    elif status == "unhealthy":
        logger.error("API authentication: %s", detail)
    return detail


async def _telephony_check() -> tuple[str, str]:
    from calls.acs import readiness_check

    return await readiness_check()


async def stop_telephony() -> None:
    """Close the telephony caller's SDK client (its aiohttp session) on the serving loop; left open,
    the interpreter's exit reports it unclosed with a traceback."""
    from calls.acs import telephony_client

    client = telephony_client()
    if client is not None:
        await client.close()


# --- step 5: agents -----------------------------------------------------------------------------
def _load_agents() -> str:
    from django.db import close_old_connections

    from agents_app.catalog import catalog, sync_files

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


_watch_task: asyncio.Task | None = None


async def start_agents() -> str:
    from agents_app.catalog import catalog
    from agents_app.sessions import db_call

    global _watch_task
    note = await db_call(_load_agents)
    _watch_task = asyncio.get_running_loop().create_task(catalog.watch(), name="catalog-watch")
    return note


async def stop_agents() -> None:
    if _watch_task is not None:
        _watch_task.cancel()
        await asyncio.gather(_watch_task, return_exceptions=True)


def _agents_check() -> tuple[str, str]:
    from agents_app.catalog import catalog

    if not catalog.loaded:
        return "unhealthy", "agents not loaded (startup step 5 failed or has not run)"
    if not catalog.scenarios:
        return "unhealthy", "no valid scenario loaded"
    detail = f"{len(catalog.agents)} agents, {len(catalog.scenarios)} scenarios"
    if catalog.skipped:
        return "unhealthy", f"{detail}; invalid and skipped: {'; '.join(catalog.skipped)}"
    return "healthy", detail


# --- step 6: events -----------------------------------------------------------------------------
async def start_tools() -> str:
    import agents_app.builtin_tools  # noqa: F401  (registers the built-in tools)
    from voiceagent.conversation.tools import REGISTRY

    kinds: dict[str, int] = {}
    for name in REGISTRY.names():
        source = REGISTRY.get(name).source
        kinds[source] = kinds.get(source, 0) + 1
    return "tool registry: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))


def install(cycle: Lifecycle) -> None:
    """Register the built-in components of every step (idempotent per lifecycle)."""
    if id(cycle) in _installed:
        return
    _installed.add(id(cycle))
    cycle.deferred_timeout = settings.CONFIG.SHUTDOWN_DEFERRED_TIMEOUT
    cycle.register("core", "session-cache+channel-layer+appconfig", start=start_core, stop=stop_core)
    cycle.register("core", "auth", start=announce_auth_mode)
    from voiceagent.runtime import runtime

    cycle.register("speech", "speech-providers", start=runtime.start_speech)
    cycle.register("speech", "stt-pool", stop=runtime.stop_stt)  # the two pools shut down in parallel
    cycle.register("speech", "tts-pool", stop=runtime.stop_tts)
    cycle.register("aoai", "chat-provider", start=runtime.start_chat, stop=runtime.stop_chat)
    cycle.register("aoai", "realtime-client", stop=runtime.stop_realtime)
    cycle.register("services", "telephony-caller", stop=stop_telephony)
    cycle.register("warmup", "providers", start=lambda: runtime.warmup(cycle.warmup_results))
    register_check("llm", runtime.llm_check)
    register_check("speech", runtime.speech_check)
    cycle.register("agents", "definitions", start=start_agents, stop=stop_agents)
    cycle.register("events", "tool-registry", start=start_tools)
    register_check("cache", _cache_roundtrip)
    register_check("auth_configuration", _auth_check)
    register_check("telephony", _telephony_check)
    register_check("agents", _agents_check)
    import mcp_app.lifecycle

    mcp_app.lifecycle.install(cycle)
    cycle.load_plugins(settings.CONFIG.LIFECYCLE_PLUGINS)
