"""Two service processes sharing Redis: a dashboard on one sees a conversation running on the other."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
import websockets
from servers import base_env, free_port, migrate, start, stop_all, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.redis]


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Two uvicorn processes on one Redis and one database: (worker a, worker b) WebSocket bases."""
    tmp_path = tmp_path_factory.mktemp("multiprocess")
    env = base_env(
        tmp_path,
        CACHE_HOST="127.0.0.1",
        CACHE_PORT="6379",
        CACHE_DB="2",
        STT_POOL_SIZE="1",
        TTS_POOL_SIZE="1",
        LOG_LEVEL="INFO",  # a slow shutdown says where it waited
    )
    migrate(env)
    ports = [free_port(), free_port()]
    logs = [tmp_path / f"w{i}.log" for i in range(len(ports))]
    procs = [start("uvicorn", port, env, log) for port, log in zip(ports, logs, strict=True)]
    try:
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/api/v1/ready", 30, 200)
        yield tuple(f"ws://127.0.0.1:{p}/api/v1" for p in ports)
    finally:
        slow = stop_all(procs, logs, within_s=60)
        assert not slow, "a worker did not stop within 60 s of SIGTERM:\n" + "\n".join(slow)


async def until(ws, predicate, timeout: float = 20) -> list[dict]:
    seen: list[dict] = []
    async with asyncio.timeout(timeout):
        while not (seen and predicate(seen[-1])):
            seen.append(json.loads(await ws.recv()))
    return seen


async def test_dashboard_on_worker_a_sees_conversation_on_worker_b(workers):
    a, b = workers
    session = f"mp-{uuid.uuid4().hex[:8]}"
    async with (
        websockets.connect(f"{a}/browser/dashboard/relay?session_id={session}") as dashboard,
        websockets.connect(f"{b}/browser/conversation?session_id={session}") as browser,
    ):
        assert json.loads(await dashboard.recv())["payload"]["name"] == "relay_connected"
        await browser.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
        await browser.send(json.dumps({"type": "text", "payload": {"text": "i lost my card"}}))
        seen = await until(
            dashboard, lambda m: m["type"] == "event" and m["payload"].get("name") == "handoff"
        )
        assert any(m["type"] == "transcript" and m["payload"]["text"] == "i lost my card" for m in seen)
        assert all(m["session_id"] == session for m in seen)
        handoff = seen[-1]["payload"]
        assert (handoff["from"], handoff["to"]) == ("concierge", "auth_agent")


async def test_dashboard_opened_on_worker_a_lists_a_conversation_already_live_on_worker_b(workers):
    a, b = workers
    session = f"mp-live-{uuid.uuid4().hex[:8]}"
    snapshot = lambda m: m["payload"].get("snapshot") and m["session_id"] == session  # noqa: E731
    async with websockets.connect(f"{b}/browser/conversation?session_id={session}") as browser:
        await browser.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
        await browser.send(json.dumps({"type": "text", "payload": {"text": "hello"}}))
        await until(browser, lambda m: m["type"] == "response" and m["payload"]["final"])
        # The registry learns the agent from the session's messages as the relay publishes them, on
        # its own task: the browser may hear the answer before worker B has written it. A dashboard
        # opened before that lists the session without its agent; one opened a moment later, with it.
        deadline = time.monotonic() + 5
        while True:
            dashboard = await websockets.connect(f"{a}/browser/dashboard/relay")
            connected = json.loads(await dashboard.recv())
            assert connected["payload"]["name"] == "relay_connected"
            assert connected["payload"]["live_sessions"] >= 1
            found = (await until(dashboard, snapshot, timeout=5))[-1]
            assert found["type"] == "event" and found["payload"]["name"] == "session_started"
            assert found["payload"]["transport"] == "browser"
            if found["payload"]["agent"] is not None or time.monotonic() > deadline:
                break
            await dashboard.close()
            await asyncio.sleep(0.1)
        async with dashboard:
            assert found["payload"]["agent"] == "concierge"
            await browser.close()
            await until(
                dashboard,
                lambda m: m["payload"].get("name") == "session_ended" and m["session_id"] == session,
            )
    async with websockets.connect(f"{a}/browser/dashboard/relay?session_id={session}") as later:
        assert json.loads(await later.recv())["payload"]["live_sessions"] == 0
