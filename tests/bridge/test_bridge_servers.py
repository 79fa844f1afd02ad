"""The bridge in the real service (uvicorn and daphne processes), reached with a real WebSocket
client the way a contact center connects: subprotocol negotiation, a whole session, the probe."""

from __future__ import annotations

import signal
import subprocess
import uuid

import numpy as np
import pytest
import websockets
from audiohook_client import ORG, AudioHookClient, over_websockets
from realtime_peer import RealtimePeer
from servers import base_env, free_port, migrate, start, wait_http

from voiceagent.speech.audio import ulaw_encode

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
KEY = "rt-key-0123456789"


@pytest.fixture(scope="module")
def peer():
    with RealtimePeer(api_key=KEY) as server:
        yield server


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def service(request, peer, tmp_path_factory):
    root = tmp_path_factory.mktemp("bridge")
    env = base_env(root, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=f"{peer.url}/v1", OPENAI_MODEL="gpt-4o")
    migrate(env)
    port = free_port()
    proc = start(request.param, port, env, root / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=30, status=200)
        yield f"ws://127.0.0.1:{port}/api/v1/contactcenter/stream"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def audiohook_headers(session_id: str) -> dict[str, str]:
    return {
        "Audiohook-Organization-Id": ORG,
        "Audiohook-Session-Id": session_id,
        "Audiohook-Correlation-Id": str(uuid.uuid4()),
    }


async def test_a_session_over_a_real_socket(service, peer):
    peer.reset()
    session_id = str(uuid.uuid4())
    async with websockets.connect(
        service, subprotocols=["audiohook-v2"], additional_headers=audiohook_headers(session_id)
    ) as ws:
        assert ws.subprotocol == "audiohook-v2"
        client = AudioHookClient(over_websockets(ws), session_id=session_id)
        await client.open()
        opened = await client.expect("opened", timeout=10)
        assert opened["parameters"]["media"][0]["format"] == "PCMU"
        await client.send("ping")
        await client.expect("pong")
        await client.collect_audio(1.0)
        assert len(client.audio) >= 2000  # the greeting, as mu-law
        await client.send_audio(ulaw_encode((np.sin(np.arange(1600)) * 8000).astype("<i2")))
        await client.send("close", {"reason": "end"})
        await client.expect("closed")
        await client.wait_closed()
    assert peer.connections and peer.connections[0].path.endswith("/realtime")


async def test_no_subprotocol_is_selected_when_none_is_offered(service):
    session_id = str(uuid.uuid4())
    async with websockets.connect(service, additional_headers=audiohook_headers(session_id)) as ws:
        assert ws.subprotocol is None
        client = AudioHookClient(over_websockets(ws), session_id=session_id)
        await client.probe()
        await client.expect("opened")
        await client.send("close", {"reason": "end"})
        await client.expect("closed")
