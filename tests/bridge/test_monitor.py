"""The AudioHook monitor (issue 32, point 4): a call people handle, heard on both channels.

The protocol's pure parts first (media selection, the channel split), then the real service (a
uvicorn process, the offline Whisper recogniser) reached the way a contact centre connects: signed
requests, a stereo PCMU stream with one espeak-ng voice per channel (the customer on ``external``,
the centre's person on ``internal``). Checked: nothing binary ever comes back; open, ping,
paused/resumed (frames discarded meanwhile), update and close; both sides' transcripts on the
dashboard relay and in the session's history, in order, with their roles; auth and the limit.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import uuid

import httpx
import numpy as np
import pytest
import websockets
from audiohook_client import MONO, ORG, STEREO, AudioHookClient, over_websockets
from audiohook_client_auth import signed_headers
from servers import base_env, free_port, migrate, start, wait_http
from voices import Voice, heard, pcm16

from bridge.protocol import demux, select_monitor_media
from voiceagent.speech.audio import ulaw_encode

PCMA = {"type": "audio", "format": "PCMA", "channels": ["external", "internal"], "rate": 8000}
INTERNAL = {"type": "audio", "format": "PCMU", "channels": ["internal"], "rate": 8000}
REVERSED = {"type": "audio", "format": "PCMU", "channels": ["internal", "external"], "rate": 8000}


# --- the pure parts -------------------------------------------------------------------------------------
def test_the_monitor_prefers_both_channels_and_takes_one_alone_otherwise():
    assert select_monitor_media([MONO, STEREO]) is STEREO
    assert select_monitor_media([REVERSED]) is REVERSED  # copied verbatim, its order kept
    assert select_monitor_media([PCMA, INTERNAL]) is INTERNAL
    assert select_monitor_media([MONO]) is MONO
    assert select_monitor_media([PCMA]) is None
    assert select_monitor_media([{**STEREO, "rate": 16000}]) is None
    assert select_monitor_media([{**MONO, "channels": ["other"]}]) is None
    assert select_monitor_media("nonsense") is None and select_monitor_media([1, None, {}]) is None


def test_an_interleaved_frame_splits_per_channel_in_the_selected_order():
    assert demux(b"abcdef", ["external", "internal"]) == {"external": b"ace", "internal": b"bdf"}
    assert demux(b"abcdefg", ["internal", "external"]) == {"internal": b"ace", "external": b"bdf"}
    assert demux(b"abc", ["external"]) == {"external": b"abc"}
    assert demux(b"", ["external", "internal"]) == {"external": b"", "internal": b""}


# --- the real service -----------------------------------------------------------------------------------
SECRET = base64.b64encode(b"contact-center-shared-secret-32b").decode()
CC_KEY = "cc-api-key-0123456789"
CUSTOMER = ("i lost my card", Voice("en-us", 140))
PERSON = ("what is my balance", Voice("en-gb+f3", 150))  # key words: SENTENCES in voices.py
FRAME_SAMPLES = 1600  # 200 ms at 8 kHz, as AudioHook clients send


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("monitor")
    env = base_env(
        root,
        CONTACTCENTER_API_KEY=CC_KEY,
        CONTACTCENTER_CLIENT_SECRET=SECRET,
        CONTACTCENTER_MONITOR_MAX_SESSIONS="2",
    )
    migrate(env)
    port = free_port()
    proc = start("uvicorn", port, env, root / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=60, status=200)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def connect(port: int, session_id: str, **overrides):
    """A signed upgrade to the monitor, as a contact centre makes it."""
    values = dict(
        path="/api/v1/contactcenter/monitor",
        host=f"127.0.0.1:{port}",
        organization_id=ORG,
        session_id=session_id,
        correlation_id=str(uuid.uuid4()),
        api_key=CC_KEY,
        client_secret_b64=SECRET,
    )
    values.update(overrides)
    return websockets.connect(
        f"ws://127.0.0.1:{port}/api/v1/contactcenter/monitor", additional_headers=signed_headers(**values)
    )


def interleave(external: np.ndarray, internal: np.ndarray) -> bytes:
    """Two channels of int16 samples as one stereo PCMU stream, external first."""
    stereo = np.empty(2 * len(external), np.uint8)
    stereo[0::2] = np.frombuffer(ulaw_encode(external), np.uint8)
    stereo[1::2] = np.frombuffer(ulaw_encode(internal), np.uint8)
    return stereo.tobytes()


def stereo_call() -> bytes:
    """The customer, a pause, the person, a pause: interleaved PCMU, external first."""
    gap = np.zeros(8000 * 3, "<i2")  # 3 s: each turn ends before the other side speaks
    customer = np.frombuffer(pcm16(CUSTOMER[0], CUSTOMER[1], 8000), "<i2")
    person = np.frombuffer(pcm16(PERSON[0], PERSON[1], 8000), "<i2")
    lead = np.zeros(8000 // 2, "<i2")
    external = np.concatenate([lead, customer, gap, np.zeros(len(person), "<i2"), gap])
    internal = np.concatenate([lead, np.zeros(len(customer), "<i2"), gap, person, gap])
    return interleave(external, internal)


async def relay_transcripts(port: int, session_id: str, into: list[dict], ready: asyncio.Event) -> None:
    url = f"ws://127.0.0.1:{port}/api/v1/browser/dashboard/relay?session_id={session_id}"
    async with websockets.connect(url) as ws:
        ready.set()
        async for raw in ws:
            message = json.loads(raw)
            if message.get("type") == "transcript":
                into.append(message["payload"])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
async def test_both_sides_of_a_call_are_heard_stored_and_relayed_and_nothing_is_sent_back(service):
    port = service
    session_id = str(uuid.uuid4())
    relayed: list[dict] = []
    ready = asyncio.Event()
    relay = asyncio.create_task(relay_transcripts(port, session_id, relayed, ready))
    await asyncio.wait_for(ready.wait(), 10)
    async with connect(port, session_id) as ws:
        client = AudioHookClient(over_websockets(ws), session_id=session_id)
        await client.open(media=[MONO, STEREO], extra={"supportedLanguages": True})
        opened = await client.expect("opened", timeout=10)
        assert opened["parameters"]["media"] == [STEREO]
        assert opened["parameters"]["supportedLanguages"] == ["en-US"]
        await client.send("ping")
        assert (await client.expect("pong"))["clientseq"] == client.seq
        # paused: the person says something the monitor must not hear
        await client.send("paused")
        hidden = np.frombuffer(pcm16("hello", Voice("en-us", 140), 8000), "<i2")
        muted = interleave(np.zeros_like(hidden), hidden)
        for i in range(0, len(muted), 2 * FRAME_SAMPLES):
            await client.send_audio(muted[i : i + 2 * FRAME_SAMPLES])
        await client.send("resumed", {"start": "PT0S", "discarded": "PT1S"})
        await client.send("update", {"language": "en-US"})
        await client.expect("updated")
        call = stereo_call()
        for i in range(0, len(call), 2 * FRAME_SAMPLES):
            await client.send_audio(call[i : i + 2 * FRAME_SAMPLES])
            await asyncio.sleep(0.1)  # twice real time
        async with asyncio.timeout(30):
            while len([t for t in relayed if t["final"]]) < 2:
                await asyncio.sleep(0.1)
        await client.send("ping")
        await client.expect("pong")
        await client.send("close", {"reason": "end"})
        await client.expect("closed")
        await client.wait_closed()
    relay.cancel()
    assert client.audio == b"" and client.audio_frames == [], "the monitor sent audio"
    assert client.types() == ["opened", "pong", "updated", "pong", "closed"]
    finals = [(t["speaker"], t["text"]) for t in relayed if t["final"]]
    assert [speaker for speaker, _ in finals] == ["user", "person"], finals
    assert heard(finals[0][1], CUSTOMER[0]) and heard(finals[1][1], PERSON[0]), finals
    assert {t["speaker"] for t in relayed} <= {"user", "person"}
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(50):  # the history writer is off the socket's path
            body = (await http.get(f"http://127.0.0.1:{port}/api/v1/sessions/{session_id}")).json()
            if len(body.get("history", [])) >= 2:
                break
            await asyncio.sleep(0.1)
    history = body["history"]
    assert [
        (t["role"], t.get("speaker"), t["agent"] if t["role"] == "assistant" else None) for t in history
    ] == [
        ("user", None, None),
        ("assistant", "person", "contact-center agent"),
    ], history
    assert [t["content"] for t in history] == [text for _, text in finals]
    assert not any("hello" in t["content"].lower() for t in history), "audio sent while paused was heard"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"api_key": "wrong-key-0123456789"}, "X-API-KEY is not valid"),
        ({"client_secret_b64": base64.b64encode(b"another-secret").decode()}, "signature does not verify"),
    ],
)
async def test_requests_that_fail_authentication_are_disconnected_unauthorized(service, overrides, reason):
    session_id = str(uuid.uuid4())
    async with connect(service, session_id, **overrides) as ws:
        client = AudioHookClient(over_websockets(ws), session_id=session_id)
        disconnect = await client.expect("disconnect")
        assert disconnect["parameters"]["reason"] == "unauthorized"
        assert reason in disconnect["parameters"]["info"]
        await client.send("close", {"reason": "disconnect"})
        await client.expect("closed")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
async def test_beyond_its_limit_a_monitor_is_refused_and_the_probe_is_answered(service):
    ids = [str(uuid.uuid4()) for _ in range(3)]
    async with connect(service, ids[0]) as first, connect(service, ids[1]) as second:
        async with connect(service, ids[2]) as third:
            refused = AudioHookClient(over_websockets(third), session_id=ids[2])
            disconnect = await refused.expect("disconnect")
            assert disconnect["parameters"]["reason"] == "error"
            assert "limit" in disconnect["parameters"]["info"]
        for ws, session_id in ((first, ids[0]), (second, ids[1])):
            client = AudioHookClient(over_websockets(ws), session_id=session_id)
            await client.probe()
            assert (await client.expect("opened"))["parameters"]["media"] == [MONO]
            await client.send("close", {"reason": "end"})
            await client.expect("closed")
