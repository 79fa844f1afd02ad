"""Phone calls on a scaled-out service: two uvicorn processes sharing Redis and one database.

The call is placed on server A (through the real Call Automation SDK against the local ACS peer);
the provider's media stream lands on server B, which finds the call A placed in the shared call
map (Redis) and plays the greeting; callbacks and REST reads hop between the two and agree,
because the call rows and the session live in the shared SQLite database. The speech and chat
providers are the instant scripted ones of ``bench/plugins/instant_providers.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import websockets
from acs_media_client import AcsMediaClient, over_websockets, silence
from acs_peer import TEST_CALLBACK_URL, TEST_MEDIA_URL, telephony_env
from servers import ROOT, base_env, free_port, migrate, start, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.redis]

TARGET = "+15551234567"
GREETING = "Hi, thanks for calling. How can I help?"  # fixtures/agents/assistant/agent.yaml
MS_PER_WORD = 100  # instant TTS: 100 ms of audio per word, in 100 ms chunks
RECEIVE_TIMEOUT = 15.0


@dataclass
class Server:
    name: str
    port: int
    log: Path
    proc: subprocess.Popen

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/v1"

    def tail(self, chars: int = 4000) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            text = f"(no log: {exc})"
        return f"----- server {self.name} (port {self.port}) log tail -----\n{text[-chars:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def dump_logs(servers: list[Server]) -> None:
    for server in servers:
        print(server.tail())


@pytest.fixture
def servers(peer, tmp_path):
    """Servers A and B: same Redis, same SQLite file, telephony pointed at the ACS peer."""
    peer.reset()
    env = base_env(
        tmp_path,
        CACHE_HOST="127.0.0.1",
        CACHE_PORT="6379",
        CACHE_DB="5",  # not 0 (test_redis) nor 2 (test_multiprocess_relay)
        LIFECYCLE_PLUGINS="instant_providers",
        BENCH_MS_PER_WORD=str(MS_PER_WORD),
        TELEPHONY_STREAMING_MODE="MEDIA",
        LOG_LEVEL="INFO",
        PYTHONPATH=os.pathsep.join(
            str(p) for p in (ROOT, ROOT / "tests" / "support", ROOT / "bench" / "plugins")
        ),
        **telephony_env(peer),
    )
    for name in ("TELEPHONY_MEDIA_AUDIENCE", "API_KEYS"):  # no bearer JWT, no API key in this test
        env.pop(name, None)
    migrate(env)  # once: both servers use this database file
    started: list[Server] = []
    try:
        for name in ("A", "B"):
            port = free_port()
            log = tmp_path / f"server-{name}.log"
            started.append(Server(name, port, log, start("uvicorn", port, env, log)))
        for server in started:
            wait_http(f"{server.http}/ready", timeout=30, status=200)
    except BaseException:
        dump_logs(started)
        for server in started:
            server.stop()
        raise
    try:
        yield started
    finally:
        for server in started:
            server.stop()


async def poll(fetch, predicate, timeout: float = RECEIVE_TIMEOUT, what: str = "condition"):
    """Call ``await fetch()`` until ``predicate(result)``; the last result otherwise fails the test."""
    last = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                last = await fetch()
                if predicate(last):
                    return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"no {what} within {timeout:g} s; last seen {last!r}") from None


def calls_of(response: httpx.Response) -> dict[str, dict]:
    assert response.status_code == 200, response.text
    return {c["connection_id"]: c for c in response.json()["calls"]}


async def session_on(http: httpx.AsyncClient, server: Server, session_id: str) -> dict:
    response = await http.get(f"{server.http}/sessions/{session_id}")
    assert response.status_code == 200, response.text
    return response.json()


def greetings(session: dict) -> list[tuple[str, str]]:
    return [(t["agent"], t["content"]) for t in session["history"] if t["role"] == "assistant"]


def heard(session: dict) -> list[str | None]:
    return [t.get("heard") for t in session["history"] if t["role"] == "assistant"]


async def test_a_call_placed_on_one_server_streams_and_ends_through_the_other(servers, peer):
    a, b = servers
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            await run_call(http, a, b, peer)
    except BaseException:
        dump_logs(servers)
        raise


async def run_call(http: httpx.AsyncClient, a: Server, b: Server, peer) -> None:
    # 1. place the call on A: the provider is asked to call back and stream to BASE_URL
    response = await http.post(
        f"{a.http}/calls/initiate", json={"phone_number": TARGET, "scenario": "default"}
    )
    assert response.status_code == 202, response.text
    placed = response.json()
    cid, session_id = placed["connection_id"], placed["session_id"]
    assert placed["status"] == "initiating" and placed["scenario"] == "default" and session_id
    assert cid in peer.calls
    (create,) = peer.requests_to("/calling/callConnections")
    assert create.authorized
    assert create.body["callbackUri"] == TEST_CALLBACK_URL
    assert create.body["operationContext"] == session_id
    media = create.body["mediaStreamingOptions"]
    assert media["transportUrl"] == TEST_MEDIA_URL and media["audioFormat"] == "pcm16KMono"

    # 2. the provider's media stream lands on B, which knows the call only through Redis
    headers = {"x-ms-call-connection-id": cid, "x-ms-call-correlation-id": peer.calls[cid]["correlationId"]}
    async with websockets.connect(f"{b.ws}/media/stream?events=1", additional_headers=headers) as ws:
        client = AcsMediaClient(over_websockets(ws), rate=16000)
        await client.metadata(16000)
        await client.audio_ms(silence(200, 16000))  # the provider streams silence too
        started = await client.event("event", RECEIVE_TIMEOUT, name="session_started")
        assert started["session_id"] == session_id and started["payload"]["transport"] == "phone"
        greeting = await client.event("agent_response", RECEIVE_TIMEOUT, agent="assistant")
        assert greeting["session_id"] == session_id
        assert greeting["payload"]["text"] == GREETING and greeting["payload"]["final"] is True
        # the whole greeting arrives as outbound AudioData (paced at real time)
        expected_s = len(GREETING.split()) * MS_PER_WORD / 1000
        async with asyncio.timeout(RECEIVE_TIMEOUT):
            while client.audio_seconds() < expected_s:
                message = await client.next_message(RECEIVE_TIMEOUT)
                assert message is not None, f"B closed the stream: {client.socket.close_info}"
        assert client.audio_frames and "AudioData" in client.types()
        assert not client.stops  # no barge-in: nobody spoke
        # B records the greeting as it sends it and marks it played once it has (the provider
        # buffers a few frames, so that is a little after the last frame was sent); A reads it from
        # the shared database
        body = await poll(
            lambda: session_on(http, a, session_id),
            lambda s: greetings(s) == [("assistant", GREETING)] and heard(s) == ["played"],
            what="greeting in the session history (read on A)",
        )
        assert body["transport"] == "phone" and body["active_agent"] == "assistant"

        # 3. the provider reports the call connected to B; A reads it from the shared database
        event = peer.cloud_event("CallConnected", cid)
        response = await http.post(f"{b.http}/calls/callbacks", json=[event])
        assert response.status_code == 200, response.text
        assert response.json() == {"processed": 1}
        call = calls_of(await http.get(f"{a.http}/calls/"))[cid]
        assert (call["status"], call["session_id"], call["direction"]) == (
            "connected",
            session_id,
            "outbound",
        )
        assert call["phone_number"] == TARGET and call["started_at"] is not None

        # 4. hang up on A: the provider is told; then it drops the media stream
        response = await http.post(f"{a.http}/calls/terminate", json={"connection_id": cid})
        assert response.status_code == 200, response.text
        assert response.json() == {"connection_id": cid, "status": "terminating"}
        (terminate,) = peer.requests_to(f"/calling/callConnections/{cid}:terminate")
        assert terminate.authorized
        assert peer.calls[cid]["callConnectionState"] == "disconnected"
        assert not client.closed  # B's stream was still up until the provider closes it

    response = await http.post(f"{a.http}/calls/callbacks", json=[peer.cloud_event("CallDisconnected", cid)])
    assert response.status_code == 200, response.text
    ended = calls_of(await http.get(f"{b.http}/calls/", params={"status": "disconnected"}))
    assert cid in ended, ended
    assert ended[cid]["ended_at"] is not None and ended[cid]["session_id"] == session_id

    # A forgot the call in the shared map: B now refuses a media stream for it
    async with websockets.connect(f"{b.ws}/media/stream", additional_headers=headers) as ws:
        late = AcsMediaClient(over_websockets(ws))
        close = await late.wait_closed(RECEIVE_TIMEOUT)
    assert close == {"code": 1008, "reason": "unknown call connection"}

    # the session B served, read on B: a phone session, the greeting recorded once
    body = await session_on(http, b, session_id)
    assert body["transport"] == "phone" and body["scenario"] == "default"
    assert greetings(body) == [("assistant", GREETING)]
