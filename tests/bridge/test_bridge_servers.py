"""The bridge in the real service (uvicorn and daphne processes), reached with a real WebSocket
client the way a contact center connects: subprotocol negotiation, a whole session, the probe."""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import uuid
import wave

import numpy as np
import pytest
import websockets
from audiohook_client import ORG, AudioHookClient, over_websockets
from realtime_peer import RealtimePeer
from servers import SERVER_START_S, base_env, free_port, migrate, start, wait_http

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
    env = base_env(
        root,
        OPENAI_API_KEY=KEY,
        OPENAI_BASE_URL=f"{peer.url}/v1",
        OPENAI_MODEL="gpt-4o",
        RECORDING_ENABLED="true",
        RECORDING_DIR=str(root / "recordings"),
        RECORDING_CHUNK_S="1",
    )
    migrate(env)
    port = free_port()
    proc = start(request.param, port, env, root / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=SERVER_START_S, status=200)
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


async def test_a_person_takes_an_audiohook_session_over_and_speaks_through_it(service, peer):
    """Issue 32: the REST takeover reaches a contact-centre session (the realtime pipeline): the
    person's line is a response the model says word for word, heard on the AudioHook stream."""
    import httpx

    peer.reset()
    session_id = str(uuid.uuid4())
    http = service.replace("ws://", "http://").replace("/contactcenter/stream", "")
    async with (
        websockets.connect(
            service, subprotocols=["audiohook-v2"], additional_headers=audiohook_headers(session_id)
        ) as ws,
        httpx.AsyncClient(timeout=30) as rest,
    ):
        client = AudioHookClient(over_websockets(ws), session_id=session_id)
        await client.open()
        await client.expect("opened", timeout=10)
        await client.collect_audio(1.0)  # the greeting
        taken = await rest.post(f"{http}/sessions/{session_id}/takeover", json={"by": "alice"})
        assert taken.status_code == 200, taken.text
        before = len(client.audio)
        said = await rest.post(f"{http}/sessions/{session_id}/say", json={"text": "This is Alice."})
        assert said.status_code == 200, said.text
        await client.collect_audio(1.0)
        assert len(client.audio) > before, "the person's line was not heard on the stream"
        creates = [e for e in peer.received("response.create") if "This is Alice." in str(e)]
        assert creates, "the realtime model was not asked to say the person's line"
        back = await rest.post(f"{http}/sessions/{session_id}/handback")
        assert back.status_code == 200, back.text
        await client.send("close", {"reason": "end"})
        await client.expect("closed")
        for _ in range(100):  # the history writer is off the socket's path: until it has written
            history = (await rest.get(f"{http}/sessions/{session_id}")).json()["history"]
            person = [t["role"] for t in history if t.get("speaker") == "person"]
            if len(person) == 3:
                break
            await asyncio.sleep(0.1)
        recording = None
        for _ in range(100):  # stored once the conversation ended (409 while live)
            recording = await rest.get(f"{http}/sessions/{session_id}/recording")
            if recording.status_code == 200:
                break
            await asyncio.sleep(0.1)
    assert person == ["system", "assistant", "system"], history
    # recorded as heard (issue 32 point 3): the agent's side (the greeting, Alice's line) on the right
    assert recording is not None and recording.status_code == 200, recording
    with wave.open(io.BytesIO(recording.content)) as w:
        assert w.getnchannels() == 2
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2).astype(float)
    assert np.abs(both[:, 1]).max() > 200 and np.abs(both[:, 0]).max() < 50  # peer at 300, no caller


async def test_escalating_to_a_person_ends_the_session_for_the_contact_centre_to_route(service, peer):
    """Issue 32 point 2 on AudioHook (Audio Connector): escalate_to_human ends the session with
    ``disconnect`` reason ``completed`` and ``outputVariables`` naming the transfer, once the
    agent's line has been sent."""
    from realtime_peer import Call, Say

    peer.reset()
    peer.user_says("I want to talk to a person")
    peer.push(
        Call("escalate_to_human", {"reason": "caller asked for a person", "priority": "high"}),
        Say("I'm connecting you to a colleague now."),
    )
    session_id = str(uuid.uuid4())
    async with websockets.connect(
        service, subprotocols=["audiohook-v2"], additional_headers=audiohook_headers(session_id)
    ) as ws:
        client = AudioHookClient(over_websockets(ws), session_id=session_id)
        await client.open(input_variables={"promptName": "banking"})
        await client.expect("opened", timeout=10)
        await client.collect_audio(1.0)  # the greeting
        speech = ulaw_encode((np.sin(np.arange(8000) * 0.3) * 8000).astype("<i2"))
        for i in range(0, len(speech), 1600):
            await client.send_audio(speech[i : i + 1600])
        for _ in range(5):  # then a second of quiet, as a line keeps sending
            await client.send_audio(ulaw_encode(np.zeros(1600, "<i2")))
        disconnect = await client.expect("disconnect", timeout=15)
        assert disconnect["parameters"]["reason"] == "completed", disconnect
        variables = disconnect["parameters"]["outputVariables"]
        assert variables["transfer"] == "true" and variables["transferTarget"] == "+15550009999"
        assert variables["transferReason"] == "caller asked for a person"
        assert variables["transferPriority"] == "high" and variables["escalationReference"].startswith("ESC-")
        assert all(isinstance(v, str) for v in variables.values())  # a string map, as the protocol says
        await client.send("close", {"reason": "disconnect"})
        await client.expect("closed")
