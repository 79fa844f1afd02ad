"""Two service processes sharing Redis: a dashboard on one sees a conversation running on the other."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import websockets
from servers import base_env, free_port, migrate, start, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.redis]


async def test_dashboard_on_worker_a_sees_conversation_on_worker_b(tmp_path):
    env = base_env(
        tmp_path,
        CACHE_HOST="127.0.0.1",
        CACHE_PORT="6379",
        CACHE_DB="2",
        STT_POOL_SIZE="1",
        TTS_POOL_SIZE="1",
        LOG_LEVEL="WARNING",
    )
    migrate(env)
    ports = [free_port(), free_port()]
    procs = [start("uvicorn", port, env, tmp_path / f"w{i}.log") for i, port in enumerate(ports)]
    try:
        for port in ports:
            await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/api/v1/ready", 30, 200)
        session = f"mp-{uuid.uuid4().hex[:8]}"
        a, b = (f"ws://127.0.0.1:{p}/api/v1" for p in ports)
        async with (
            websockets.connect(f"{a}/browser/dashboard/relay?session_id={session}") as dashboard,
            websockets.connect(f"{b}/browser/conversation?session_id={session}") as browser,
        ):
            assert json.loads(await dashboard.recv())["payload"]["name"] == "relay_connected"
            await browser.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
            await browser.send(json.dumps({"type": "text", "payload": {"text": "i lost my card"}}))
            seen = []
            async with asyncio.timeout(20):
                while not any(m["type"] == "event" and m["payload"].get("name") == "handoff" for m in seen):
                    seen.append(json.loads(await dashboard.recv()))
            assert any(m["type"] == "transcript" and m["payload"]["text"] == "i lost my card" for m in seen)
            assert all(m["session_id"] == session for m in seen)
            handoff = seen[-1]["payload"]
            assert (handoff["from"], handoff["to"]) == ("concierge", "auth_agent")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)
