"""REST: MCP server management under ``/api/v1/mcp`` (spec "MCP server management", exact bodies).

The views are sync DRF views; the MCP work runs on the manager's own loop through
:meth:`McpManager.run` (see :mod:`mcp_app.manager` for why). Under ASGI every request has its own
thread for sync code, so a slow MCP server only holds its own request.

Status codes: 400 validation, duplicate name, environment server delete, invalid/expired/reused
OAuth state; 401 the MCP server or the authorization server refused our credentials; 404 unknown
server; 502 unreachable server on add. ``POST /mcp/servers/test`` reports failures in its body.
No response carries a secret.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from mcp_app import serializers as s
from mcp_app.crypto import hash_value
from mcp_app.manager import McpManager, ServerConfig, ServerError, get_manager
from mcp_app.models import OAUTH_STATE_TTL, McpServer, OAuthState
from mcp_app.oauth import (
    OAuthConfig,
    OAuthError,
    authorization_url,
    check_pkce_support,
    exchange_code,
    fetch_metadata,
    new_state,
    pkce_pair,
)
from mcp_app.security import (
    InvalidServer,
    UnresolvableHost,
    check_destination,
    check_headers,
    check_stdio_command,
    check_url,
    normalize_transport,
    public_url,
)
from mcp_app.store import config_from_row, row_values, tokens_from_row
from voiceagent.errors import ApiError
from voiceagent.logging import register_secrets

logger = logging.getLogger("mcp_app.views")

TAGS = ["mcp"]
ADDED_FIELDS = ("name", "url", "transport", "timeout", "status", "tools_count", "tool_names", "has_auth")
ERRORS = {400: s.ErrorSerializer, 401: s.ErrorSerializer, 404: s.ErrorSerializer, 502: s.ErrorSerializer}


def _elapsed(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 2)


def _manager() -> McpManager:
    manager = get_manager()
    manager.start()
    return manager


def _validated(serializer_class, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _bad(exc: InvalidServer) -> ApiError:
    return ApiError(f"Invalid request: {exc}", 400, {exc.field: [str(exc)]})


def _op_timeout(config: ServerConfig) -> float:
    return 2 * config.timeout + 15.0  # detection may try two transports


def _duplicate(name: str) -> ApiError:
    return ApiError(
        f"An MCP server named {name!r} already exists; remove it first (DELETE /api/v1/mcp/servers/{name}).",
        400,
        {"name": ["already exists"]},
    )


def _not_found(name: str) -> ApiError:
    return ApiError(f"MCP server {name!r} not found.", 404)


def _oauth_config(data: dict, redirect_uri: str = "") -> OAuthConfig:
    return OAuthConfig(
        client_id=data["client_id"],
        auth_url=check_url(data["auth_url"], "oauth.auth_url"),
        token_url=check_url(data["token_url"], "oauth.token_url"),
        scope=data.get("scope") or "",
        redirect_uri=redirect_uri or data.get("redirect_uri") or "",
        client_secret=data.get("client_secret") or "",
    )


def build_config(data: dict) -> ServerConfig:
    """A runtime :class:`ServerConfig` from validated request data; :class:`InvalidServer` if not."""
    transport = normalize_transport(data.get("transport"))
    command = (data.get("command") or "").strip()
    url = (data.get("url") or "").strip()
    if transport is None and command and not url:
        transport = "stdio"
    if transport == "stdio":
        command = check_stdio_command(command)
        url = ""
    else:
        url = check_url(url)
        if command or data.get("args"):
            raise InvalidServer("command and args are only for the stdio transport.", "command")
    headers = check_headers(data.get("headers"))
    auth_token = data.get("auth_token") or ""
    if auth_token and any(k.lower() == "authorization" for k in headers):
        raise InvalidServer(
            "Give the bearer token as auth_token or as an Authorization header, not both.", "auth_token"
        )
    oauth = _oauth_config(data["oauth"]) if data.get("oauth") else None
    if oauth is not None and auth_token:
        raise InvalidServer("Use either auth_token or oauth, not both.", "oauth")
    env = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
    if env and transport != "stdio":
        raise InvalidServer("env is only for the stdio transport.", "env")
    return ServerConfig(
        name=data["name"],
        url=url,
        transport=transport,
        timeout=float(data.get("timeout") or 30.0),
        headers=headers,
        auth_token=auth_token,
        command=command,
        args=tuple(data.get("args") or ()),
        env=env,
        source="runtime",
        oauth=oauth,
    )


def _check_destinations(manager: McpManager, *urls: tuple[str, str]) -> None:
    """SSRF guard (production only): raises InvalidServer / UnresolvableHost."""
    for url, field in urls:
        if url:
            manager.run(check_destination(url, field), timeout=15)


def _notify(manager: McpManager, name: str, action: str) -> None:
    try:
        manager.run(manager.notify(name, action), timeout=5)
    except Exception as exc:
        logger.warning("MCP server %s %s: other workers not notified (%s)", name, action, exc)


def _row_record(row: McpServer) -> dict:
    from django.conf import settings

    required = {n.strip().lower() for n in settings.CONFIG.MCP_REQUIRED_SERVERS}
    return {
        "name": row.name,
        "url": public_url(row.url),
        "transport": row.transport or "streamable-http",
        "timeout": row.timeout,
        "status": row.status,
        "tools_count": len(row.tool_names or []),
        "tool_names": list(row.tool_names or []),
        "error": row.error or None,
        "source": row.source,
        "has_auth": row.has_auth,
        "required": row.name in required,
    }


def _all_records(manager: McpManager) -> list[dict]:
    """This worker's live servers, plus stored ones it has not picked up yet."""
    from django.conf import settings

    records = manager.records()
    known = {r["name"] for r in records}
    enabled = {n.strip().lower() for n in settings.CONFIG.MCP_ENABLED_SERVERS}
    for row in McpServer.objects.exclude(name__in=known):
        if row.source == "runtime" or row.name in enabled:
            records.append(_row_record(row))
    return sorted(records, key=lambda r: r["name"])


