"""Database side of the MCP servers: rows <-> :class:`~mcp_app.server_config.ServerConfig`, and the
environment servers (``MCP_ENABLED_SERVERS`` + ``MCP_SERVER_<NAME>_*``).

The manager calls :class:`DbStore` from worker threads (``asyncio.to_thread``); every method
closes stale connections of its thread when done.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shlex
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, OperationalError, close_old_connections, transaction
from django.utils import timezone

from mcp_app.models import McpServer
from mcp_app.oauth import OAuthConfig, OAuthTokens
from mcp_app.security import InvalidServer, check_headers, check_name, check_url, normalize_transport
from mcp_app.server_config import DEFAULT_TIMEOUT, ServerConfig

logger = logging.getLogger("mcp_app.store")
T = TypeVar("T")


def env_key(name: str) -> str:
    """``my-server`` -> ``MY_SERVER`` (the ``<NAME>`` of ``MCP_SERVER_<NAME>_URL``)."""
    return name.upper().replace("-", "_")


def _env_json(raw: str | None, var: str, kind: type, problems: list[str]) -> Any:
    if raw is None or raw.strip() == "":
        return kind()
    try:
        value = json.loads(raw)
    except ValueError:
        problems.append(f"{var} is not valid JSON")
        return kind()
    if not isinstance(value, kind):
        problems.append(f"{var} must be a JSON {'object' if kind is dict else 'array'}")
        return kind()
    return value


def environment_configs(config: Any = None) -> list[ServerConfig]:
    """One config per ``MCP_ENABLED_SERVERS`` entry; problems go to ``config_error`` (never raise)."""
    config = config or settings.CONFIG
    required = {n.strip().lower() for n in config.MCP_REQUIRED_SERVERS}
    result: list[ServerConfig] = []
    for raw_name in config.MCP_ENABLED_SERVERS:
        name = raw_name.strip().lower()
        key = env_key(raw_name.strip())
        prefix = f"MCP_SERVER_{key}_"
        problems: list[str] = []
        try:
            check_name(name)
        except InvalidServer as exc:
            problems.append(str(exc))

        def raw(suffix: str, prefix: str = prefix) -> str | None:
            value = config.raw(prefix + suffix)
            return value.strip() if isinstance(value, str) else None

        url = raw("URL") or ""
        command = raw("COMMAND") or ""
        try:
            transport = normalize_transport(raw("TRANSPORT"))
        except InvalidServer as exc:
            problems.append(f"{prefix}TRANSPORT: {exc}")
            transport = None
        if transport is None and command and not url:
            transport = "stdio"
        timeout = DEFAULT_TIMEOUT
        if raw("TIMEOUT"):
            try:
                timeout = float(raw("TIMEOUT") or "")
                if not 1 <= timeout <= 300:
                    raise ValueError
            except ValueError:
                problems.append(f"{prefix}TIMEOUT accepts a number of seconds from 1 to 300")
                timeout = DEFAULT_TIMEOUT
        headers = _env_json(config.raw(prefix + "HEADERS"), prefix + "HEADERS", dict, problems)
        try:
            headers = check_headers(headers)
        except InvalidServer as exc:
            problems.append(f"{prefix}HEADERS: {exc}")
            headers = {}
        env = _env_json(config.raw(prefix + "ENV"), prefix + "ENV", dict, problems)
        env = {str(k): str(v) for k, v in env.items()}
        args_raw = raw("ARGS") or ""
        if args_raw.startswith("["):
            args = [str(a) for a in _env_json(args_raw, prefix + "ARGS", list, problems)]
        else:
            try:
                args = shlex.split(args_raw)
            except ValueError:
                problems.append(f"{prefix}ARGS could not be parsed")
                args = []
        if transport == "stdio":
            if not command:
                problems.append(f"{prefix}COMMAND is required for the stdio transport")
        elif not url:
            problems.append(f"{prefix}URL is not set")
        else:
            try:
                url = check_url(url, prefix + "URL")
            except InvalidServer as exc:
                problems.append(str(exc))
        result.append(
            ServerConfig(
                name=name,
                url=url,
                transport=transport,
                timeout=timeout,
                headers=headers,
                auth_token=raw("AUTH_TOKEN") or "",
                command=command,
                args=tuple(args),
                env=env,
                source="environment",
                required=name in required,
                config_error="; ".join(problems) or None,
            )
        )
    return result


def config_from_row(row: McpServer) -> ServerConfig:
    required = {n.strip().lower() for n in settings.CONFIG.MCP_REQUIRED_SERVERS}
    oauth = None
    if row.oauth_configured:
        oauth = OAuthConfig(
            client_id=row.oauth_client_id,
            auth_url=row.oauth_auth_url,
            token_url=row.oauth_token_url,
            scope=row.oauth_scope,
            redirect_uri=row.oauth_redirect_uri,
            client_secret=row.oauth_client_secret,
        )
    return ServerConfig(
        name=row.name,
        url=row.url,
        transport=row.transport or None,
        timeout=float(row.timeout),
        headers=dict(row.headers or {}),
        auth_token=row.auth_token or "",
        command=row.command,
        args=tuple(str(a) for a in (row.args or [])),
        env={str(k): str(v) for k, v in (row.env or {}).items()},
        source=row.source,
        required=row.name in required,
        oauth=oauth,
        tokens=tokens_from_row(row),
        created_at=row.created_at.timestamp() if row.created_at else None,
    )


def tokens_from_row(row: McpServer) -> OAuthTokens | None:
    if not row.access_token:
        return None
    expires = row.token_expires_at.timestamp() if row.token_expires_at else None
    return OAuthTokens(access_token=row.access_token, refresh_token=row.refresh_token, expires_at=expires)


def row_values(config: ServerConfig) -> dict[str, Any]:
    """Model field values for ``config`` (not the state fields)."""
    oauth = config.oauth
    values: dict[str, Any] = {
        "url": config.url,
        "transport": config.transport or "",
        "timeout": config.timeout,
        "headers": dict(config.headers),
        "auth_token": config.auth_token,
        "command": config.command,
        "args": list(config.args),
        "env": dict(config.env),
        "source": config.source,
        "oauth_client_id": oauth.client_id if oauth else "",
        "oauth_auth_url": oauth.auth_url if oauth else "",
        "oauth_token_url": oauth.token_url if oauth else "",
        "oauth_scope": oauth.scope if oauth else "",
        "oauth_redirect_uri": oauth.redirect_uri if oauth else "",
        "oauth_client_secret": oauth.client_secret if oauth else "",
    }
    if config.tokens is not None:
        values.update(token_values(config.tokens))
    return values


def token_values(tokens: OAuthTokens) -> dict[str, Any]:
    expires = (
        dt.datetime.fromtimestamp(tokens.expires_at, tz=dt.UTC) if tokens.expires_at is not None else None
    )
    return {
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token,
        "token_expires_at": expires,
    }


def _in_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Close this thread's stale connections afterwards; retry briefly when SQLite is locked."""

    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            for attempt in range(5):
                try:
                    return fn(*args, **kwargs)
                except OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 4:
                        raise
                    time.sleep(0.05 * (attempt + 1))
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            close_old_connections()

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class DbStore:
    """What the manager reads and writes in the database (called from worker threads)."""

    @_in_thread
    def load(self, name: str) -> ServerConfig | None:
        row = McpServer.objects.filter(name=name).first()
        if row is None:
            return None
        if row.source == "environment":
            # environment servers are configured by the environment, the row only mirrors them
            env = {c.name: c for c in environment_configs()}
            return env.get(name) or config_from_row(row)
        return config_from_row(row)

    @_in_thread
    def runtime_configs(self) -> list[ServerConfig]:
        return [config_from_row(row) for row in McpServer.objects.filter(source="runtime")]

    @_in_thread
    def save_state(
        self,
        name: str,
        *,
        status: str,
        error: str = "",
        tool_names: list[str] | None = None,
        transport: str | None = None,
        connected: bool = False,
    ) -> None:
        values: dict[str, Any] = {"status": status, "error": error[:2000], "updated_at": timezone.now()}
        if tool_names is not None:
            values["tool_names"] = list(tool_names)
        if connected:
            values["last_connected_at"] = timezone.now()
        rows = McpServer.objects.filter(name=name)
        rows.update(**values)
        if transport:  # a detected transport is remembered for the next connect
            rows.filter(transport="").update(transport=transport)

    @_in_thread
    def save_tokens(self, name: str, tokens: OAuthTokens) -> None:
        row = McpServer.objects.filter(name=name).first()
        if row is None:
            return
        for key, value in token_values(tokens).items():
            setattr(row, key, value)
        row.save(update_fields=["access_token", "refresh_token", "token_expires_at", "updated_at"])

    @_in_thread
    def load_tokens(self, name: str) -> OAuthTokens | None:
        row = (
            McpServer.objects.filter(name=name)
            .only("access_token", "refresh_token", "token_expires_at")
            .first()
        )
        return tokens_from_row(row) if row is not None else None

    @_in_thread
    def startup_configs(self) -> list[ServerConfig]:
        """The environment servers (mirrored into the database) plus the stored runtime servers."""
        env = environment_configs()
        try:
            sync_environment_rows(env)
            runtime = [config_from_row(r) for r in McpServer.objects.filter(source="runtime")]
        except Exception as exc:  # the database may be down: the environment servers still start
            logger.warning("MCP servers: database unavailable (%s); runtime servers not loaded", exc)
            runtime = []
        names = {c.name for c in env}
        return env + [c for c in runtime if c.name not in names]


def sync_environment_rows(configs: list[ServerConfig]) -> None:
    """Mirror the environment servers into the table; drop rows of environment servers now gone."""
    names = [c.name for c in configs]
    for config in configs:
        try:
            check_name(config.name)
        except InvalidServer:
            continue
        values = row_values(config)
        values.update(status="unknown", error=config.config_error or "")
        if McpServer.objects.filter(name=config.name, source="runtime").exists():
            logger.warning(
                "MCP server %s is configured in MCP_ENABLED_SERVERS and was also added at runtime; "
                "the environment configuration wins",
                config.name,
            )
        try:
            with transaction.atomic():
                McpServer.objects.update_or_create(name=config.name, defaults=values)
        except IntegrityError:  # another worker created it at the same moment: update theirs
            McpServer.objects.update_or_create(name=config.name, defaults=values)
    McpServer.objects.filter(source="environment").exclude(name__in=names).delete()
