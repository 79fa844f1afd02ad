"""ASGI HTTP handlers: a lean one for /api/ and Django's full stack for the rest."""

from __future__ import annotations

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler


class ApiASGIHandler(ASGIHandler):
    """Django's ASGI handler built with ``settings.API_MIDDLEWARE`` instead of ``MIDDLEWARE``."""

    def load_middleware(self, is_async: bool = False) -> None:
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


class HealthFastPath:
    """Answer ``GET /api/v1/health`` at the ASGI layer, everything else goes to ``app``.

    Liveness probes must stay cheap and answer even when the Django request path is saturated
    (each Django request costs several thread hops under ASGI). The body is the same function the
    DRF view (which documents it in the OpenAPI schema) returns; headers match the API stack.
    """

    PATH = "/api/v1/health"

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or scope.get("path") != self.PATH
            or scope.get("method") not in ("GET", "HEAD")
        ):
            await self.app(scope, receive, send)
            return
        import json
        import uuid

        from voiceagent.health.views import health_body

        body = json.dumps(health_body(), separators=(",", ":")).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", uuid.uuid4().hex[:16].encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


class PathRouter:
    """Send HTTP scopes whose path starts with ``prefix`` to ``api``, everything else to ``site``."""

    def __init__(self, api, site, prefix: str = "/api/"):
        self.api, self.site, self.prefix = api, site, prefix

    async def __call__(self, scope, receive, send):
        app = self.api if scope.get("path", "").startswith(self.prefix) else self.site
        await app(scope, receive, send)