class ServerListView(APIView):
    @extend_schema(
        responses={200: s.ServerListSerializer},
        tags=TAGS,
        operation_id="mcp_servers_list",
        summary="List MCP servers",
    )
    def get(self, request):
        records = _all_records(_manager())
        return Response(
            {
                "servers": records,
                "total": len(records),
                "healthy": sum(1 for r in records if r["status"] == "healthy"),
                "unhealthy": sum(1 for r in records if r["status"] == "unhealthy"),
            }
        )

    @extend_schema(
        request=s.ServerRequestSerializer,
        responses={200: s.AddServerResponseSerializer, **ERRORS},
        tags=TAGS,
        operation_id="mcp_servers_add",
        summary="Add an MCP server: connect, discover and register its tools",
    )
    def post(self, request):
        started = time.perf_counter()
        data = _validated(s.ServerRequestSerializer, request.data)
        try:
            config = build_config(data)
        except InvalidServer as exc:
            raise _bad(exc) from None
        name = config.name
        manager = _manager()
        try:
            _check_destinations(manager, (config.url, "url"))
            if config.oauth is not None:
                _check_destinations(manager, (config.oauth.token_url, "oauth.token_url"))
        except UnresolvableHost as exc:
            raise ApiError(f"MCP server unreachable: {exc}", 502) from None
        except InvalidServer as exc:
            raise _bad(exc) from None
        if manager.has(name) or McpServer.objects.filter(name=name).exists():
            raise _duplicate(name)
        register_secrets(config.secrets())
        try:
            with transaction.atomic():
                row = McpServer.objects.create(name=name, status="unknown", **row_values(config))
        except IntegrityError:
            raise _duplicate(name) from None
        try:
            record = manager.run(manager.add(config), timeout=_op_timeout(config))
        except (ServerError, TimeoutError) as exc:
            McpServer.objects.filter(pk=row.pk).delete()
            if isinstance(exc, TimeoutError):
                manager.run(manager.remove(name), timeout=30)
                raise ApiError(f"MCP server unreachable: {name!r} did not answer in time.", 502) from None
            if exc.kind == "duplicate":
                raise _duplicate(name) from None
            if exc.kind == "auth":
                hint = " Authorize it with POST /api/v1/mcp/oauth/start." if config.oauth is not None else ""
                raise ApiError(f"Unauthorized: {exc.message}.{hint}", 401) from None
            raise ApiError(f"MCP server unreachable: {exc.message}", 502) from None
        McpServer.objects.filter(pk=row.pk).update(
            transport=record["transport"],
            status=record["status"],
            error=record["error"] or "",
            tool_names=record["tool_names"],
            last_connected_at=timezone.now(),
        )
        _notify(manager, name, "added")
        return Response(
            {
                "status": "success",
                "message": (
                    f"MCP server {name!r} added: {record['tools_count']} tools registered "
                    f"(transport {record['transport']})."
                ),
                "server": {key: record[key] for key in ADDED_FIELDS},
                "response_time_ms": _elapsed(started),
            }
        )


