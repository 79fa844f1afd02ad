"""Two workers: a server added / removed through one worker's API reaches the other worker through
the database and a real Redis channel layer (group ``mcp``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import time
import uuid

import pytest
from django.utils import timezone

from mcp_app.manager import McpManager, set_manager
from mcp_app.store import DbStore
from voiceagent.conversation.tools import ToolRegistry

pytestmark = [
    pytest.mark.slow,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("mcp_urls"),
]


def _redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the other worker did not pick the change up in time")
        time.sleep(0.05)


@pytest.fixture
def workers():
    if not _redis_up():
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    from voiceagent.transport.channel_layer import RedisChannelLayer

    prefix = f"test-mcp-{uuid.uuid4().hex[:8]}"

    def layer():  # each worker gets its own layer instance, as make_backend() gives in production
        return RedisChannelLayer(hosts=["redis://127.0.0.1:6379/0"], prefix=prefix)

    made = [
        McpManager(ToolRegistry(), store=DbStore(), layer_factory=layer, health_interval=3600)
        for _ in range(2)
    ]
    for m in made:
        m.start()
        assert m.wait_listening(10)
    previous = set_manager(made[0])  # the API runs on worker A
    yield made
    for m in made:
        m.stop()
    set_manager(previous)


def test_add_and_remove_reach_the_other_worker(api_client, workers, http_peer):
    a, b = workers
    response = api_client.post(
        "/api/v1/mcp/servers",
        data=json.dumps({"name": "shared", "url": http_peer.url}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    _wait(lambda: "shared_echo" in b.registry and b.record("shared")["status"] == "healthy")
    assert b.notifications_received == 1
    assert a.notifications_received == 0  # its own message is ignored
    result = asyncio.run(b.registry.execute("shared_echo", {"text": "from worker b"}))
    assert result.ok and result.result == {"result": "from worker b"}

    assert api_client.delete("/api/v1/mcp/servers/shared").status_code == 200
    _wait(lambda: "shared_echo" not in b.registry)
    assert b.record("shared") is None and len(b.registry) == 0


def test_reconcile_repairs_a_missed_notification(workers, http_peer):
    from mcp_app.models import McpServer
    from mcp_app.server_config import ServerConfig
    from mcp_app.store import row_values

    _, b = workers
    b.reconcile_grace = 0
    config = ServerConfig(name="quiet", url=http_peer.url)
    McpServer.objects.create(name="quiet", **row_values(config))
    McpServer.objects.update(created_at=timezone.now() - dt.timedelta(hours=1))  # not one being added now
    b.run(b.reconcile())  # what the health loop does every interval
    assert "quiet_echo" in b.registry
    McpServer.objects.all().delete()
    b.run(b.reconcile())
    assert "quiet_echo" not in b.registry
