"""API-key authentication for the service's own endpoints (CONTRACTS.md "Common").

Keys come from ``API_KEYS`` or the :class:`~voiceagent.models.ApiKey` table (hashed). With no
key configured in ``development`` every request is allowed (a warning is logged at startup); in
``production`` a missing or wrong key is a 401 ``{"detail"}``. Anonymous endpoints declare
``permission_classes = [AllowAny]`` themselves. The OpenAPI schema and Swagger UI follow the API
(:class:`ApiDocsAccess`) unless ``API_DOCS_PUBLIC`` opens them.
"""

from __future__ import annotations

import hmac
import time

from django.conf import settings
from django.db import DatabaseError
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from voiceagent.models import ApiKey, hash_key

_CACHE_TTL = 30.0
_TOUCH_EVERY_S = 60.0
_last_touched: dict[int, float] = {}
_db_keys_cache: tuple[float, bool] = (0.0, False)


class ApiClient:
    """The authenticated caller: which key (by name) made the request."""

    is_authenticated = True

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return self.name


def _env_key_match(raw: str) -> str | None:
    for index, key in enumerate(settings.CONFIG.API_KEYS):
        if hmac.compare_digest(raw.encode(), key.encode()):
            return f"env-key-{index + 1}"
    return None


def _db_key_match(raw: str) -> str | None:
    try:
        key = ApiKey.objects.filter(key_hash=hash_key(raw), revoked=False).only("id", "name").first()
    except DatabaseError:
        return None
    if key is None:
        return None
    now = time.monotonic()
    if (
        now - _last_touched.get(key.pk, -_TOUCH_EVERY_S) >= _TOUCH_EVERY_S
    ):  # one write a minute, not per request
        _last_touched[key.pk] = now
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=_now())
    return key.name


def _now():
    from django.utils import timezone

    return timezone.now()


def db_keys_exist() -> bool:
    """Whether any active key is stored (cached briefly: it is asked on every request)."""
    global _db_keys_cache
    checked_at, exists = _db_keys_cache
    if time.monotonic() - checked_at > _CACHE_TTL:
        try:
            exists = ApiKey.objects.filter(revoked=False).exists()
        except DatabaseError:
            exists = False
        _db_keys_cache = (time.monotonic(), exists)
    return exists


def reset_key_cache() -> None:
    global _db_keys_cache
    _db_keys_cache = (0.0, False)
    _last_touched.clear()


def keys_configured() -> bool:
    return bool(settings.CONFIG.API_KEYS) or db_keys_exist()


def auth_mode() -> str:
    """``open`` (development without keys), ``api_key`` or ``locked`` (production, no keys)."""
    if keys_configured():
        return "api_key"
    return "locked" if settings.PRODUCTION else "open"


def extract_key(meta: dict) -> str | None:
    header = meta.get("HTTP_AUTHORIZATION", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    return meta.get("HTTP_X_API_KEY") or None


def check_key(raw: str) -> str | None:
    """Name of the client owning ``raw``, or None."""
    if not raw or len(raw) > 512:
        return None
    return _env_key_match(raw) or _db_key_match(raw)


class ApiKeyAuthentication(BaseAuthentication):
    """``Authorization: Bearer <key>`` or ``X-API-Key: <key>``."""

    def authenticate(self, request):
        raw = extract_key(request.META)
        if raw is None:
            return None
        name = check_key(raw)
        if name is None:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        return ApiClient(name), raw

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class ApiKeyRequired(BasePermission):
    """Allow authenticated clients; allow everyone only in open development mode."""

    message = "Authentication required: send 'Authorization: Bearer <api key>'."

    def has_permission(self, request, view) -> bool:
        if isinstance(request.user, ApiClient):
            return True
        return auth_mode() == "open"


class ApiDocsAuthentication(ApiKeyAuthentication):
    """The key of a schema or docs request; ignored when ``API_DOCS_PUBLIC`` (a stale key in a
    browser must not turn public docs into a 401)."""

    def authenticate(self, request):
        if settings.CONFIG.API_DOCS_PUBLIC:
            return None
        return super().authenticate(request)


class ApiDocsAccess(ApiKeyRequired):
    """``/schema/`` and ``/docs/``: exactly as protected as the API, or public with
    ``API_DOCS_PUBLIC``. Read per request, so a test's settings override applies."""

    def has_permission(self, request, view) -> bool:
        return bool(settings.CONFIG.API_DOCS_PUBLIC) or super().has_permission(request, view)
