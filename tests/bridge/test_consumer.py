"""The AudioHook v2 bridge end to end in process: a strict AudioHook client on one side, the local
realtime peer through the real openai client on the other (the bridge always runs live)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import numpy as np
import pytest
from audiohook_client import MONO, ORG, STEREO, AudioHookClient, over_communicator
from audiohook_client_auth import as_scope_headers, signed_headers
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from realtime_peer import Drop, RealtimePeer, Say
from servers import free_port

from voiceagent.llm.realtime import OpenAIRealtimeClient
from voiceagent.routing import websocket_urlpatterns
from voiceagent.speech.audio import ulaw_encode

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
PATH = "/api/v1/contactcenter/stream"
KEY = "rt-key-0123456789"
FRAME = 1600  # 200 ms of mono mu-law, as AudioHook clients send
TONE = ulaw_encode((np.sin(np.arange(FRAME) * 2 * np.pi * 440 / 8000) * 8000).astype("<i2"))
SILENCE = b"\xff" * FRAME


@pytest.fixture(scope="module")
def peer():
    with RealtimePeer(api_key=KEY) as server:
        yield server


@pytest.fixture
def bridge(fake_runtime, peer):
    """The runtime's realtime client pointed at the peer (what CLOUD_REALTIME_VOICE_* would build)."""
    peer.reset()
    fake_runtime.__dict__["_realtime_client"] = OpenAIRealtimeClient(
        "gpt-realtime", api_key=KEY, base_url=f"{peer.url}/v1", connect_timeout=3
    )
    yield fake_runtime
    fake_runtime.__dict__.pop("_realtime_client", None)
    peer.reset()


def headers(session_id: str, **extra: str) -> list[tuple[bytes, bytes]]:
    base = {
        "audiohook-organization-id": ORG,
        "audiohook-session-id": session_id,
        "audiohook-correlation-id": str(uuid.uuid4()),
        **extra,
    }
    return [(k.encode(), v.encode()) for k, v in base.items()]


async def connect(subprotocols=("audiohook-v2",), session_id: str | None = None, **header_values):
    session_id = session_id or str(uuid.uuid4())
    comm = WebsocketCommunicator(
        APP, PATH, headers=headers(session_id, **header_values), subprotocols=list(subprotocols)
    )
    connected, subprotocol = await comm.connect()
    assert connected
    return comm, AudioHookClient(over_communicator(comm), session_id=session_id), subprotocol


async def speak(client: AudioHookClient, frames: int = 4, silence: int = 8) -> None:
    for _ in range(frames):
        await client.send_audio(TONE)
    for _ in range(silence):
        await client.send_audio(SILENCE)


GREETING_BYTES = 2400  # the peer speaks a greeting as 300 ms of audio: 2400 mu-law bytes at 8 kHz


async def started(**open_args) -> tuple[WebsocketCommunicator, AudioHookClient]:
    """Connected, opened, first ping answered, the greeting received."""
    comm, client, _ = await connect()
    await client.open(**open_args)
    await client.expect("opened")
    await client.send("ping", {"rtt": "PT0.01S"})
    await client.expect("pong")
    await client.collect_audio(0.8)
    return comm, client


async def closed(comm, client: AudioHookClient) -> None:
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await client.wait_closed()
    await comm.wait()


