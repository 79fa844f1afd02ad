"""OAuth 2.0 (authorization code + PKCE S256) against a local MCP server protected by
``mcp.server.auth`` with an auto-approving in-memory authorization server."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn
from django.db import connection
from django.utils import timezone
from mcp_peers import free_port
from mcp_testkit import REDIRECT_URI
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp_app.crypto import hash_value
from mcp_app.models import McpServer, OAuthState
from voiceagent.conversation.tools import REGISTRY

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_urls")]


def post(client, path, body):
    return client.post(f"/api/v1{path}", data=json.dumps(body), content_type="application/json")


def start_body(peer, name="secure", **oauth):
    return {
        "name": name,
        "url": peer.url,
        "oauth": {
            "client_id": peer.provider.client_id,
            "auth_url": f"{peer.base}/authorize",
            "token_url": f"{peer.base}/token",
            "scope": "mcp",
            "client_secret": peer.provider.client_secret,
            **oauth,
        },
        "redirect_uri": REDIRECT_URI,
    }


def authorize(auth_url: str) -> tuple[str, str]:
    """Play the user's browser: open the authorization URL, read code + state off the redirect."""
    response = httpx.get(auth_url, follow_redirects=False, timeout=5)
    assert response.status_code in (302, 303, 307), response.text
    location = response.headers["location"]
    assert location.startswith(REDIRECT_URI)
    query = parse_qs(urlsplit(location).query)
    return query["code"][0], query["state"][0]


def run_flow(client, peer, name="secure") -> dict:
    started = post(client, "/mcp/oauth/start", start_body(peer, name))
    assert started.status_code == 200, started.content
    code, state = authorize(started.json()["auth_url"])
    finished = post(client, "/mcp/oauth/callback", {"code": code, "state": state})
    assert finished.status_code == 200, finished.content
    return finished.json()


def test_full_flow_then_tool_calls_carry_the_bearer(api_client, manager, oauth_peer):
    started = post(api_client, "/mcp/oauth/start", start_body(oauth_peer))
    assert started.status_code == 200, started.content
    body = started.json()
    assert set(body) == {"auth_url", "state"}
    query = parse_qs(urlsplit(body["auth_url"]).query)
    assert set(query) == {
        "client_id",
        "response_type",
        "redirect_uri",
        "state",
        "code_challenge",
        "code_challenge_method",
        "scope",
    }
    assert query["client_id"] == ["voice-agent"] and query["response_type"] == ["code"]
    assert query["redirect_uri"] == [REDIRECT_URI] and query["state"] == [body["state"]]
    assert query["code_challenge_method"] == ["S256"] and query["scope"] == ["mcp"]
    assert len(query["code_challenge"][0]) == 43

    pending = api_client.get("/api/v1/mcp/oauth/status/secure").json()
    assert pending == {
        "server": "secure",
        "authenticated": False,
        "oauth_configured": True,
        "has_refresh_token": False,
    }
    flow = OAuthState.objects.get()
    assert flow.state_hash == hash_value(body["state"]) and flow.state_hash != body["state"]

    code, state = authorize(body["auth_url"])
    assert state == body["state"]
    assert oauth_peer.provider.authorize_requests[0].code_challenge == query["code_challenge"][0]
    finished = post(api_client, "/mcp/oauth/callback", {"code": code, "state": state})
    assert finished.status_code == 200, finished.content
    result = finished.json()
    assert set(result) == {"success", "server_name", "message", "has_token"}
    assert result["success"] is True and result["server_name"] == "secure" and result["has_token"] is True

    status = api_client.get("/api/v1/mcp/oauth/status/secure").json()
    assert status == {
        "server": "secure",
        "authenticated": True,
        "oauth_configured": True,
        "has_refresh_token": True,
    }
    servers = api_client.get("/api/v1/mcp/servers").json()["servers"]
    assert servers[0]["name"] == "secure" and servers[0]["status"] == "healthy" and servers[0]["has_auth"]

    issued = oauth_peer.provider.issued[-1]
    seen = asyncio.run(REGISTRY.execute("secure_whoami", {}))
    assert seen.ok and seen.result["authorization"] == f"Bearer {issued}"

    # tokens, verifier and client secret are encrypted at rest; no response carries them
    with connection.cursor() as cursor:
        cursor.execute("SELECT access_token, refresh_token, oauth_client_secret FROM mcp_app_mcpserver")
        row = " ".join(cursor.fetchone())
        cursor.execute("SELECT code_verifier, client_secret FROM mcp_app_oauthstate")
        row += " ".join(cursor.fetchone())
    assert issued not in row and "client-secret-value" not in row
    for text in (started.content, finished.content, json.dumps(servers)):
        text = text.decode() if isinstance(text, bytes) else text
        assert issued not in text and "client-secret-value" not in text

    reused = post(api_client, "/mcp/oauth/callback", {"code": code, "state": state})
    assert reused.status_code == 400 and "restart the flow" in reused.json()["detail"].lower()


