"""REST: OAuth 2.0 for MCP servers under ``/api/v1/mcp/oauth`` (authorization code + PKCE S256).

Status codes: 400 validation, invalid/expired/reused OAuth state, environment server; 401 the
authorization server refused the code; 404 unknown server; 502 an authorization server that
cannot be reached. No response carries a secret.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from mcp_app import serializers as s
from mcp_app.api_support import (
    ERRORS,
    TAGS,
    check_destinations,
    invalid,
    not_found,
    notify_workers,
    oauth_config,
    operation_timeout,
    started_manager,
    validated,
)
from mcp_app.crypto import hash_value
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
from mcp_app.security import InvalidServer, UnresolvableHost, check_url, normalize_transport
from mcp_app.server_config import ServerConfig
from mcp_app.store import config_from_row, row_values, tokens_from_row
from voiceagent.errors import ApiError
from voiceagent.logging import register_secrets


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
        data = validated(s.OAuthStartSerializer, request.data)
        name = data["name"]
        try:
            url = check_url(data["url"])
            redirect_uri = check_url(data["redirect_uri"], "redirect_uri")
            config = oauth_config(data["oauth"], redirect_uri)
            transport = normalize_transport(data.get("transport"))
            if transport == "stdio":
                raise InvalidServer("OAuth applies to HTTP transports, not stdio.", "transport")
        except InvalidServer as exc:
            raise invalid(exc) from None
        existing = McpServer.objects.filter(name=name).first()
        if existing is not None and existing.source == "environment":
            raise ApiError(
                f"MCP server {name!r} is configured by environment variables; set its credentials with "
                f"MCP_SERVER_{name.upper().replace('-', '_')}_AUTH_TOKEN instead.",
                400,
            )
        manager = started_manager()
        try:
            check_destinations(
                manager,
                (url, "url"),
                (config.auth_url, "oauth.auth_url"),
                (config.token_url, "oauth.token_url"),
            )
        except UnresolvableHost as exc:
            raise ApiError(f"Unreachable: {exc}", 502) from None
        except InvalidServer as exc:
            raise invalid(exc) from None
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
        data = validated(s.OAuthCallbackSerializer, request.data)
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
        manager = started_manager()
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
        record = manager.run(manager.ensure(server, reconnect=True), timeout=operation_timeout(server))
        McpServer.objects.filter(name=name, transport="").update(
            transport=record["transport"] if record["status"] == "healthy" else ""
        )
        notify_workers(manager, name, "updated" if row is not None else "added")
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
                raise not_found(name)
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