class ServerTestView(APIView):
    @extend_schema(
        request=s.TestRequestSerializer,
        responses={200: s.TestResponseSerializer, 400: s.ErrorSerializer},
        tags=TAGS,
        operation_id="mcp_servers_test",
        summary="Connect and discover tools without registering them",
    )
    def post(self, request):
        started = time.perf_counter()
        data = _validated(s.TestRequestSerializer, request.data)
        url = (data.get("url") or "").strip()

        def outcome(status: str, *, error: str | None = None, tools=(), transport=None) -> Response:
            tools = list(tools)
            return Response(
                {
                    "status": status,
                    "url": public_url(url),
                    "connected": status in ("healthy", "connected"),
                    "tools_count": len(tools),
                    "tools": tools,
                    "error": error,
                    "response_time_ms": _elapsed(started),
                    "transport": transport,
                }
            )

        manager = _manager()
        try:
            config = build_config(data)
            _check_destinations(manager, (config.url, "url"))
        except InvalidServer as exc:
            return outcome("error", error=str(exc))
        register_secrets(config.secrets())
        try:
            transport, tools = manager.run(manager.test(config), timeout=_op_timeout(config))
        except TimeoutError:
            return outcome("unhealthy", error=f"no answer within {config.timeout:g} s")
        except ServerError as exc:
            kind = "error" if exc.kind in ("unreachable", "config") else "unhealthy"
            return outcome(kind, error=exc.message)
        return outcome("healthy" if tools else "connected", tools=tools, transport=transport)

    @extend_schema(exclude=True)
    def delete(self, request):
        """``DELETE /mcp/servers/test`` removes a server NAMED ``test`` (this route shadows it)."""
        return ServerDetailView.as_view()(request._request, name="test")


class ServerDetailView(APIView):
    @extend_schema(
        responses={200: s.RemoveResponseSerializer, 400: s.ErrorSerializer, 404: s.ErrorSerializer},
        tags=TAGS,
        operation_id="mcp_servers_remove",
        summary="Remove a server added at runtime (its tools are unregistered)",
    )
    def delete(self, request, name: str):
        started = time.perf_counter()
        manager = _manager()
        row = McpServer.objects.filter(name=name).first()
        live = manager.record(name)
        if row is None and live is None:
            raise _not_found(name)
        source = row.source if row is not None else live["source"]
        if source == "environment":
            raise ApiError(
                f"MCP server {name!r} is configured by environment variables; remove it by changing "
                "MCP_ENABLED_SERVERS and restarting the service.",
                400,
            )
        removed = manager.run(manager.remove(name), timeout=30)
        McpServer.objects.filter(name=name).delete()
        _notify(manager, name, "removed")
        return Response(
            {
                "status": "success",
                "message": f"MCP server {name!r} removed; {removed} tools unregistered.",
                "tools_removed": removed,
                "response_time_ms": _elapsed(started),
            }
        )


SERVER_PARAM = OpenApiParameter("server", str, description="only this server's tools")


