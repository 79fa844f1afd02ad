"""Who may open the service's own WebSockets (browser conversation, dashboard relay).

Browsers cannot set headers on a WebSocket, so besides ``Authorization``/``X-API-Key`` an API key
is accepted as ``?api_key=`` and a logged-in staff user (Django admin session) is accepted too.
Open in development when no key is configured, exactly like the REST API.

A browser sends the session cookie with a WebSocket opened by *any* page (WebSockets have no
same-origin rule, and ``SameSite=Lax`` lets a sibling subdomain through), so a socket let in by
its cookie must come from an allowed origin (:func:`origin_allowed`): the service's own, one in
``CSRF_TRUSTED_ORIGINS``, or a host of ``ALLOWED_HOSTS`` named explicitly. ``Origin: null`` and
none at all are refused. A client with an API key is let in by the key, whatever its origin.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from voiceagent import auth

logger = logging.getLogger(__name__)

UNAUTHORIZED = "unauthorized: send an API key (?api_key=) or log in"
FOREIGN_ORIGIN = "forbidden origin: a signed-in page must be served by this service (or an allowed origin)"


def query(scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def origin_allowed(scope) -> bool:
    """Whether the socket's ``Origin`` is the service's own or an allowed one (see the module)."""
    origin = _header(scope, b"origin")
    if not origin:
        return False
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        return False  # "null" (sandboxed frames, file: pages) and anything not an origin
    trusted = [o.lower().rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS]
    if f"{parts.scheme}://{parts.netloc}" in trusted:
        return True
    for entry in trusted:
        scheme, _, host = entry.partition("://")
        if host.startswith("*.") and scheme == parts.scheme and is_same_domain(parts.netloc, host[1:]):
            return True
    hosts = list(settings.ALLOWED_HOSTS)
    own = (_header(scope, b"host") or "").strip().lower()
    if own and own == parts.netloc and validate_host(split_domain_port(own)[0], hosts):
        return True  # the service's own page
    origin_host = split_domain_port(parts.netloc)[0]
    return bool(origin_host) and validate_host(origin_host, [h for h in hosts if h != "*"])


def refusal(scope) -> str | None:
    """Why the socket may not open (the close reason), None when it may. Blocking (the session)."""
    if auth.auth_mode() == "open":
        return None
    raw = query(scope).get("api_key")
    if not raw:
        meta = {}
        if (value := _header(scope, b"authorization")) is not None:
            meta["HTTP_AUTHORIZATION"] = value
        if (value := _header(scope, b"x-api-key")) is not None:
            meta["HTTP_X_API_KEY"] = value
        raw = auth.extract_key(meta)
    if raw and auth.check_key(raw):
        return None
    user = scope.get("user")
    if not (user is not None and getattr(user, "is_staff", False)):
        return UNAUTHORIZED
    if origin_allowed(scope):
        return None
    logger.warning(
        "WebSocket %s refused: staff session cookie from origin %r",
        scope.get("path", "?"),
        (_header(scope, b"origin") or "(none)")[:100],
    )
    return FOREIGN_ORIGIN


async def refused(scope) -> str | None:
    """:func:`refusal` off the event loop (reading the session may query the database)."""
    from agents_app.sessions import db_call

    return await db_call(refusal, scope)
