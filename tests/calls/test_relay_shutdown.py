"""Dashboards relaying across two uvicorn workers on Redis do not keep a worker from stopping.

A closed socket's handler used to wait forever on a channel-layer receive whose cancellation was
lost (see :mod:`voiceagent.transport.channel_layer`): 4 of 8 rounds of four pairs left a worker
"Waiting for background tasks to complete" after SIGTERM (here: two rounds of eight pairs). The
workers here run without uvicorn's ``--timeout-graceful-shutdown`` bound, so only handlers that
really end let them stop."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import websockets
from servers import SERVER_START_S, base_env, free_port, migrate, start, stop_all, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.redis]

ROUNDS = 2
PAIRS = 8


async def dashboard_follows_a_conversation(a: str, b: str) -> None:
    session = f"stop-{uuid.uuid4().hex[:8]}"
    seen: list[str] = []  # what the dashboard and the browser received, for a failure's message
    async with (
        websockets.connect(f"{a}/browser/dashboard/relay?session_id={session}") as dashboard,
        websockets.connect(f"{b}/browser/conversation?session_id={session}") as browser,
    ):

        async def browser_reads() -> None:
            async for raw in browser:
                if isinstance(raw, str):
                    message = json.loads(raw)
                    seen.append(f"browser: {message['type']} {message.get('payload', {}).get('name', '')}")

        reader = asyncio.get_running_loop().create_task(browser_reads())
        await dashboard.recv()
        await browser.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
        await browser.send(json.dumps({"type": "text", "payload": {"text": "i lost my card"}}))
        try:
            async with asyncio.timeout(30):
                while True:
                    message = json.loads(await dashboard.recv())
                    name = message["payload"].get("name")
                    seen.append(f"dashboard: {message['type']} {name or ''}")
                    if name == "handoff":
                        break
        except TimeoutError:
            raise AssertionError(f"session {session}: no handoff relayed within 30 s; seen: {seen}") from None
        finally:
            reader.cancel()
    async with websockets.connect(f"{a}/browser/dashboard/relay") as everything:
        await everything.recv()


def test_workers_stop_promptly_after_dashboards_relayed_between_them(tmp_path):
    env = base_env(tmp_path, CACHE_HOST="127.0.0.1", CACHE_PORT="6379", CACHE_DB="3", LOG_LEVEL="INFO")
    env.update(STT_POOL_SIZE="1", TTS_POOL_SIZE="1")
    migrate(env)
    slow: list[str] = []
    for round_ in range(ROUNDS):
        ports = [free_port(), free_port()]
        logs = [tmp_path / f"r{round_}w{i}.log" for i in range(2)]
        procs = [start("uvicorn", p, env, log, graceful_s=None) for p, log in zip(ports, logs, strict=True)]
        try:
            for port in ports:
                wait_http(f"http://127.0.0.1:{port}/api/v1/ready", SERVER_START_S, 200)
            a, b = (f"ws://127.0.0.1:{p}/api/v1" for p in ports)

            async def pairs(a: str = a, b: str = b) -> None:
                await asyncio.gather(*(dashboard_follows_a_conversation(a, b) for _ in range(PAIRS)))

            try:
                asyncio.run(pairs())
            except AssertionError as exc:
                tails = "\n".join(f"--- {log.name}:\n{log.read_text()[-3000:]}" for log in logs)
                raise AssertionError(f"round {round_}: {exc}\n{tails}") from None
        finally:
            slow += [f"round {round_}, {line}" for line in stop_all(procs, logs, within_s=10, tail=1500)]
    assert not slow, "a worker did not stop within 10 s of SIGTERM:\n" + "\n".join(slow)
