"""Validation of what callers give us about an MCP server: names, URLs, headers, stdio commands.

Every function raises :class:`InvalidServer` with a one-line reason (the views answer 400).

SSRF: in ``production``, a runtime URL (and the OAuth endpoints we fetch) whose host resolves to
any address that is not globally routable (loopback, private, link-local, shared, reserved,
multicast, unspecified; IPv4-mapped IPv6 included) is refused unless the host is listed in
``MCP_ALLOWED_HOSTS``. Every address the name resolves to is checked (``getaddrinfo`` in a
thread). Limitation: the HTTP client resolves the name again when it connects, so a DNS answer
that changes in between (rebinding) is not caught here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import shutil
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings

NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
NAME_RULE = "lowercase letters, digits, hyphens and underscores, 1-64 characters"
MAX_URL_LENGTH = 2048
MAX_HEADERS = 50
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
# Headers the transport owns; setting them would break the protocol or smuggle requests.
_RESERVED_HEADERS = {
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "upgrade",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
}
TRANSPORT_ALIASES = {
    "streamable-http": "streamable-http",
    "http": "streamable-http",
    "sse": "sse",
    "stdio": "stdio",
}
TRANSPORTS = "streamable-http, http, sse or stdio"


class InvalidServer(ValueError):
    """The server description is not acceptable (400); ``field`` names the offending field."""

    def __init__(self, message: str, field: str = "non_field_errors"):
        super().__init__(message)
        self.field = field


class UnresolvableHost(InvalidServer):
    """The host name does not resolve: the server is unreachable (502), not a bad request."""


_SECRET_PARAM = re.compile(r"(?i)(token|key|secret|password|passwd|auth|sig|credential)")


def public_url(url: str) -> str:
    """``url`` with the values of secret-looking query parameters masked (for responses)."""
    if not url or "?" not in url:
        return url
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not any(_SECRET_PARAM.search(k) for k, _ in query):
        return url
    masked = [(k, "***" if _SECRET_PARAM.search(k) else v) for k, v in query]
    return urlunsplit(parts._replace(query=urlencode(masked, safe="*")))


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidServer(f"Invalid server name {name!r}: use {NAME_RULE}.", "name")
    return name


def normalize_transport(value: str | None) -> str | None:
    """``http`` -> ``streamable-http``; ``None``/empty means "detect" (streamable HTTP, then SSE)."""
    if value in (None, ""):
        return None
    transport = TRANSPORT_ALIASES.get(str(value).strip().lower())
    if transport is None:
        raise InvalidServer(f"Invalid transport {value!r}: use {TRANSPORTS}.", "transport")
    return transport


def check_url(url: str, field: str = "url") -> str:
    """An absolute http(s) URL without credentials, at most 2048 characters."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidServer(f"{field} is required: an http:// or https:// URL.", field)
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise InvalidServer(f"{field} is too long: at most {MAX_URL_LENGTH} characters.", field)
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise InvalidServer(f"{field} must not contain spaces or control characters.", field)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidServer(f"{field} is not a valid URL.", field) from None
    if parts.scheme not in ("http", "https"):
        raise InvalidServer(f"{field} must start with http:// or https://.", field)
    if not parts.hostname:
        raise InvalidServer(f"{field} has no host.", field)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidServer(
            f"{field} must not carry credentials; use auth_token, headers or oauth instead.", field
        )
    if port == 0:
        raise InvalidServer(f"{field} has an invalid port.", field)
    if parts.fragment:
        raise InvalidServer(f"{field} must not have a #fragment.", field)
    return url


def check_headers(headers: dict | None) -> dict[str, str]:
    if headers in (None, ""):
        return {}
    if not isinstance(headers, dict):
        raise InvalidServer("headers must be an object of header name to string value.", "headers")
    if len(headers) > MAX_HEADERS:
        raise InvalidServer(f"headers: at most {MAX_HEADERS} entries.", "headers")
    clean: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not _HEADER_NAME.match(key):
            raise InvalidServer(f"headers: {key!r} is not a valid header name.", "headers")
        if key.lower() in _RESERVED_HEADERS:
            raise InvalidServer(
                f"headers: {key} is set by the MCP transport and cannot be overridden.", "headers"
            )
        if not isinstance(value, str) or len(value) > 8192 or any(c in value for c in "\r\n\0"):
            raise InvalidServer(f"headers: the value of {key} must be a single-line string.", "headers")
        clean[key] = value
    return clean


def check_stdio_command(command: str) -> str:
    """The command must be listed in ``MCP_STDIO_ALLOWED_COMMANDS`` (by exact string or by name)."""
    if not isinstance(command, str) or not command.strip():
        raise InvalidServer("command is required for the stdio transport.", "command")
    command = command.strip()
    allowed = tuple(settings.CONFIG.MCP_STDIO_ALLOWED_COMMANDS)
    if not allowed:
        raise InvalidServer(
            "stdio servers cannot be added at runtime: MCP_STDIO_ALLOWED_COMMANDS is empty.", "command"
        )
    resolved = shutil.which(command) or command
    for entry in allowed:
        if command == entry or resolved == entry or (shutil.which(entry) or entry) == resolved:
            return command
    shown = Path(command).name
    raise InvalidServer(f"stdio command {shown!r} is not listed in MCP_STDIO_ALLOWED_COMMANDS.", "command")


def _host_allowed(host: str, port: int | None) -> bool:
    host = host.lower().strip("[]")
    for entry in settings.CONFIG.MCP_ALLOWED_HOSTS:
        entry = entry.lower().strip()
        if entry == host or (port is not None and entry == f"{host}:{port}"):
            return True
    return False


def _unsafe(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


async def check_destination(url: str, field: str = "url", *, resolve_timeout: float = 5.0) -> None:
    """Refuse private/loopback/link-local/reserved destinations in production (SSRF guard)."""
    if not settings.CONFIG.production:
        return
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if _host_allowed(host, parts.port):
        return
    try:
        addresses = (
            [host]
            if _is_ip(host)
            else await asyncio.wait_for(asyncio.to_thread(_resolve, host, port), resolve_timeout)
        )
    except (OSError, TimeoutError):
        raise UnresolvableHost(f"{field}: the host {host!r} could not be resolved.", field) from None
    bad = [a for a in addresses if _unsafe(a)]
    if bad or not addresses:
        raise InvalidServer(
            f"{field}: {host!r} resolves to a private, loopback or reserved address; refused in production "
            "(list the host in MCP_ALLOWED_HOSTS to allow it).",
            field,
        )


def check_server_url(
    url: str, field: str = "url", *, run: Callable[[Coroutine[Any, Any, None]], Any] = asyncio.run
) -> str:
    """The one validation of a URL the service will call for an MCP server, shared by the REST
    views and the admin form (before, the admin checked only the shape and saved
    ``http://127.0.0.1:<port>/internal`` in production): its shape (:func:`check_url`) and, in
    production, where it leads (:func:`check_destination`). ``run`` runs the resolution: the
    views pass the MCP manager's loop, a form (a sync thread) a loop of its own."""
    url = check_url(url, field)
    run(check_destination(url, field))
    return url


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
