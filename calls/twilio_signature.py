"""``X-Twilio-Signature``: how Twilio's webhooks and Media Streams upgrades prove where they come from.

Twilio signs each request with the account's auth token: base64 of HMAC-SHA1 over the full URL it
requested, followed (for a form POST) by every parameter's name and value in name order. The
official library's :class:`twilio.request_validator.RequestValidator` checks it (with and without
the default port, as Twilio's own signing varies). The URL is the *public* one, which behind a
proxy is not what this server sees: it is built from ``BASE_URL`` plus the path and query of the
request; a Media Stream's is ``BASE_URL`` with ``http`` -> ``ws``, ``https`` -> ``wss`` (its
upgrade has no parameters).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from twilio.request_validator import RequestValidator

__all__ = ["HEADER", "public_url", "valid_signature"]

HEADER = "x-twilio-signature"
MAX_SIGNATURE_CHARS = 200


def public_url(path: str, query: str = "", *, websocket: bool = False) -> str | None:
    """``BASE_URL`` + ``path`` (+ ``?query``) as Twilio addresses it; None without ``BASE_URL``."""
    base = settings.CONFIG.BASE_URL
    if not base:
        return None
    parts = urlsplit(base.rstrip("/"))
    scheme = parts.scheme
    if websocket:
        scheme = "wss" if scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path + path, query, ""))


def valid_signature(url: str | None, params: Any, signature: str | None) -> bool:
    """Whether ``signature`` is Twilio's for ``url`` and the form ``params`` (a QueryDict or a dict;
    empty for a WebSocket upgrade). False whenever something needed is missing."""
    token = settings.CONFIG.get("TWILIO_AUTH_TOKEN")
    if not token or not url or not signature or len(signature) > MAX_SIGNATURE_CHARS:
        return False
    return RequestValidator(token).validate(url, params or {}, signature)
