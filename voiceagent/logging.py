"""Structured logging: request/session ids on every line, secrets never printed.

``request_id`` and ``session_id`` live in context variables, so asyncio tasks spawned inside a
request or conversation inherit them. :class:`ContextFilter` stamps them on each record and
masks every configured secret value and bearer/api-key looking strings in the final message.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
from collections.abc import Iterable
from urllib.parse import unquote_plus

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
session_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)

_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(
        r"(?i)((?:api[-_]?key|x-api-key|access_token|refresh_token|client_secret|password|"
        r"auth_token|code_verifier)[\"']?\s*[:=]\s*[\"']?)[^\"'\s,&}]{4,}"
    ),
)
# A query parameter whose (decoded, lower-cased) name contains one of these carries a credential:
# ``?api_key=`` (the browser sockets), OAuth's ``code``/``state``/``access_token``, signed URLs'
# ``sig``/``signature``/``X-Amz-Credential``, ``password``, ``jwt``, ``client_secret`` and the like.
_SECRET_PARAM_PARTS = (
    "key",
    "token",
    "secret",
    "pass",
    "pwd",
    "auth",
    "sig",
    "credential",
    "jwt",
    "code",
    "state",
)
_QUERY_PAIR = re.compile(r"(?P<head>[?&;](?P<name>[^=&;?#\s\"'<>]{1,100})=)(?P<value>[^&;#\s\"'<>]*)")
_secrets: tuple[str, ...] = ()


def register_secrets(values: Iterable[str]) -> None:
    """Add values (API keys, tokens) that must never appear in a log line."""
    global _secrets
    merged = set(_secrets) | {v for v in values if v and len(v) >= 6}
    _secrets = tuple(sorted(merged, key=len, reverse=True))


def secret_param(name: str) -> bool:
    """Whether a query parameter named ``name`` (as sent, maybe percent-encoded) holds a credential."""
    lowered = unquote_plus(name).lower()
    return any(part in lowered for part in _SECRET_PARAM_PARTS)


def _mask_pair(match: re.Match[str]) -> str:
    if match["value"] and secret_param(match["name"]):
        return match["head"] + "***"
    return match[0]


def mask_query(text: str) -> str:
    """Mask the values of credential-named query parameters anywhere in ``text``.

    Access lines print the request target verbatim, and a key that no setting names (a stored
    key, a wrong guess, an OAuth code) cannot be masked by value, only by where it stands.
    """
    if "=" not in text:
        return text
    return _QUERY_PAIR.sub(_mask_pair, text)


def redact(text: str) -> str:
    """Mask known secret values, credential query parameters and credential-looking substrings."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, "***")
    text = mask_query(text)
    for pattern in _PATTERNS:
        text = pattern.sub(r"\1***", text)
    return text


class ContextFilter(logging.Filter):
    """Adds ``request_id``/``session_id`` and redacts the rendered message."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = getattr(record, "request_id", None) or request_id_var.get()
        record.session_id = getattr(record, "session_id", None) or session_id_var.get()
        message = record.getMessage()
        clean = redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log pipelines (production default)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "session_id": getattr(record, "session_id", None),
        }
        for key in ("step", "duration_ms", "component", "event"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_text:
            entry["exc"] = record.exc_text
        elif record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Readable single lines for development: time level logger [ids] message."""

    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(f"{k}={v}" for k in ("request_id", "session_id") if (v := getattr(record, k, None)))
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if ids:
            line += f"  [{ids}]"
        if record.exc_text:
            line += "\n" + record.exc_text
        elif record.exc_info:
            line += "\n" + redact(self.formatException(record.exc_info))
        return line