class ToolListView(APIView):
    @extend_schema(
        parameters=[SERVER_PARAM],
        responses={200: s.ToolsResponseSerializer, 404: s.ErrorSerializer},
        tags=TAGS,
        operation_id="mcp_tools_list",
        summary="Registered MCP tools, by server",
    )
    def get(self, request):
        started = time.perf_counter()
        manager = _manager()
        wanted = request.query_params.get("server") or None
        by_server: dict[str, list[str]] = {name: [] for name in manager.names()}
        for spec in manager.registry.specs():
            if spec.source == "mcp" and spec.server:
                by_server.setdefault(spec.server, []).append(spec.name)
        if wanted is not None:
            if wanted not in by_server:
                if not McpServer.objects.filter(name=wanted).exists():
                    raise _not_found(wanted)
                by_server[wanted] = []
            by_server = {wanted: by_server[wanted]}
        by_server = {k: by_server[k] for k in sorted(by_server)}
        tools = [name for names in by_server.values() for name in names]
        return Response(
            {
                "status": "success",
                "total": len(tools),
                "tools": tools,
                "by_server": by_server,
                "filter": wanted,
                "response_time_ms": _elapsed(started),
            }
        )


def _restart(reason: str) -> ApiError:
    return ApiError(f"{reason} Restart the flow with POST /api/v1/mcp/oauth/start.", 400, {"state": [reason]})


class OAuthStartView(APIView):
    @extend_schema(
        request=s.OAuthStartSerializer,
        responses={200: s.OAuthStartResponseSerializer, 400: s.ErrorSerializer, 502: s.ErrorSerializer},
        tags=TAGS,
        operation_id="mcp_oauth_start",
        summary="Start OAuth 2.0 authorization (code + PKCE S256) for an MCP server",
    )
    def post(self, request):
        data = _validated(s.OAuthStartSerializer, request.data)
        name = data["name"]
        try:
            url = check_url(data["url"])
            redirect_uri = check_url(data["redirect_uri"], "redirect_uri")
            config = _oauth_config(data["oauth"], redirect_uri)
            transport = normalize_transport(data.get("transport"))
            if transport == "stdio":
                raise InvalidServer("OAuth applies to HTTP transports, not stdio.", "transport")
        except InvalidServer as exc:
            raise _bad(exc) from None
        existing = McpServer.objects.filter(name=name).first()
        if existing is not None and existing.source == "environment":
            raise ApiError(
                f"MCP server {name!r} is configured by environment variables; set its credentials with "
                f"MCP_SERVER_{name.upper().replace('-', '_')}_AUTH_TOKEN instead.",
                400,
            )
        manager = _manager()
        try:
            _check_destinations(
                manager,
                (url, "url"),
                (config.auth_url, "oauth.auth_url"),
                (config.token_url, "oauth.token_url"),
            )
        except UnresolvableHost as exc:
            raise ApiError(f"Unreachable: {exc}", 502) from None
        except InvalidServer as exc:
            raise _bad(exc) from None
        metadata = manager.run(fetch_metadata(config.auth_url), timeout=15)
        try:
            check_pkce_support(metadata)
        except OAuthError as exc:
            raise ApiError(f"Invalid request: {exc}", 400, {"oauth": [str(exc)]}) from None
        state = new_state()
        verifier, challenge = pkce_pair()
        register_secrets([verifier, config.client_secret])
        OAuthState.objects.filter(created_at__lt=timezone.now() - dt.timedelta(days=1)).delete()
        OAuthState.objects.create(
            state_hash=hash_value(state),
            server_name=name,
            url=url,
            transport=transport or "",
            timeout=float(data.get("timeout") or 30.0),
            client_id=config.client_id,
            auth_url=config.auth_url,
            token_url=config.token_url,
            scope=config.scope,
            redirect_uri=redirect_uri,
            client_secret=config.client_secret,
            code_verifier=verifier,
        )
        return Response({"auth_url": authorization_url(config, state, challenge), "state": state})


