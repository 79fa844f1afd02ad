"""Close codes and reasons as outside clients get them from the real servers.

The service is started the way ``scripts/run`` starts it (daphne) and the way the README scales it
out (uvicorn, one and two workers), and a ``websockets`` client checks the code AND the reason of
every documented refusal and end on each WebSocket endpoint. Daphne (autobahn's ``sendClose``)
used to refuse 1003/1008/1009/1013 (the client got 1011 and the log a traceback) and dropped every
reason; uvicorn (websockets) refuses a reason over 123 bytes. See ``voiceagent/servers_compat.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import websockets
from servers import base_env, free_port, migrate, start, wait_http
from websockets.exceptions import ConnectionClosed

pytestmark = pytest.mark.slow

KEY = "close-codes-test-key-0123456789"
MAX_BYTES = 1024
RATE = 5
IDLE_S = 5
CLOSE_TIMEOUT = 15.0
BAD_LOG = re.compile(r"Traceback|invalid close code|\bERROR\b|\bCRITICAL\b")


@dataclass
class Server:
    kind: str
    workers: int
    port: int
    log: Path
    log_from: int = 0  # lines before the server was ready (its startup) are not this test's business

    def ws(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}/api/v1/{path}"

    def assert_log_clean(self) -> None:
        text = self.log.read_text(errors="replace")[self.log_from :]
        bad = [line for line in text.splitlines() if BAD_LOG.search(line)]
        assert not bad, f"{self.kind} x{self.workers} logged:\n" + "\n".join(bad[:20]) + "\n" + text[-3000:]


@pytest.fixture(
    scope="module",
    params=[("daphne", 1), ("uvicorn", 1), ("uvicorn", 2)],
    ids=["daphne", "uvicorn", "uvicorn-x2"],
)
def server(request, tmp_path_factory):
    kind, workers = request.param
    root = tmp_path_factory.mktemp(f"close-{kind}-{workers}")
    env = base_env(
        root,
        API_KEYS=KEY,
        BROWSER_MAX_MESSAGE_BYTES=str(MAX_BYTES),
        BROWSER_MAX_MESSAGES_PER_SECOND=str(RATE),
        WEBSOCKET_RATE_BURST_S="1",  # the flood test's 4 seconds' worth of messages overflow it
        BROWSER_MAX_CONNECTIONS="1",
        BROWSER_IDLE_TIMEOUT_S=str(IDLE_S),
        TELEPHONY_MAX_STREAMS="1",
    )
    migrate(env)
    port = free_port()
    log = root / "server.log"
    proc = start(kind, port, env, log, workers=workers)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=60, status=200)
        yield Server(kind, workers, port, log, len(log.read_text(errors="replace")))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def closed_with(ws, timeout: float = CLOSE_TIMEOUT) -> tuple[int, str]:
    """Read until the server closes; its close code and reason (1006 when no close frame came)."""
    try:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    except ConnectionClosed as exc:
        return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (1006, "")


async def browser(server: Server, key: str | None = KEY):
    """An admitted browser conversation socket (``session_started`` read) or the refused one."""
    return await websockets.connect(server.ws("browser/conversation" + (f"?api_key={key}" if key else "")))


async def started(ws) -> bool:
    """True when the socket got ``session_started`` (admitted), False when it closed first."""
    try:
        message = json.loads(await asyncio.wait_for(ws.recv(), CLOSE_TIMEOUT))
    except ConnectionClosed:
        return False
    assert message["payload"]["name"] == "session_started", message
    return True


async def test_missing_or_wrong_api_key_is_1008(server):
    reason = "unauthorized: send an API key (?api_key=) or log in"
    for key in (None, "wrong-key"):
        async with await browser(server, key) as ws:
            assert await closed_with(ws) == (1008, reason)
    async with websockets.connect(server.ws("browser/dashboard/relay")) as ws:
        assert await closed_with(ws) == (1008, reason)
    server.assert_log_clean()


async def test_oversized_message_is_1009(server):
    async with await browser(server) as ws:
        assert await started(ws)
        await ws.send("x" * (MAX_BYTES + 1))
        assert await closed_with(ws) == (
            1009,
            f"message too big: {MAX_BYTES + 1} bytes, the limit is {MAX_BYTES}",
        )
    server.assert_log_clean()


async def test_flooding_is_1008(server):
    async with await browser(server) as ws:
        assert await started(ws)
        try:
            for _ in range(RATE * 4):
                await ws.send('{"type": "nothing"}')
        except ConnectionClosed:  # the server closed while we were still sending: as it should
            pass
        assert await closed_with(ws) == (1008, f"too many messages: the limit is {RATE} per second")
    server.assert_log_clean()


async def test_connection_limit_is_1013_and_idle_ends_with_1000(server):
    """BROWSER_MAX_CONNECTIONS=1 per process: of workers + 1 sockets one is refused; the admitted
    ones end cleanly after BROWSER_IDLE_TIMEOUT_S (the server releases them before it closes)."""
    admitted, refused = [], None
    try:
        for _ in range(server.workers + 1):
            ws = await browser(server)
            if await started(ws):
                admitted.append(ws)
            else:
                refused = ws
                break
        assert refused is not None, f"{len(admitted)} sockets admitted with a limit of 1 per process"
        assert await closed_with(refused) == (1013, "server busy: too many conversations, try again later")
        for ws in admitted:
            assert await closed_with(ws, IDLE_S + CLOSE_TIMEOUT) == (1000, f"idle for {IDLE_S} s")
    finally:
        for ws in [*admitted, refused]:
            if ws is not None:
                await ws.close()
    server.assert_log_clean()


async def test_media_stream_limit_is_1013_and_a_bad_rate_1003(server):
    """TELEPHONY_MAX_STREAMS=1 per process; the admitted simulator streams are ended by an
    unsupported sample rate (1003), which releases them before the close."""
    url = server.ws("media/stream")
    async with websockets.connect(url) as ws:
        assert await closed_with(ws) == (
            1008,
            "missing x-ms-call-connection-id header (or ?scenario= for a simulator)",
        )
    admitted, refused = [], None
    try:
        for _ in range(server.workers + 1):
            ws = await websockets.connect(url + "?scenario=banking&events=1")
            try:
                first = json.loads(await asyncio.wait_for(ws.recv(), CLOSE_TIMEOUT))
            except ConnectionClosed:
                refused = ws
                break
            assert first["payload"]["name"] == "session_started", first
            admitted.append(ws)
        assert refused is not None, f"{len(admitted)} streams admitted with a limit of 1 per process"
        assert await closed_with(refused) == (1013, "server busy: too many media streams, try again later")
        for ws in admitted:
            await ws.send(json.dumps({"kind": "AudioMetadata", "audioMetadata": {"sampleRate": 8000}}))
            assert await closed_with(ws) == (1003, "unsupported sampleRate 8000: expected 16000 or 24000")
    finally:
        for ws in [*admitted, refused]:
            if ws is not None:
                await ws.close()
    server.assert_log_clean()


async def test_audiohook_close_is_1000_with_its_reason(server):
    from audiohook_client import AudioHookClient, over_websockets

    headers = {
        "Audiohook-Organization-Id": "d7934305-0972-4844-938e-9060eef73d05",
        "Audiohook-Session-Id": "6f1c3a52-8a8e-4b8e-9a39-0f3a4a1c7e11",
        "Audiohook-Correlation-Id": "0b5d3b7e-5a0c-4d1e-8f43-0c2f0b9f6a21",
    }
    url = server.ws("contactcenter/stream")
    async with websockets.connect(url, subprotocols=["audiohook-v2"], additional_headers=headers) as ws:
        client = AudioHookClient(over_websockets(ws), session_id=headers["Audiohook-Session-Id"])
        await client.probe()
        await client.expect("opened")
        await client.send("close", {"reason": "end"})
        await client.expect("closed")
        assert await closed_with(ws) == (1000, "closed")
    server.assert_log_clean()


async def test_unknown_path_is_4404_and_a_long_reason_is_cut_to_123_bytes(server):
    async with websockets.connect(server.ws("nowhere")) as ws:
        assert await closed_with(ws) == (4404, "no WebSocket endpoint at /api/v1/nowhere")
    async with websockets.connect(server.ws("%C3%A9" * 100)) as ws:  # "é" * 100: 2 bytes each
        code, reason = await closed_with(ws)
    assert code == 4404 and reason.startswith("no WebSocket endpoint at /api/v1/éé"), (code, reason)
    assert 120 <= len(reason.encode()) <= 123
    server.assert_log_clean()


AUDIOHOOK_HEADERS = {
    "Audiohook-Organization-Id": "d7934305-0972-4844-938e-9060eef73d05",
    "Audiohook-Session-Id": "6f1c3a52-8a8e-4b8e-9a39-0f3a4a1c7e11",
    "Audiohook-Correlation-Id": "0b5d3b7e-5a0c-4d1e-8f43-0c2f0b9f6a21",
}
ENDPOINTS = {  # path -> (headers, a first message to wait for before the bad frame)
    f"browser/conversation?api_key={KEY}": ({}, True),
    f"browser/dashboard/relay?api_key={KEY}": ({}, True),
    "media/stream?scenario=banking&events=1": ({}, True),
    "contactcenter/stream": (AUDIOHOOK_HEADERS, False),
}


async def test_invalid_utf8_is_1007_with_one_warning_per_connection(server):
    """A text frame that is not UTF-8 cannot reach the app: the server closes with 1007 and a reason
    and logs one WARNING, not an ERROR with a traceback (uvicorn) nor a bare TCP drop (daphne)."""
    for path, (headers, greeted) in ENDPOINTS.items():
        async with websockets.connect(server.ws(path), additional_headers=headers) as ws:
            if greeted:
                await asyncio.wait_for(ws.recv(), CLOSE_TIMEOUT)
            await ws.send(b'{"type": "text", "payload": {"text": "\xff\xfe"}}', text=True)
            assert await closed_with(ws) == (1007, "invalid UTF-8 in a text message"), path
    server.assert_log_clean()
    text = server.log.read_text(errors="replace")[server.log_from :]
    said = [line for line in text.splitlines() if "is not valid UTF-8" in line]
    assert len(said) == len(ENDPOINTS) and all("WARNING" in line for line in said), said
    assert all(KEY not in line for line in said)  # the path is logged without its query string


async def health_counts(server) -> tuple[dict, int]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as client:
        health = (await client.get(f"http://127.0.0.1:{server.port}/api/v1/health")).json()
        status = (await client.get(f"http://127.0.0.1:{server.port}/api/v1/browser/status")).json()
    return health["session_metrics"], status["dashboard_clients"]


async def vanish(server, path: str, headers: dict[str, str]) -> None:
    """A client that goes away in the middle of the handshake: the server has accepted (it sent
    101) and is still setting the socket up when the connection resets."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    lines = [
        f"GET /api/v1/{path} HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CLOSE_TIMEOUT)
    writer.transport.abort()  # RST, no close frame


async def test_connection_counts_stay_consistent(server):
    """``connected - disconnected == active`` on every worker, with a dashboard open (dashboards are
    viewers, not sessions: they were counted connected but never active) and after clients that
    vanished mid-handshake (a dashboard gone before its first message stayed counted for ever)."""
    async with websockets.connect(server.ws(f"browser/dashboard/relay?api_key={KEY}")) as dashboard:
        await asyncio.wait_for(dashboard.recv(), CLOSE_TIMEOUT)
        metrics, dashboards = await health_counts(server)
        assert metrics["connected"] - metrics["disconnected"] == metrics["active"], metrics
        assert dashboards <= 1
        for _ in range(4):
            for path, (headers, _greeted) in ENDPOINTS.items():
                await vanish(server, path, headers)
    settled = 0
    async with asyncio.timeout(30):
        while settled < 10:  # ten answers in a row (from any worker) with nothing left open
            metrics, dashboards = await health_counts(server)
            assert metrics["connected"] - metrics["disconnected"] == metrics["active"], metrics
            settled = settled + 1 if (metrics["active"], dashboards) == (0, 0) else 0
            await asyncio.sleep(0.2)
    server.assert_log_clean()