async def test_a_contact_center_call_through_the_bridge(bridge, peer):
    from agents_app import sessions

    peer.user_says("block my card")
    peer.push(Say("Your card is blocked.", chunks=2, audio_ms=600))
    comm, client, subprotocol = await connect()
    assert subprotocol == "audiohook-v2"
    await client.open(
        input_variables={
            "phoneNumber": "+15551230000",
            "emailAddress": "ada@example.com",
            "promptName": "banking",
            "queue": "cards",
        }
    )
    opened = await client.expect("opened")
    assert opened["parameters"] == {"media": [MONO]} and opened["clientseq"] == 1
    await client.send("ping", {"rtt": "PT0.01S"})
    pong = await client.expect("pong")
    assert pong["clientseq"] == client.seq
    await client.collect_audio(0.8)
    assert GREETING_BYTES - 100 <= len(client.audio) <= GREETING_BYTES + 100
    await speak(client)
    await client.collect_audio(1.5)
    answer = len(client.audio) - GREETING_BYTES
    assert 4700 <= answer <= 4900, answer  # 600 ms
    await client.send("dtmf", {"digit": "5"})
    await client.send("dtmf", {"digit": "#"})
    await asyncio.sleep(0.3)

    state = await sessions.db_call(sessions.load_state, client.session_id)
    assert state.scenario == "banking" and state.transport == "contactcenter"
    assert state.memory["queue"] == "cards" and state.memory["phoneNumber"] == "+15551230000"
    assert state.memory["caller_phone"] == "+15551230000"
    assert state.memory["caller_email"] == "ada@example.com"
    assert state.memory["contactcenter_prompt"] == "banking"
    texts = [json.dumps(e) for e in peer.received("conversation.item.create")]
    assert any("Keypad entry: 5" in t for t in texts)
    update = peer.received("session.update")[0]["session"]
    assert update["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    await closed(comm, client)
    assert client.types()[-1] == "closed" and "disconnect" not in client.types()


async def test_agent_audio_is_paced_in_250_ms_chunks(bridge, peer):
    peer.user_says("tell me a story")
    peer.push(Say("A long answer for pacing.", chunks=2, audio_ms=2000))
    comm, client = await started()
    client.audio_frames.clear()
    await speak(client)
    await client.collect_audio(2.6)
    sizes = [size for _, size in client.audio_frames]
    assert sizes == [2000] * 8, sizes
    times = [t for t, _ in client.audio_frames]
    # a chunk of lead, then real time: the other 7 take ~1.5 s, never a burst (a loose bound)
    assert times[-1] - times[0] >= 1.2
    await closed(comm, client)


async def test_barge_in_tells_the_client_to_drop_playback(bridge, peer):
    peer.user_says("what can you do", "stop")
    peer.push(Say("one two three four five six seven eight", chunks=8, audio_ms=6000))
    comm, client = await started()
    await speak(client)
    await client.collect_audio(1.0)  # the answer is playing
    playing = len(client.audio)
    await speak(client)
    event = await client.expect("event")
    assert event["parameters"] == {"entities": [{"type": "barge_in", "data": {}}]}
    stopped = len(client.audio)
    assert stopped - playing < 6 * 2000  # far from the whole 6 s answer
    await client.collect_audio(1.0)
    # at most the chunk already on its way, then the 300 ms answer to "stop"
    assert len(client.audio) - stopped <= 2000 + GREETING_BYTES
    assert peer.received("conversation.item.truncate")
    await closed(comm, client)


async def test_stereo_media_feeds_only_the_customer_channel(bridge, peer):
    peer.user_says("hello")
    peer.push(Say("Hi.", chunks=1, audio_ms=200))
    comm, client, _ = await connect()
    await client.open(media=[{**STEREO, "channels": ["internal", "external"]}])
    opened = await client.expect("opened")
    assert opened["parameters"]["media"][0]["channels"] == ["internal", "external"]
    silence = np.full(FRAME, 0xFF, dtype=np.uint8)
    tone = np.frombuffer(TONE, dtype=np.uint8)
    interleaved = np.empty(FRAME * 2, dtype=np.uint8)
    interleaved[0::2], interleaved[1::2] = tone, silence  # the agent side talks, the customer is silent
    for _ in range(6):
        await client.send_audio(interleaved.tobytes())
    await asyncio.sleep(0.5)
    assert not peer.received("input_audio_buffer.commit") and "conversation.item.create" not in peer.types()
    assert peer.received("input_audio_buffer.append")  # the customer's (silent) channel was relayed
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await comm.disconnect()


async def test_the_connection_probe_allocates_nothing(bridge, peer):
    comm, client, _ = await connect()
    await client.probe()
    opened = await client.expect("opened")
    assert opened["parameters"] == {"media": [MONO]}
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await client.wait_closed()
    assert peer.connections == []


async def test_without_pcmu_8k_external_no_session_starts(bridge, peer):
    comm, client, _ = await connect()
    await client.open(media=[{**MONO, "format": "L16"}, {**MONO, "channels": ["internal"]}])
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error" and "PCMU" in disconnect["parameters"]["info"]
    assert "opened" not in client.types() and peer.connections == []
    await client.send("close", {"reason": "disconnect"})
    await client.expect("closed")
    await comm.disconnect()


async def test_an_unreachable_realtime_api_drops_right_after_open(fake_runtime):
    fake_runtime.__dict__["_realtime_client"] = OpenAIRealtimeClient(
        "gpt-realtime", api_key=KEY, base_url=f"http://127.0.0.1:{free_port()}/v1", connect_timeout=1
    )
    comm, client, _ = await connect()
    await client.open()
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error"
    assert "unreachable" in disconnect["parameters"]["info"] and KEY not in json.dumps(disconnect)
    assert client.types() == ["disconnect"]
    await client.wait_closed()  # the bridge closes after its grace period when the client says nothing
    fake_runtime.__dict__.pop("_realtime_client", None)


async def test_the_realtime_api_dropping_mid_call_disconnects_with_error(bridge, peer):
    peer.user_says("hello")
    peer.push(Drop(Say("Let me check that for you.", chunks=4, audio_ms=2000), after=1))
    comm, client = await started()
    await speak(client)
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error"
    assert "realtime connection dropped" in disconnect["parameters"]["info"]
    await closed(comm, client)


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("duplicate", "duplicate seq 1: expected 2"),
        ("gap", "out-of-order seq 3: expected 2"),
        ("wrong id", "session id mismatch"),
        ("not json", "not JSON"),
        ("too long", "exceeds 65535"),
        ("bad digit", "dtmf digit 'X'"),
        ("huge frame", "audio frame of 70000 bytes"),
    ],
)
async def test_protocol_errors_disconnect_that_session_only(bridge, peer, bad, needle):
    comm, client, _ = await connect()
    other_comm, other, _ = await connect()
    for c in (client, other):
        await c.open()
        await c.expect("opened")
    if bad == "duplicate":
        client.seq -= 1
        await client.send("ping")
    elif bad == "gap":
        client.seq += 1
        await client.send("ping")
    elif bad == "wrong id":
        await client.send_raw(json.dumps({**client.envelope("ping"), "id": str(uuid.uuid4())}))
    elif bad == "not json":
        await client.send_raw("{not json")
    elif bad == "too long":
        await client.send("update", {"language": "x" * 70000})
    elif bad == "bad digit":
        await client.send("dtmf", {"digit": "X"})
    else:
        await client.send_audio(b"\xff" * 70000)
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error" and needle in disconnect["parameters"]["info"]
    await other.send("ping")  # the other session goes on
    await other.expect("pong")
    await client.send("close", {"reason": "disconnect"})
    await client.expect("closed")
    for c, cc in ((client, comm), (other, other_comm)):
        if not c.closed:
            await cc.disconnect()


