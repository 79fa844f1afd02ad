"""REST: MCP servers under ``/api/v1/mcp`` (spec "MCP server management", exact bodies): list,
add, test a connection, remove, and the registered tools. OAuth is in :mod:`mcp_app.oauth_views`.

Status codes: 400 validation, duplicate name, environment server delete; 401 the MCP server
refused our credentials; 404 unknown server; 502 unreachable server on add.
``POST /mcp/servers/test`` reports failures in its body. No response carries a secret.
"""

from __future__ import annotations

import time

from django.db import IntegrityError, transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from mcp_app import serializers as s
from mcp_app.api_support import (
    ERRORS,
    TAGS,
    check_destinations,
    elapsed_ms,
    invalid,
    not_found,
    notify_workers,
    oauth_config,
    operation_timeout,
    started_manager,
    validated,
)
from mcp_app.failures import ServerError
from mcp_app.manager import McpManager
from mcp_app.models import McpServer
from mcp_app.security import (
    InvalidServer,
    UnresolvableHost,
    check_headers,
    check_stdio_command,
    check_url,
    normalize_transport,
    public_url,
)
from mcp_app.server_config import ServerConfig
from mcp_app.store import row_values
from voiceagent.errors import ApiError
from voiceagent.logging import register_secrets

ADDED_FIELDS = ("name", "url", "transport", "timeout", "status", "tools_count", "tool_names", "has_auth")


def _duplicate(name: str) -> ApiError:
    return ApiError(
        f"An MCP server named {name!r} already exists; remove it first (DELETE /api/v1/mcp/servers/{name}).",
        400,
        {"name": ["already exists"]},
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
    oauth = oauth_config(data["oauth"]) if data.get("oauth") else None
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
        records = _all_records(started_manager())
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
        data = validated(s.ServerRequestSerializer, request.data)
        try:
            config = build_config(data)
        except InvalidServer as exc:
            raise invalid(exc) from None
        name = config.name
        manager = started_manager()
        try:
            check_destinations(manager, (config.url, "url"))
            if config.oauth is not None:
                check_destinations(manager, (config.oauth.token_url, "oauth.token_url"))
        except UnresolvableHost as exc:
            raise ApiError(f"MCP server unreachable: {exc}", 502) from None
        except InvalidServer as exc:
            raise invalid(exc) from None
        if manager.has(name) or McpServer.objects.filter(name=name).exists():
            raise _duplicate(name)
        register_secrets(config.secrets())
        try:
            with transaction.atomic():
                row = McpServer.objects.create(name=name, status="unknown", **row_values(config))
        except IntegrityError:
            raise _duplicate(name) from None
        try:
            record = manager.run(manager.add(config), timeout=operation_timeout(config))
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
        notify_workers(manager, name, "added")
        return Response(
            {
                "status": "success",
                "message": (
                    f"MCP server {name!r} added: {record['tools_count']} tools registered "
                    f"(transport {record['transport']})."
                ),
                "server": {key: record[key] for key in ADDED_FIELDS},
                "response_time_ms": elapsed_ms(started),
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
        data = validated(s.TestRequestSerializer, request.data)
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
                    "response_time_ms": elapsed_ms(started),
                    "transport": transport,
                }
            )

        manager = started_manager()
        try:
            config = build_config(data)
            check_destinations(manager, (config.url, "url"))
        except InvalidServer as exc:
            return outcome("error", error=str(exc))
        register_secrets(config.secrets())
        try:
            transport, tools = manager.run(manager.test(config), timeout=operation_timeout(config))
        except TimeoutError:
            return outcome("unhealthy", error=f"no answer within {config.timeout:g} s")
        except ServerError as exc:
            kind = "error" if exc.kind in ("unreachable", "config") else "unhealthy"
            return outcome(kind, error=exc.message)
        return outcome("healthy" if tools else "connected", tools=tools, transport=transport)

    @extend_schema(
        responses={200: s.RemoveResponseSerializer, 400: s.ErrorSerializer, 404: s.ErrorSerializer},
        tags=TAGS,
        operation_id="mcp_servers_remove_test",
        summary="Remove the server named `test` (this path shadows /mcp/servers/{name} for it)",
    )
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
        manager = started_manager()
        row = McpServer.objects.filter(name=name).first()
        live = manager.record(name)
        if row is None and live is None:
            raise not_found(name)
        source = row.source if row is not None else live["source"]
        if source == "environment":
            raise ApiError(
                f"MCP server {name!r} is configured by environment variables; remove it by changing "
                "MCP_ENABLED_SERVERS and restarting the service.",
                400,
            )
        removed = manager.run(manager.remove(name), timeout=30)
        McpServer.objects.filter(name=name).delete()
        notify_workers(manager, name, "removed")
        return Response(
            {
                "status": "success",
                "message": f"MCP server {name!r} removed; {removed} tools unregistered.",
                "tools_removed": removed,
                "response_time_ms": elapsed_ms(started),
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
        manager = started_manager()
        wanted = request.query_params.get("server") or None
        by_server: dict[str, list[str]] = {name: [] for name in manager.names()}
        for spec in manager.registry.specs():
            if spec.source == "mcp" and spec.server:
                by_server.setdefault(spec.server, []).append(spec.name)
        if wanted is not None:
            if wanted not in by_server:
                if not McpServer.objects.filter(name=wanted).exists():
                    raise not_found(wanted)
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
                "response_time_ms": elapsed_ms(started),
            }
        )
