"""Is the shared session cache answering? The probe behind ``/ready``'s cache condition.

With ``CACHE_HOST`` set, conversations ride out a Redis outage from process memory, but a worker
whose Redis is gone cannot serve another worker's sessions, hand a call over or answer session
readers: ``/ready`` then says 503 so that a load balancer or orchestrator can tell, and 200 again
as soon as Redis answers. Without Redis the cache is this process's memory and always answers.
"""

from __future__ import annotations

from django.conf import settings

PROBE_KEY = "readiness:probe"


def cache_state() -> dict[str, str]:
    """``{"status": "healthy"|"unhealthy"|"not_configured", "detail"}`` of the session cache, from
    one read (a missing key: a single round trip, nothing written). Sync: call it off the loop."""
    if not settings.REDIS_URL:
        return {"status": "not_configured", "detail": "local memory (single process): always available"}
    from django.core.cache import cache

    where = f"Redis at {settings.CONFIG.CACHE_HOST}:{settings.CONFIG.CACHE_PORT}"
    try:
        cache.get(PROBE_KEY)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return {"status": "unhealthy", "detail": f"{where}: {type(exc).__name__}: {first}"}
    return {"status": "healthy", "detail": f"{where}: answering"}