def test_invalid_and_expired_state_are_400(api_client, manager, oauth_peer):
    unknown = post(api_client, "/mcp/oauth/callback", {"code": "x", "state": "never-issued"})
    assert unknown.status_code == 400 and "restart the flow" in unknown.json()["detail"].lower()

    started = post(api_client, "/mcp/oauth/start", start_body(oauth_peer)).json()
    code, state = authorize(started["auth_url"])
    OAuthState.objects.update(created_at=timezone.now() - dt.timedelta(minutes=11))
    expired = post(api_client, "/mcp/oauth/callback", {"code": code, "state": state})
    assert expired.status_code == 400
    assert "expired" in expired.json()["detail"] and "restart the flow" in expired.json()["detail"].lower()
    assert not McpServer.objects.exists()


def test_a_refused_code_is_401(api_client, manager, oauth_peer):
    started = post(api_client, "/mcp/oauth/start", start_body(oauth_peer)).json()
    refused = post(api_client, "/mcp/oauth/callback", {"code": "forged-code", "state": started["state"]})
    assert refused.status_code == 401 and "invalid_grant" in refused.json()["detail"]
    again = post(api_client, "/mcp/oauth/callback", {"code": "forged-code", "state": started["state"]})
    assert again.status_code == 400  # the state was spent: the flow must restart


def test_expired_access_token_is_refreshed_on_401(api_client, manager, oauth_peer):
    run_flow(api_client, oauth_peer)
    provider = oauth_peer.provider
    old = provider.issued[-1]
    provider.expire_access_tokens()  # the server now answers 401 to the token we hold
    seen = asyncio.run(REGISTRY.execute("secure_whoami", {}))
    assert seen.ok, seen.error
    new = provider.issued[-1]
    assert new != old and seen.result["authorization"] == f"Bearer {new}" and provider.refresh_count == 1
    row = McpServer.objects.get(name="secure")
    assert row.access_token == new  # the refreshed token is stored for the other workers


def test_token_expired_by_its_own_clock_is_refreshed_before_use(api_client, manager, oauth_peer):
    run_flow(api_client, oauth_peer)
    provider = oauth_peer.provider
    McpServer.objects.filter(name="secure").update(token_expires_at=timezone.now() - dt.timedelta(minutes=1))
    record = manager.run(manager.reload("secure"))  # e.g. a restart: the stored token is past its expiry
    assert record["status"] == "healthy" and provider.refresh_count == 1
    seen = asyncio.run(REGISTRY.execute("secure_whoami", {}))
    assert seen.result["authorization"] == f"Bearer {provider.issued[-1]}"


def test_refresh_impossible_is_401_on_add(api_client, manager, oauth_peer):
    body = {"name": "secure", "url": oauth_peer.url, "oauth": start_body(oauth_peer)["oauth"]}
    response = post(api_client, "/mcp/servers", body)  # OAuth configured but no token yet
    assert response.status_code == 401 and "oauth/start" in response.json()["detail"]


def test_authorization_server_without_s256_is_refused(api_client, manager, oauth_peer):
    port = free_port()

    async def metadata(request):
        return JSONResponse(
            {
                "issuer": f"http://127.0.0.1:{port}",
                "authorization_endpoint": f"http://127.0.0.1:{port}/authorize",
                "token_endpoint": f"http://127.0.0.1:{port}/token",
                "code_challenge_methods_supported": ["plain"],
            }
        )

    app = Starlette(routes=[Route("/.well-known/oauth-authorization-server", metadata)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            pass
        body = start_body(oauth_peer, auth_url=f"http://127.0.0.1:{port}/authorize")
        response = post(api_client, "/mcp/oauth/start", body)
        assert response.status_code == 400 and "S256" in response.json()["detail"]
        assert not OAuthState.objects.exists()
    finally:
        server.should_exit = True
        thread.join(5)


def test_oauth_start_validation(api_client, manager, oauth_peer):
    bad = start_body(oauth_peer)
    bad["oauth"]["token_url"] = "file:///etc/passwd"
    assert post(api_client, "/mcp/oauth/start", bad).status_code == 400
    missing = start_body(oauth_peer)
    del missing["redirect_uri"]
    assert post(api_client, "/mcp/oauth/start", missing).status_code == 400
