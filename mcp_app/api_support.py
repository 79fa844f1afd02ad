"""What the MCP REST views share: the running manager, request validation, the SSRF guard,
the error answers and the cross-worker notice after a change.

The views are sync DRF views; the MCP work runs on the manager's own loop through
:meth:`McpManager.run` (see :mod:`mcp_app.loop_thread` for why). Under ASGI every request has its
own thread for sync code, so a slow MCP server only holds its own request.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mcp_app import serializers as s
from mcp_app.manager import McpManager, get_manager
from mcp_app.oauth import OAuthConfig
from mcp_app.security import InvalidServer, check_server_url, check_url
from mcp_app.server_config import ServerConfig
from voiceagent.errors import ApiError

logger = logging.getLogger("mcp_app.views")

TAGS = ["mcp"]
ERRORS = {400: s.ErrorSerializer, 401: s.ErrorSerializer, 404: s.ErrorSerializer, 502: s.ErrorSerializer}


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()``), for ``response_time_ms``."""
    return round((time.perf_counter() - started) * 1000.0, 2)


def started_manager() -> McpManager:
    """The process's manager, its loop running."""
    manager = get_manager()
    manager.start()
    return manager


def validated(serializer_class: type, data: Any) -> dict[str, Any]:
    """The serializer's validated data; a 400 (DRF's) if invalid."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def invalid(exc: InvalidServer) -> ApiError:
    """The 400 for a server definition that failed our checks, naming the field."""
    return ApiError(f"Invalid request: {exc}", 400, {exc.field: [str(exc)]})


def operation_timeout(config: ServerConfig) -> float:
    """How long a connect may take from the view's side."""
    return 2 * config.timeout + 15.0  # detection may try two transports


def not_found(name: str) -> ApiError:
    return ApiError(f"MCP server {name!r} not found.", 404)


def oauth_config(data: dict, redirect_uri: str = "") -> OAuthConfig:
    """An :class:`OAuthConfig` from a request's ``oauth`` object (URLs checked)."""
    return OAuthConfig(
        client_id=data["client_id"],
        auth_url=check_url(data["auth_url"], "oauth.auth_url"),
        token_url=check_url(data["token_url"], "oauth.token_url"),
        scope=data.get("scope") or "",
        redirect_uri=redirect_uri or data.get("redirect_uri") or "",
        client_secret=data.get("client_secret") or "",
    )


def check_destinations(manager: McpManager, *urls: tuple[str, str]) -> None:
    """SSRF guard (production only): raises InvalidServer / UnresolvableHost."""
    for url, field in urls:
        if url:
            check_server_url(url, field, run=lambda coro: manager.run(coro, timeout=15))


def notify_workers(manager: McpManager, name: str, action: str) -> None:
    """Tell the other workers of a change; a failure is logged (their reconcile catches up)."""
    try:
        manager.run(manager.notify(name, action), timeout=5)
    except Exception as exc:
        logger.warning("MCP server %s %s: other workers not notified (%s)", name, action, exc)