class OAuthCallbackView(APIView):
    @extend_schema(
        request=s.OAuthCallbackSerializer,
        responses={200: s.OAuthCallbackResponseSerializer, **ERRORS},
        tags=TAGS,
        operation_id="mcp_oauth_callback",
        summary="Finish OAuth: exchange the code (with the PKCE verifier), store the tokens, connect",
    )
    def post(self, request):
        data = _validated(s.OAuthCallbackSerializer, request.data)
        flow = OAuthState.objects.filter(state_hash=hash_value(data["state"])).first()
        if flow is None:
            raise _restart("Invalid OAuth state: this state is unknown.")
        if flow.used_at is not None:
            raise _restart("Invalid OAuth state: this state was already used.")
        if flow.expired:
            raise _restart(
                f"Invalid OAuth state: it expired (a flow is valid for {OAUTH_STATE_TTL // 60} minutes)."
            )
        if not OAuthState.objects.filter(pk=flow.pk, used_at__isnull=True).update(used_at=timezone.now()):
            raise _restart("Invalid OAuth state: this state was already used.")
        config = OAuthConfig(
            client_id=flow.client_id,
            auth_url=flow.auth_url,
            token_url=flow.token_url,
            scope=flow.scope,
            redirect_uri=flow.redirect_uri,
            client_secret=flow.client_secret,
        )
        manager = _manager()
        try:
            tokens = manager.run(
                exchange_code(config, data["code"], flow.code_verifier, timeout=min(flow.timeout, 30.0)),
                timeout=45,
            )
        except OAuthError as exc:
            if exc.kind == "unreachable":
                raise ApiError(f"Authorization server unreachable: {exc}.", 502) from None
            raise ApiError(
                f"Unauthorized: {exc}. Restart the flow with POST /api/v1/mcp/oauth/start.", 401
            ) from None
        register_secrets([tokens.access_token, tokens.refresh_token])
        name = flow.server_name
        with transaction.atomic():
            row = McpServer.objects.select_for_update().filter(name=name).first()
            if row is not None and row.source == "environment":
                raise ApiError(f"MCP server {name!r} is configured by environment variables.", 400)
            if row is not None:
                base = config_from_row(row)
                server = ServerConfig(
                    **{
                        **{
                            f: getattr(base, f)
                            for f in ("name", "timeout", "headers", "command", "args", "env")
                        },
                        "url": flow.url,
                        "transport": flow.transport or base.transport,
                        "source": "runtime",
                        "oauth": config,
                        "tokens": tokens,
                    }
                )
            else:
                server = ServerConfig(
                    name=name,
                    url=flow.url,
                    transport=flow.transport or None,
                    timeout=flow.timeout,
                    source="runtime",
                    oauth=config,
                    tokens=tokens,
                )
            McpServer.objects.update_or_create(name=name, defaults=row_values(server))
        record = manager.run(manager.ensure(server, reconnect=True), timeout=_op_timeout(server))
        McpServer.objects.filter(name=name, transport="").update(
            transport=record["transport"] if record["status"] == "healthy" else ""
        )
        _notify(manager, name, "updated" if row is not None else "added")
        if record["status"] == "healthy":
            message = f"Authorized: MCP server {name!r} connected with {record['tools_count']} tools."
        else:
            message = f"Authorized and token stored for {name!r}, but connecting failed: {record['error']}"
        return Response({"success": True, "server_name": name, "message": message, "has_token": True})


class OAuthStatusView(APIView):
    @extend_schema(
        responses={200: s.OAuthStatusResponseSerializer, 404: s.ErrorSerializer},
        tags=TAGS,
        operation_id="mcp_oauth_status",
        summary="Whether an MCP server holds a usable OAuth token",
    )
    def get(self, request, name: str):
        row = McpServer.objects.filter(name=name).first()
        if row is None:
            cutoff = timezone.now() - dt.timedelta(seconds=OAUTH_STATE_TTL)
            pending = OAuthState.objects.filter(
                server_name=name, used_at__isnull=True, created_at__gte=cutoff
            )
            if not pending.exists():
                raise _not_found(name)
            return Response(
                {"server": name, "authenticated": False, "oauth_configured": True, "has_refresh_token": False}
            )
        tokens = tokens_from_row(row)
        authenticated = tokens is not None and (not tokens.expired(skew=0) or bool(tokens.refresh_token))
        return Response(
            {
                "server": name,
                "authenticated": bool(authenticated),
                "oauth_configured": row.oauth_configured,
                "has_refresh_token": bool(row.refresh_token),
            }
        )