async def test_binary_before_open_and_empty_frames_are_tolerated(bridge, peer):
    comm, client, _ = await connect()
    await client.send_audio(TONE)  # before open: ignored
    await client.open()
    await client.expect("opened")
    await client.send_audio(b"")
    await client.send("ping")
    await client.expect("pong")
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await comm.disconnect()


async def test_a_subprotocol_is_selected_only_when_offered(bridge):
    comm, client, subprotocol = await connect(subprotocols=())
    assert subprotocol is None
    await comm.disconnect()
    comm, client, subprotocol = await connect(subprotocols=("something-else",))
    assert subprotocol is None
    await comm.disconnect()


async def test_the_session_limit_refuses_new_sessions(bridge, settings):
    from voiceagent.config import load_config

    settings.CONFIG = load_config({"CONTACTCENTER_MAX_SESSIONS": "1"})
    first_comm, first, _ = await connect()
    comm, client, _ = await connect()
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "error" and "limit" in disconnect["parameters"]["info"]
    await first.open()  # the first session is unaffected
    await first.expect("opened")
    await comm.disconnect()
    await first_comm.disconnect()


SECRET = base64.b64encode(b"contact-center-shared-secret-32b").decode()
CC_KEY = "cc-api-key-0123456789"


async def connect_signed(**overrides) -> tuple[WebsocketCommunicator, AudioHookClient]:
    session_id = str(uuid.uuid4())
    values = dict(
        path=PATH,
        host="bot.example.com",
        organization_id=ORG,
        session_id=session_id,
        correlation_id=str(uuid.uuid4()),
        api_key=CC_KEY,
        client_secret_b64=SECRET,
    )
    values.update(overrides)
    comm = WebsocketCommunicator(
        APP, PATH, headers=as_scope_headers(signed_headers(**values), "bot.example.com")
    )
    assert (await comm.connect())[0]
    return comm, AudioHookClient(over_communicator(comm), session_id=session_id)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"api_key": "wrong-key-0123456789"}, "X-API-KEY is not valid"),
        ({"client_secret_b64": base64.b64encode(b"another-secret").decode()}, "signature does not verify"),
        ({"created": 1_000_000_000}, "signature"),
    ],
)
async def test_requests_that_fail_authentication_are_disconnected_unauthorized(
    bridge, settings, overrides, reason
):
    from voiceagent.config import load_config

    settings.CONFIG = load_config({"CONTACTCENTER_API_KEY": CC_KEY, "CONTACTCENTER_CLIENT_SECRET": SECRET})
    comm, client = await connect_signed(**overrides)
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "unauthorized" and reason in disconnect["parameters"]["info"]
    assert SECRET not in json.dumps(disconnect) and CC_KEY not in json.dumps(disconnect)
    await client.open()  # ignored: the session is over
    await client.send("close", {"reason": "disconnect"})
    await client.expect("closed")
    assert client.types() == ["disconnect", "closed"]
    await client.wait_closed()


