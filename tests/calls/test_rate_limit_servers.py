"""The browser socket's message-rate limit, under a real uvicorn process whose event loop stalls.

Issue 12: real-time clients well under ``BROWSER_MAX_MESSAGES_PER_SECOND`` were closed with 1008
because the limiter counted messages when the server read them; after a stall the server reads a
client's backlog at once, and a one-second window took it for a burst. Here the server's loop is
blocked for ``STALL_S`` (``tests/support/loop_stall.py``, SIGUSR1) while compliant clients keep
sending: the backlog each one builds is larger than one second of the limit, and none of them may
be closed; a client that floods at the same time must still get 1008.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import websockets
from servers import base_env, free_port, migrate, start, wait_http
from websockets.exceptions import ConnectionClosed

pytestmark = pytest.mark.slow

LIMIT = 25  # BROWSER_MAX_MESSAGES_PER_SECOND
SEND_RATE = 20  # messages per second of a compliant client (50 ms of 16 kHz audio each)
STALL_S = 2.0  # the backlog of a compliant client: 40 messages, more than one second of the limit
FRAME = bytes(1600)  # 50 ms of PCM16 silence at 16 kHz
TEXT_EVERY = 60  # one typed turn every 3 s, counted in the client's rate
BAD_LOG = re.compile(r"Traceback|\bERROR\b|\bCRITICAL\b")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("rate-limit")
    stall_file = root / "stall.jsonl"
    env = base_env(
        root,
        LIFECYCLE_PLUGINS="loop_stall",
        STALL_FILE=str(stall_file),
        STALL_S=str(STALL_S),
        BROWSER_MAX_MESSAGES_PER_SECOND=str(LIMIT),
    )
    migrate(env)
    port = free_port()
    log = root / "server.log"
    proc = start("uvicorn", port, env, log)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=60, status=200)
        yield proc, port, stall_file, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def stall_events(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


async def open_browser(port: int):
    ws = await websockets.connect(f"ws://127.0.0.1:{port}/api/v1/browser/conversation")
    first = json.loads(await asyncio.wait_for(ws.recv(), 15))
    assert first["payload"]["name"] == "session_started", first
    return ws


async def read_until_closed(ws) -> tuple[int, str] | None:
    """Drain what the server sends; the server's close (code, reason), None when the test closed."""
    try:
        while True:
            await ws.recv()
    except ConnectionClosed as exc:
        if exc.rcvd_then_sent is False:  # our close came first
            return None
        return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (1006, "")


async def compliant(ws, stop: asyncio.Event) -> int:
    """Audio frames at SEND_RATE on a fixed schedule (never catching up with a burst), a typed turn
    every few seconds in place of a frame; returns how many messages it sent."""
    loop = asyncio.get_running_loop()
    interval = 1 / SEND_RATE
    sent = 0
    next_at = loop.time()
    while not stop.is_set():
        try:
            if sent % TEXT_EVERY == TEXT_EVERY - 1:
                await ws.send(json.dumps({"type": "text", "payload": {"text": "what is my balance"}}))
            else:
                await ws.send(FRAME)
        except ConnectionClosed:  # the server closed it: the reader reports how
            return sent
        sent += 1
        next_at = max(next_at + interval, loop.time())
        await asyncio.sleep(next_at - loop.time())
    return sent


async def flood(ws, count: int) -> None:
    try:
        for _ in range(count):
            await ws.send('{"type": "control", "payload": {"action": "pause"}}')
    except ConnectionClosed:  # closed while still sending: as it should
        pass


async def test_compliant_clients_survive_a_stalled_loop_and_a_flood_is_still_closed(server):
    proc, port, stall_file, log = server
    log_from = len(log.read_text(errors="replace"))
    clients = [await open_browser(port) for _ in range(3)]
    flooder = await open_browser(port)
    readers = [asyncio.create_task(read_until_closed(ws)) for ws in [*clients, flooder]]
    stop = asyncio.Event()
    senders = [asyncio.create_task(compliant(ws, stop)) for ws in clients]
    await asyncio.sleep(1.0)  # in step before the stall
    os.kill(proc.pid, signal.SIGUSR1)
    await flood(flooder, LIMIT * 40)  # queued behind the stall too, read after it at once
    async with asyncio.timeout(30):
        while "stall_end" not in stall_events(stall_file):
            await asyncio.sleep(0.1)
    await asyncio.sleep(3.0)  # the backlog is read and the clients go on in step
    stop.set()
    sent = await asyncio.gather(*senders)
    async with asyncio.timeout(15):
        flooded = await readers[-1]
    for ws in clients:
        await ws.close(1000, "test done")
    closes = await asyncio.gather(*readers[:-1])

    assert stall_events(stall_file).count("stall_begin") == 1
    assert closes == [None] * len(clients), f"compliant clients closed by the server: {closes}"
    assert all(n >= SEND_RATE * (STALL_S + 3) for n in sent), sent
    assert flooded == (1008, f"too many messages: the limit is {LIMIT} per second")
    text = log.read_text(errors="replace")[log_from:]
    bad = [line for line in text.splitlines() if BAD_LOG.search(line)]
    assert not bad, "\n".join(bad[:20])
