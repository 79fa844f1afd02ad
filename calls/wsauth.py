"""Who may open the service's own WebSockets (browser conversation, dashboard relay).

Browsers cannot set headers on a WebSocket, so besides ``Authorization``/``X-API-Key`` an API key
is accepted as ``?api_key=`` and a logged-in staff user (Django admin session) is accepted too.
Open in development when no key is configured, exactly like the REST API.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from voiceagent import auth


def query(scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _check(scope) -> bool:
    if auth.auth_mode() == "open":
        return True
    raw = query(scope).get("api_key")
    if not raw:
        meta = {}
        if (value := _header(scope, b"authorization")) is not None:
            meta["HTTP_AUTHORIZATION"] = value
        if (value := _header(scope, b"x-api-key")) is not None:
            meta["HTTP_X_API_KEY"] = value
        raw = auth.extract_key(meta)
    if raw and auth.check_key(raw):
        return True
    user = scope.get("user")
    return bool(user is not None and getattr(user, "is_staff", False))


async def authorized(scope) -> bool:
    from agents_app.sessions import db_call

    return await db_call(_check, scope)