async def test_a_signed_request_with_the_right_key_gets_a_session(bridge, peer, settings):
    from voiceagent.config import load_config

    settings.CONFIG = load_config({"CONTACTCENTER_API_KEY": CC_KEY, "CONTACTCENTER_CLIENT_SECRET": SECRET})
    comm, client = await connect_signed()
    await client.open()
    await client.expect("opened")
    await closed(comm, client)


async def test_production_requires_tls(bridge, settings):
    from voiceagent.config import load_config

    strong = "k" * 30 + "0123456789abcdefghijklmnopqrstuv"
    settings.CONFIG = load_config({"ENVIRONMENT": "production", "SECRET_KEY": strong, "ALLOWED_HOSTS": "x"})
    comm, client, _ = await connect()  # plain ws, no trusted proxy header
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"] == {"reason": "unauthorized", "info": "TLS required"}
    await comm.disconnect()
    comm, client, _ = await connect(**{"x-forwarded-proto": "https"})  # behind the TLS proxy
    await client.open(organization_id=str(uuid.uuid4()))  # but the open names another organization
    disconnect = await client.expect("disconnect")
    assert disconnect["parameters"]["reason"] == "unauthorized"
    assert "organizationId" in disconnect["parameters"]["info"]
    await comm.disconnect()


def test_health(client):
    response = client.get("/api/v1/contactcenter/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "service": "contactcenter-audiohook"}


async def test_a_call_goes_on_while_the_dashboard_relay_hangs(hung_channel_layer, bridge, peer):
    """The bridge hands its dashboard messages to a queue (voiceagent.transport.relay.RelayQueue)
    like the browser and phone sockets: before, it awaited each publish, and a channel layer that
    never answers (a hung Redis) held the call's session start, greeting and answers."""
    peer.user_says("block my card")
    peer.push(Say("Your card is blocked.", chunks=2, audio_ms=600))
    comm, client = await asyncio.wait_for(started(), 10)
    assert len(client.audio) >= GREETING_BYTES - 100
    await speak(client)
    await client.collect_audio(1.5)
    assert len(client.audio) - GREETING_BYTES >= 4700  # the answer's 600 ms
    await asyncio.wait_for(closed(comm, client), 10)


async def test_supported_languages_are_answered_when_asked(bridge, peer):
    """The reference server always answers a list (possibly empty) to ``supportedLanguages: true``:
    ours is the language the service listens in."""
    comm, client, _ = await connect()
    await client.open(extra={"supportedLanguages": True})
    opened = await client.expect("opened")
    assert opened["parameters"] == {"media": [MONO], "supportedLanguages": ["en-US"]}
    await client.send("ping", {"rtt": "PT0.01S"})
    await client.expect("pong")
    await closed(comm, client)
    comm, client, _ = await connect()
    null = "00000000-0000-0000-0000-000000000000"
    await client.open(conversation_id=null, participant_id=null, extra={"supportedLanguages": True})
    probe = await client.expect("opened")
    assert probe["parameters"]["supportedLanguages"] == ["en-US"]
    await client.send("close", {"reason": "end"})
    await client.expect("closed")
    await client.wait_closed()


async def test_client_audio_notices_are_logged_as_what_they_are(bridge, peer, caplog):
    comm, client = await started()
    with caplog.at_level("INFO", logger="bridge"):
        await client.send("paused", {})
        await client.send("resumed", {"start": "PT1.2S", "discarded": "PT3.4S"})
        await client.send("discarded", {"start": "PT5S", "discarded": "PT0.6S"})
        await client.send("ping", {"rtt": "PT0.01S"})
        await client.expect("pong")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("bridge")]
    notices = [
        line.split(": ", 1)[1]
        for line in lines
        if ": paused" in line or ": resumed" in line or ": discarded" in line
    ]
    assert notices == [
        "paused",
        "resumed (start PT1.2S, discarded PT3.4S)",
        "discarded (start PT5S, discarded PT0.6S)",
    ], lines
    await closed(comm, client)
