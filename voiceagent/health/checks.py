"""Deep readiness checks (``GET /readiness``): concurrent, each bounded by a timeout.

Components register a check under one of the contract's component names; the last registration
wins, so a component built later replaces the placeholder. A check returns ``(status, detail)``
with status ``healthy`` | ``unhealthy`` | ``not_configured``; raising or timing out counts as
``unhealthy``. Sync checks run in a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

COMPONENTS = ("cache", "llm", "speech", "telephony", "agents", "auth_configuration", "mcp")
CHECK_TIMEOUT_S = 2.0

CheckFn = Callable[[], "tuple[str, str] | Awaitable[tuple[str, str]]"]
_checks: dict[str, CheckFn] = {}


def register_check(component: str, fn: CheckFn) -> None:
    """Install (or replace) the check of ``component``."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown readiness component {component!r}; one of {', '.join(COMPONENTS)}")
    _checks[component] = fn


def registered() -> dict[str, CheckFn]:
    return dict(_checks)


async def _run_one(component: str, fn: CheckFn | None, timeout: float) -> dict:
    began = time.perf_counter()
    if fn is None:
        status, detail = "not_configured", "no component registered for this check"
    else:
        try:
            if inspect.iscoroutinefunction(fn):
                status, detail = await asyncio.wait_for(fn(), timeout)
            else:
                status, detail = await asyncio.wait_for(asyncio.to_thread(_sync_call, fn), timeout)
        except TimeoutError:
            status, detail = "unhealthy", f"check timed out after {timeout:g} s"
        except Exception as exc:
            status, detail = "unhealthy", f"{type(exc).__name__}: {exc}"
    return {
        "component": component,
        "status": status,
        "detail": detail,
        "check_time_ms": round((time.perf_counter() - began) * 1000, 2),
    }


def _sync_call(fn: CheckFn):
    from django.db import close_old_connections

    try:
        return fn()
    finally:
        close_old_connections()


async def run_checks(timeout: float = CHECK_TIMEOUT_S) -> dict:
    """Run every component's check concurrently; the ``/readiness`` body."""
    results = await asyncio.gather(*(_run_one(c, _checks.get(c), timeout) for c in COMPONENTS))
    healthy = all(r["status"] != "unhealthy" for r in results)
    return {"status": "ready" if healthy else "unhealthy", "timestamp": time.time(), "checks": list(results)}
