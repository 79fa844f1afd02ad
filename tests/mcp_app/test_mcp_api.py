"""REST: /api/v1/mcp/* against real local MCP servers: exact bodies, every status code and rule."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from django.db import connection
from django.test import override_settings
from mcp_testkit import DEMO_TOOLS, PEERS_SCRIPT, dead_url, make_config, production_config

from mcp_app.models import McpServer
from voiceagent.conversation.tools import REGISTRY

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_urls")]

RECORD_KEYS = {
    "name",
    "url",
    "transport",
    "timeout",
    "status",
    "tools_count",
    "tool_names",
    "error",
    "source",
    "has_auth",
}
ADDED_KEYS = {"name", "url", "transport", "timeout", "status", "tools_count", "tool_names", "has_auth"}
TOOL_KEYS = {"name", "prefixed_name", "description", "server_name", "input_schema"}


def post(client, path, body, **extra):
    return client.post(f"/api/v1{path}", data=json.dumps(body), content_type="application/json", **extra)


def test_add_list_call_and_remove(api_client, manager, http_peer):
    response = post(api_client, "/mcp/servers", {"name": "demo", "url": http_peer.url, "transport": "http"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"status", "message", "server", "response_time_ms"}
    assert body["status"] == "success" and isinstance(body["message"], str)
    assert isinstance(body["response_time_ms"], float)
    server = body["server"]
    assert set(server) == ADDED_KEYS
    assert server["name"] == "demo" and server["url"] == http_peer.url
    assert server["transport"] == "streamable-http" and server["timeout"] == 30.0
    assert server["status"] == "healthy" and server["has_auth"] is False
    assert server["tools_count"] == 5 and sorted(server["tool_names"]) == sorted(DEMO_TOOLS)

    listing = api_client.get("/api/v1/mcp/servers").json()
    assert set(listing) == {"servers", "total", "healthy", "unhealthy"}
    assert (listing["total"], listing["healthy"], listing["unhealthy"]) == (1, 1, 0)
    record = listing["servers"][0]
    assert set(record) >= RECORD_KEYS
    assert record["source"] == "runtime" and record["error"] is None and record["tools_count"] == 5

    tools = api_client.get("/api/v1/mcp/tools").json()
    assert set(tools) == {"status", "total", "tools", "by_server", "filter", "response_time_ms"}
    assert tools["status"] == "success" and tools["filter"] is None and tools["total"] == 5
    assert sorted(tools["by_server"]["demo"]) == sorted(DEMO_TOOLS) == sorted(tools["tools"])
    filtered = api_client.get("/api/v1/mcp/tools?server=demo").json()
    assert filtered["filter"] == "demo" and list(filtered["by_server"]) == ["demo"]
    assert api_client.get("/api/v1/mcp/tools?server=nope").status_code == 404

    result = asyncio.run(REGISTRY.execute("demo_add", {"a": 20, "b": 22}))
    assert result.ok and result.result == {"result": 42.0}

    stored = McpServer.objects.get(name="demo")
    assert (
        stored.status == "healthy" and stored.transport == "streamable-http" and len(stored.tool_names) == 5
    )

    version = REGISTRY.version
    removed = api_client.delete("/api/v1/mcp/servers/demo")
    assert removed.status_code == 200
    body = removed.json()
    assert set(body) == {"status", "message", "tools_removed", "response_time_ms"}
    assert body["status"] == "success" and body["tools_removed"] == 5
    assert REGISTRY.version > version and "demo_echo" not in REGISTRY
    assert api_client.get("/api/v1/mcp/servers").json()["total"] == 0
    assert not McpServer.objects.filter(name="demo").exists()
    missing = api_client.delete("/api/v1/mcp/servers/demo")
    assert missing.status_code == 404 and "detail" in missing.json()


def test_duplicate_name_is_400_and_says_remove_first(api_client, manager, http_peer):
    assert post(api_client, "/mcp/servers", {"name": "demo", "url": http_peer.url}).status_code == 200
    again = post(api_client, "/mcp/servers", {"name": "demo", "url": http_peer.url})
    assert again.status_code == 400
    assert "remove" in again.json()["detail"].lower()


def test_unreachable_server_is_502_and_nothing_is_kept(api_client, manager):
    response = post(api_client, "/mcp/servers", {"name": "gone", "url": dead_url(), "timeout": 3})
    assert response.status_code == 502
    assert "unreachable" in response.json()["detail"]
    assert not McpServer.objects.exists() and manager.records() == []


@pytest.mark.parametrize(
    "body",
    [
        {"name": "Bad Name", "url": "http://127.0.0.1:1/mcp"},
        {"name": "UPPER", "url": "http://127.0.0.1:1/mcp"},
        {"name": "", "url": "http://127.0.0.1:1/mcp"},
        {"name": "x" * 65, "url": "http://127.0.0.1:1/mcp"},
        {"name": "ok", "url": "ftp://127.0.0.1/mcp"},
        {"name": "ok", "url": "http://user:password@127.0.0.1/mcp"},
        {"name": "ok", "url": "not a url"},
        {"name": "ok", "url": "http://127.0.0.1/" + "a" * 3000},
        {"name": "ok"},
        {"name": "ok", "url": "http://127.0.0.1:1/mcp", "transport": "websocket"},
        {"name": "ok", "url": "http://127.0.0.1:1/mcp", "timeout": 0},
        {"name": "ok", "url": "http://127.0.0.1:1/mcp", "headers": {"Host": "evil"}},
        {"name": "ok", "url": "http://127.0.0.1:1/mcp", "unknown_field": 1},
    ],
)
def test_validation_errors_are_400(api_client, manager, body):
    response = post(api_client, "/mcp/servers", body)
    assert response.status_code == 400, response.content
    assert isinstance(response.json()["detail"], str)


def test_stdio_needs_an_allowed_command(api_client, manager):
    body = {"name": "local", "transport": "stdio", "command": sys.executable, "args": [PEERS_SCRIPT, "stdio"]}
    refused = post(api_client, "/mcp/servers", body)
    assert refused.status_code == 400 and "MCP_STDIO_ALLOWED_COMMANDS" in refused.json()["detail"]
    with override_settings(CONFIG=make_config(MCP_STDIO_ALLOWED_COMMANDS=sys.executable)):
        added = post(api_client, "/mcp/servers", body)
        assert added.status_code == 200, added.content
        assert added.json()["server"]["transport"] == "stdio"
    assert asyncio.run(REGISTRY.execute("local_echo", {"text": "pipe"})).result == {"result": "pipe"}


def test_ssrf_refused_in_production_unless_allowed(api_client, manager, http_peer):
    auth = {"HTTP_AUTHORIZATION": "Bearer test-api-key-123456"}
    with override_settings(CONFIG=production_config()):
        for url in (
            http_peer.url,
            "http://10.0.0.7/mcp",
            "http://169.254.169.254/latest",
            "http://[::1]:80/mcp",
        ):
            response = post(api_client, "/mcp/servers", {"name": "internal", "url": url}, **auth)
            assert response.status_code == 400, (url, response.content)
            assert "private" in response.json()["detail"]
        tested = post(
            api_client, "/mcp/servers/test", {"name": "internal", "url": http_peer.url}, **auth
        ).json()
        assert tested["status"] == "error" and "MCP_ALLOWED_HOSTS" in tested["error"]
    with override_settings(CONFIG=production_config(MCP_ALLOWED_HOSTS="127.0.0.1")):
        response = post(api_client, "/mcp/servers", {"name": "internal", "url": http_peer.url}, **auth)
        assert response.status_code == 200, response.content


def test_connection_test_reports_in_the_body(api_client, manager, http_peer):
    ok = post(api_client, "/mcp/servers/test", {"name": "probe", "url": http_peer.url})
    assert ok.status_code == 200
    body = ok.json()
    assert {"status", "url", "connected", "tools_count", "tools", "error", "response_time_ms"} <= set(body)
    assert body["status"] == "healthy" and body["connected"] is True and body["error"] is None
    assert body["url"] == http_peer.url and body["tools_count"] == 5
    tool = next(t for t in body["tools"] if t["name"] == "add")
    assert set(tool) == TOOL_KEYS
    assert tool["prefixed_name"] == "probe_add" and tool["server_name"] == "probe"
    assert tool["input_schema"]["type"] == "object" and tool["input_schema"]["required"] == ["a", "b"]
    assert set(tool["input_schema"]["properties"]) == {"a", "b"}
    assert "probe_add" not in REGISTRY and api_client.get("/api/v1/mcp/servers").json()["total"] == 0

    down = post(api_client, "/mcp/servers/test", {"name": "probe", "url": dead_url(), "timeout": 3}).json()
    assert down["status"] == "error" and down["connected"] is False and down["error"]
    assert down["tools"] == [] and down["tools_count"] == 0
    bad_url = post(api_client, "/mcp/servers/test", {"name": "probe", "url": "gopher://x"}).json()
    assert bad_url["status"] == "error" and "http" in bad_url["error"]


def test_connection_test_refuses_what_its_schema_refuses(api_client, manager):
    """An unknown transport or a header value that is not text is bad input (400), as the OpenAPI
    schema says, not a test that "failed" with 200."""
    bad_transport = post(
        api_client, "/mcp/servers/test", {"name": "probe", "url": dead_url(), "transport": "0"}
    )
    assert bad_transport.status_code == 400 and "transport" in bad_transport.json()["errors"]
    assert "streamable-http, http, sse or stdio" in bad_transport.json()["detail"]
    bad_header = post(
        api_client, "/mcp/servers/test", {"name": "probe", "url": dead_url(), "headers": {"X": 1}}
    )
    assert bad_header.status_code == 400 and "headers" in bad_header.json()["errors"]


def test_connection_test_of_a_server_refusing_us_is_unhealthy(api_client, manager, oauth_peer):
    body = post(api_client, "/mcp/servers/test", {"name": "probe", "url": oauth_peer.url}).json()
    assert body["status"] == "unhealthy" and "401" in body["error"] and body["connected"] is False


def test_wrong_bearer_token_is_401(api_client, manager, oauth_peer):
    response = post(
        api_client, "/mcp/servers", {"name": "secure", "url": oauth_peer.url, "auth_token": "wrong-token"}
    )
    assert response.status_code == 401 and "401" in response.json()["detail"]
    assert not McpServer.objects.exists()


def test_environment_server_cannot_be_deleted(api_client, manager, http_peer):
    from mcp_app.store import DbStore

    config = make_config(MCP_ENABLED_SERVERS="envsrv", MCP_SERVER_ENVSRV_URL=http_peer.url)
    with override_settings(CONFIG=config):
        configs = DbStore().startup_configs()
        manager.run(manager.startup(configs))
        response = api_client.delete("/api/v1/mcp/servers/envsrv")
        assert response.status_code == 400
        assert "MCP_ENABLED_SERVERS" in response.json()["detail"] and "restart" in response.json()["detail"]
        record = next(
            r for r in api_client.get("/api/v1/mcp/servers").json()["servers"] if r["name"] == "envsrv"
        )
        assert record["source"] == "environment" and record["status"] == "healthy"
        duplicate = post(api_client, "/mcp/servers", {"name": "envsrv", "url": http_peer.url})
        assert duplicate.status_code == 400
    assert "envsrv_echo" in REGISTRY


def test_unknown_server_is_404(api_client, manager):
    assert api_client.delete("/api/v1/mcp/servers/nope").status_code == 404
    assert api_client.get("/api/v1/mcp/oauth/status/nope").status_code == 404
    assert api_client.get("/api/v1/mcp/tools?server=nope").status_code == 404


def test_secrets_are_sent_but_never_returned_or_stored_plainly(api_client, manager, http_peer, caplog):
    caplog.set_level("DEBUG")
    token, header = "bearer-secret-9f8e7d", "header-secret-1a2b3c"
    body = {"name": "demo", "url": http_peer.url, "auth_token": token, "headers": {"X-Custom": header}}
    responses = [post(api_client, "/mcp/servers", body)]
    assert responses[0].status_code == 200 and responses[0].json()["server"]["has_auth"] is True

    seen = asyncio.run(REGISTRY.execute("demo_whoami", {}))
    assert seen.result == {"authorization": f"Bearer {token}", "x_custom": header}  # sent on every request

    responses += [
        api_client.get("/api/v1/mcp/servers"),
        api_client.get("/api/v1/mcp/tools"),
        api_client.get("/api/v1/mcp/oauth/status/demo"),
        post(api_client, "/mcp/servers", body),  # duplicate
        post(api_client, "/mcp/servers/test", body),
        api_client.delete("/api/v1/mcp/servers/demo"),
    ]
    for response in responses:
        text = response.content.decode()
        assert token not in text and header not in text, text
    assert token not in caplog.text and header not in caplog.text


def test_secrets_are_encrypted_at_rest(manager, http_peer):
    from mcp_app.server_config import ServerConfig
    from mcp_app.store import row_values

    config = ServerConfig(
        name="enc", url=http_peer.url, auth_token="plain-token-abcdef", headers={"X-K": "hv-123456"}
    )
    McpServer.objects.create(name="enc", **row_values(config))
    with connection.cursor() as cursor:
        cursor.execute("SELECT auth_token, headers FROM mcp_app_mcpserver WHERE name = 'enc'")
        raw_token, raw_headers = cursor.fetchone()
    assert "plain-token" not in raw_token and "hv-123456" not in raw_headers
    row = McpServer.objects.get(name="enc")
    assert row.auth_token == "plain-token-abcdef" and row.headers == {"X-K": "hv-123456"}


def test_delete_of_a_server_named_test_still_works(api_client, manager, http_peer):
    assert post(api_client, "/mcp/servers", {"name": "test", "url": http_peer.url}).status_code == 200
    response = api_client.delete("/api/v1/mcp/servers/test")
    assert response.status_code == 200 and response.json()["tools_removed"] == 5


def test_openapi_documents_the_mcp_endpoints(api_client):
    schema = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    for path in (
        "/api/v1/mcp/servers",
        "/api/v1/mcp/servers/test",
        "/api/v1/mcp/servers/{name}",
        "/api/v1/mcp/tools",
        "/api/v1/mcp/oauth/start",
        "/api/v1/mcp/oauth/callback",
        "/api/v1/mcp/oauth/status/{name}",
    ):
        assert path in paths, path
    # the route shadows /mcp/servers/{name} for a server named "test": documented as what it does
    # (it answers, and OPTIONS advertises it in Allow)
    assert "named `test`" in paths["/api/v1/mcp/servers/test"]["delete"]["summary"]
