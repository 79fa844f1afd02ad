"""Startup step 8 with MCP_ENABLED_SERVERS: a failing required server is logged as an error, the
service keeps running, and /ready, /readiness reflect each server."""

from __future__ import annotations

import asyncio
import logging

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings
from mcp_testkit import dead_url, make_config

from mcp_app import lifecycle as mcp_lifecycle
from voiceagent.health import checks
from voiceagent.health import views as health_views
from voiceagent.lifecycle import Lifecycle

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_urls")]


async def _until(predicate, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_required_server_failure_is_logged_and_the_service_continues(
    api_client, manager, http_peer, monkeypatch, caplog
):
    caplog.set_level(logging.INFO)
    config = make_config(
        MCP_ENABLED_SERVERS="good,bad,optional-bad",
        MCP_REQUIRED_SERVERS="good,bad",
        MCP_SERVER_GOOD_URL=http_peer.url,
        MCP_SERVER_BAD_URL=dead_url(),
        MCP_SERVER_BAD_TIMEOUT="3",
        MCP_SERVER_OPTIONAL_BAD_URL=dead_url(),
    )
    cycle = Lifecycle()
    monkeypatch.setattr(health_views, "lifecycle", cycle)
    with override_settings(CONFIG=config):
        mcp_lifecycle.install(cycle)
        mcp_lifecycle.install(cycle)  # idempotent
        assert [h.component for h in cycle.hooks["mcp"]] == ["mcp-servers"]
        await cycle.startup()
        assert cycle.phase == "accepting"  # requests are served while MCP validation runs
        await _until(lambda: cycle.mcp_ready)

        errors = [r for r in caplog.records if r.levelno == logging.ERROR and "bad" in r.getMessage()]
        assert errors and "required MCP server bad" in errors[0].getMessage()
        warnings = [
            r for r in caplog.records if r.levelno == logging.WARNING and "optional-bad" in r.getMessage()
        ]
        assert warnings
        assert cycle.results["mcp"].status == "ok" and cycle.phase == "accepting"

        ready = await sync_to_async(api_client.get)("/api/v1/ready")
        body = ready.json()
        assert body["mcp_ready"] is True and body["mcp"] == "partial"
        assert body["details"]["mcp_servers"] == {
            "good": {"status": "healthy", "tools_count": 5},
            "bad": {"status": "unhealthy", "tools_count": 0},
            "optional-bad": {"status": "unhealthy", "tools_count": 0},
        }
        health = await sync_to_async(api_client.get)("/api/v1/health")
        assert health.status_code == 200

        readiness = await checks.run_checks()
        mcp_check = next(c for c in readiness["checks"] if c["component"] == "mcp")
        assert mcp_check["status"] == "unhealthy" and "bad (required): unhealthy" in mcp_check["detail"]

        listing = (await sync_to_async(api_client.get)("/api/v1/mcp/servers")).json()
        by_name = {r["name"]: r for r in listing["servers"]}
        assert by_name["good"]["source"] == "environment" and by_name["good"]["required"] is True
        assert by_name["bad"]["status"] == "unhealthy" and "unreachable" in by_name["bad"]["error"]
        assert (listing["total"], listing["healthy"], listing["unhealthy"]) == (3, 1, 2)

        from voiceagent.conversation.tools import REGISTRY

        assert "good_echo" in REGISTRY
        await cycle.shutdown()
        assert not manager.running and "good_echo" not in REGISTRY  # core cleanup stopped the manager


async def test_readiness_check_without_servers_is_not_configured(manager):
    with override_settings(CONFIG=make_config()):
        assert mcp_lifecycle.readiness_check() == ("not_configured", "no MCP servers configured")
        assert await mcp_lifecycle.start_servers() == "no MCP servers configured"


async def test_optional_failure_keeps_readiness_healthy(manager):
    config = make_config(MCP_ENABLED_SERVERS="extra", MCP_SERVER_EXTRA_URL=dead_url())
    with override_settings(CONFIG=config):
        note = await mcp_lifecycle.start_servers()
        assert "extra unhealthy" in note
        status, detail = mcp_lifecycle.readiness_check()
        assert status == "healthy" and "extra (environment): unhealthy" in detail
