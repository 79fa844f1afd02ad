"""Admin: add, test and remove MCP servers; secrets are write-only."""

from __future__ import annotations

import pytest

from mcp_app.models import McpServer
from voiceagent.conversation.tools import REGISTRY

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_urls")]

ADD = "/admin/mcp_app/mcpserver/add/"
SECRET = "admin-secret-token-42"


def form(**values) -> dict:
    data = {
        "name": "demo",
        "url": "",
        "transport": "",
        "timeout": "5",
        "command": "",
        "args": "[]",
        "oauth_client_id": "",
        "oauth_auth_url": "",
        "oauth_token_url": "",
        "oauth_scope": "",
        "oauth_redirect_uri": "",
        "new_auth_token": "",
        "headers_json": "",
        "env_json": "",
        "new_oauth_client_secret": "",
    }
    data.update(values)
    return data


def test_add_edit_test_and_delete_through_the_admin(admin_client, manager, http_peer):
    response = admin_client.post(
        ADD,
        form(url=http_peer.url, new_auth_token=SECRET, headers_json='{"X-Custom": "hdr-value-77"}'),
        follow=True,
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "connected over streamable-http: 5 tools registered" in text
    row = McpServer.objects.get(name="demo")
    assert (
        row.source == "runtime" and row.auth_token == SECRET and row.headers == {"X-Custom": "hdr-value-77"}
    )
    assert "demo_whoami" in REGISTRY

    change = f"/admin/mcp_app/mcpserver/{row.pk}/change/"
    page = admin_client.get(change).content.decode()
    assert SECRET not in page and "hdr-value-77" not in page  # never rendered back
    assert "bearer token, headers" in page  # only which secrets are stored

    response = admin_client.post(
        change, form(url=http_peer.url, timeout="6"), follow=True
    )  # secrets left blank
    assert response.status_code == 200
    row.refresh_from_db()
    assert row.timeout == 6 and row.auth_token == SECRET and row.headers == {"X-Custom": "hdr-value-77"}

    changelist = "/admin/mcp_app/mcpserver/"
    tested = admin_client.post(
        changelist, {"action": "test_connection", "_selected_action": [row.pk]}, follow=True
    ).content.decode()
    assert "demo: connected over streamable-http, 5 tools" in tested.lower()

    cleared = admin_client.post(change, form(url=http_peer.url, clear=["auth_token"]), follow=True)
    assert cleared.status_code == 200
    row.refresh_from_db()
    assert row.auth_token == "" and row.headers == {"X-Custom": "hdr-value-77"}

    deleted = admin_client.post(f"/admin/mcp_app/mcpserver/{row.pk}/delete/", {"post": "yes"}, follow=True)
    assert deleted.status_code == 200
    assert not McpServer.objects.exists() and "demo_whoami" not in REGISTRY and manager.records() == []


def test_admin_validates_like_the_api(admin_client, manager):
    response = admin_client.post(ADD, form(name="Bad Name", url="ftp://x"))
    assert response.status_code == 200  # the form comes back with errors
    assert not McpServer.objects.exists()
    response = admin_client.post(ADD, form(name="local", transport="stdio", command="bash"))
    assert "MCP_STDIO_ALLOWED_COMMANDS" in response.content.decode()
    assert not McpServer.objects.exists()


def test_admin_refuses_internal_addresses_in_production_like_the_api(admin_client, manager, http_peer):
    """Issue 31.4: the form saved http://127.0.0.1:<port>/internal in production, and the service
    then POSTed there; REST refused it. Both now share mcp_app.security.check_server_url."""
    from django.test import override_settings
    from mcp_testkit import production_config

    internal = http_peer.url.replace("/mcp", "/internal")
    with override_settings(CONFIG=production_config()):
        for url in (internal, "http://169.254.169.254/latest", "http://[::1]:80/mcp", "http://10.0.0.7/mcp"):
            response = admin_client.post(ADD, form(name="internal", url=url))
            assert response.status_code == 200 and "MCP_ALLOWED_HOSTS" in response.content.decode(), url
        public = "http://93.184.216.34/mcp"  # a global address: only the token URL is internal
        response = admin_client.post(
            ADD, form(name="internal", url=public, oauth_token_url="http://127.0.0.1:9/t")
        )
        assert "oauth_token_url: &#x27;127.0.0.1&#x27; resolves to a private" in response.content.decode()
    assert not McpServer.objects.exists() and manager.records() == []


def test_environment_rows_are_read_only(admin_client, manager):
    row = McpServer.objects.create(name="envsrv", url="http://127.0.0.1:1/mcp", source="environment")
    page = admin_client.get(f"/admin/mcp_app/mcpserver/{row.pk}/change/")
    assert page.status_code == 200
    assert admin_client.post(f"/admin/mcp_app/mcpserver/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert McpServer.objects.filter(name="envsrv").exists()
