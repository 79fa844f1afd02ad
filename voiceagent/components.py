"""The built-in components plugged into the lifecycle's named steps, and their readiness checks.

The runtime's own components are registered here; the apps' ones (agent definitions, the
telephony caller, the MCP manager and servers, their readiness checks, the built-in tools) arrive
through :mod:`voiceagent.contributions` from each app's ``AppConfig.ready()``: this module imports
no app. :func:`install` lists the runtime's components of every step.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from django.conf import settings

from voiceagent import auth
from voiceagent.appconfig import appconfig
from voiceagent.contributions import contributions, resolve
from voiceagent.health.checks import register_check
from voiceagent.health.views import set_mcp_status_source
from voiceagent.lifecycle import Lifecycle
from voiceagent.observability import tracing

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


# --- step 6: events -----------------------------------------------------------------------------
async def start_tools() -> str:
    from voiceagent.conversation.tools import REGISTRY

    contributions.load_tool_sources()

    kinds: dict[str, int] = {}
    for name in REGISTRY.names():
        source = REGISTRY.get(name).source
        kinds[source] = kinds.get(source, 0) + 1
    return "tool registry: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))


def install_contributions(cycle: Lifecycle) -> None:
    """Wire what the installed apps contributed from their ``ready()`` (in app order)."""
    for item in contributions.components:
        start = resolve(item.start) if item.start else None
        stop = resolve(item.stop) if item.stop else None
        cycle.register(item.step, item.name, start=start, stop=stop)
    for check in contributions.checks:
        register_check(check.component, resolve(check.check))
    source = contributions.status_sources.get("mcp_servers")
    if source is not None:
        set_mcp_status_source(resolve(source))


def install(cycle: Lifecycle) -> None:
    """Register the built-in components of every step (idempotent per lifecycle)."""
    if id(cycle) in _installed:
        return
    _installed.add(id(cycle))
    cycle.deferred_timeout = settings.CONFIG.SHUTDOWN_DEFERRED_TIMEOUT
    cycle.register("core", "session-cache+channel-layer+appconfig", start=start_core, stop=stop_core)
    cycle.register("core", "auth", start=announce_auth_mode)
    cycle.register("core", "tracing", start=tracing.start, stop=tracing.stop)
    from voiceagent.runtime import runtime

    cycle.register("speech", "speech-providers", start=runtime.start_speech)
    cycle.register("speech", "stt-pool", stop=runtime.stop_stt)  # the two pools shut down in parallel
    cycle.register("speech", "tts-pool", stop=runtime.stop_tts)
    cycle.register("aoai", "chat-provider", start=runtime.start_chat, stop=runtime.stop_chat)
    cycle.register("aoai", "realtime-client", stop=runtime.stop_realtime)
    cycle.register("warmup", "providers", start=lambda: runtime.warmup(cycle.warmup_results))
    register_check("llm", runtime.llm_check)
    register_check("speech", runtime.speech_check)
    cycle.register("events", "tool-registry", start=start_tools)
    from voiceagent.transport.session_memory import feed

    cycle.register("events", "session-memory-feed", start=feed.start, stop=feed.stop)
    from voiceagent.recording.writer import stop_writer

    cycle.register("events", "recording-writer", stop=stop_writer)  # the queue written out (5 s at most)
    register_check("cache", _cache_roundtrip)
    register_check("auth_configuration", _auth_check)
    install_contributions(cycle)
    cycle.load_plugins(settings.CONFIG.LIFECYCLE_PLUGINS)
