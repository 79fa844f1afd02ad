"""The telephony media stream (``/api/v1/media/stream``) end to end in process: a client speaking the
provider's wire format on one side, the engine on instant scripted providers (cascade) or the local
realtime peer (VOICE_LIVE) on the other."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from acs_media_client import AcsMediaClient, over_communicator, silence, tone
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from cryptography.hazmat.primitives.asymmetric import rsa
from realtime_peer import RealtimePeer, Say

from calls import callmap
from calls.callmap import CallInfo
from calls.media import DROP_KINDS
from voiceagent.config import Config
from voiceagent.connections import tracker
from voiceagent.llm.realtime import OpenAIRealtimeClient
from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
PATH = "/api/v1/media/stream"
ISSUER = "https://acscallautomation.communication.azure.com"
AUDIENCE = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Communication/CommunicationServices/acs"
GREETING = "Hello, thank you for calling. I'm the virtual assistant. How can I help you today?"
ANSWER = "Sure, I can help with that."
GREETING_S = len(GREETING.split()) * 0.020  # InstantTTS: 20 ms per word


def configure(settings, **overrides) -> None:
    settings.CONFIG = Config({**settings.CONFIG, **overrides}, {})


async def new_call(scenario: str = "banking", mode: str = "MEDIA") -> CallInfo:
    """What the REST side does when a call is placed or answered: the session and the call map entry."""
    from agents_app import sessions
    from agents_app.catalog import catalog

    def create() -> str:
        spec = catalog.scenario(scenario)
        session_id = sessions.new_session_id()
        sessions.create_session(session_id, spec.name, spec.start_agent, transport="phone")
        return session_id

    session_id = await sessions.db_call(create)
    info = CallInfo(f"conn-{uuid.uuid4().hex[:12]}", session_id, scenario, mode, "inbound", "+15550100")
    await callmap.remember(info)
    return info


async def open_stream(
    query: str = "", connection_id: str | None = None, token: str | None = None, **client_args
) -> tuple[WebsocketCommunicator, AcsMediaClient]:
    headers = []
    if connection_id:
        headers += [
            (b"x-ms-call-connection-id", connection_id.encode()),
            (b"x-ms-call-correlation-id", str(uuid.uuid4()).encode()),
        ]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    comm = WebsocketCommunicator(APP, PATH + (f"?{query}" if query else ""), headers=headers)
    connected, _ = await comm.connect()
    assert connected
    return comm, AcsMediaClient(over_communicator(comm), **client_args)


async def closed_with(client: AcsMediaClient, timeout: float = 8.0) -> tuple[int, str]:
    info = await client.wait_closed(timeout)
    return info["code"], info["reason"]


async def greeted(client: AcsMediaClient) -> None:
    """The greeting was said and has played out."""
    await client.event("agent_response", final=True)
    await client.collect(GREETING_S + 0.3)


# --- a full call ------------------------------------------------------------------------------------
async def test_a_cascade_phone_call(fake_runtime):
    from agents_app import sessions

    call = await new_call()
    comm, client = await open_stream("events=1", connection_id=call.connection_id)
    await client.metadata(16000)
    started = await client.event("event", name="session_started")
    assert started["session_id"] == call.session_id and started["payload"]["transport"] == "phone"
    greeting = await client.event("agent_response", final=True)
    assert greeting["payload"] == {"text": GREETING, "agent": "concierge", "final": True}
    assert greeting["session_id"] == call.session_id and isinstance(greeting["ts"], float)
    await client.collect(GREETING_S + 0.3)
    # the greeting came back as 20 ms frames at the stream's rate, paced at real time
    sizes = {size for _, size in client.audio_frames}
    assert sizes == {640}, sizes
    assert abs(client.audio_seconds() - GREETING_S) <= 0.04, client.audio_seconds()
    times = [t for t, _ in client.audio_frames]
    assert times[-1] - times[0] >= GREETING_S * 0.6  # not a burst
    wire = [m for m in client.wire if m.get("kind") == "AudioData"]
    assert wire[0]["stopAudio"] is None and set(wire[0]) == {"kind", "audioData", "stopAudio"}

    before = len(client.audio)
    await client.speak()
    transcript = await client.event("transcript", final=True)
    assert transcript["payload"] == {"text": "i lost my card", "final": True, "speaker": "user"}
    answer = await client.event("agent_response", final=True)
    assert answer["payload"]["text"] == "Sure, I can help with that."
    await client.collect(0.5)
    assert len(client.audio) - before >= 6 * 0.020 * 16000 * 2 * 0.9  # six words of speech came back
    assert fake_runtime.chat.requests[-1].messages[-1]["content"] == "i lost my card"

    await comm.disconnect()  # the provider hung up
    await asyncio.sleep(0.2)
    assert tracker.active_count("phone") == 0
    history = await sessions.db_call(sessions.history, call.session_id)
    assert [t["role"] for t in history][-2:] == ["user", "assistant"]
    state = await sessions.db_call(sessions.load_state, call.session_id)
    assert state.transport == "phone"


async def test_simulator_stream_at_24k_with_capitalized_keys(fake_runtime):
    comm, client = await open_stream("scenario=banking&events=1", capitalized=True)
    await client.metadata(24000)
    await greeted(client)
    assert {size for _, size in client.audio_frames} == {960}
    assert abs(client.audio_seconds() - GREETING_S) <= 0.04
    await client.speak()
    assert (await client.event("transcript", final=True))["payload"]["text"] == "i lost my card"
    await client.event("agent_response", final=True)
    await client.dtmf("7#")
    assert (await client.event("transcript", final=True))["payload"]["text"] == "Keypad entry: 7"
    await comm.disconnect()


async def test_without_events_only_the_provider_messages_are_sent(fake_runtime):
    comm, client = await open_stream("scenario=banking")
    await client.metadata(16000)
    await client.collect(GREETING_S + 0.4)
    assert client.audio and set(client.types()) == {"AudioData"}
    await comm.disconnect()


async def test_dtmf_reaches_the_engine(fake_runtime):
    comm, client = await open_stream("scenario=banking&events=1")
    await client.metadata()
    await greeted(client)
    await client.dtmf("12")
    await client.dtmf("x")  # not a keypad digit: ignored
    await client.dtmf("3#")
    assert (await client.event("transcript", final=True))["payload"]["text"] == "Keypad entry: 123"
    await client.event("agent_response", final=True)
    assert fake_runtime.chat.requests[-1].messages[-1]["content"] == "Keypad entry: 123"
    await comm.disconnect()


async def test_barge_in_stops_the_audio_and_nothing_stale_follows(fake_runtime):
    from voiceagent.conversation.testing import ScriptedChat

    fake_runtime.chat = ScriptedChat(default=" ".join(["word"] * 150))  # a 3 s answer
    comm, client = await open_stream("scenario=banking&events=1")
    await client.metadata()
    await greeted(client)
    greeting_bytes = len(client.audio)
    await client.speak()
    await client.event("agent_response", final=True)
    async with asyncio.timeout(5):
        while len(client.audio) - greeting_bytes < 0.3 * 16000 * 2:  # the answer is playing
            await client.next_message()
    await client.audio_ms(tone(200, 16000))  # the caller talks over it
    await client.until(lambda m: m.get("kind") == "StopAudio")
    assert client.wire[-1] == {"kind": "StopAudio", "audioData": None, "stopAudio": {}}
    stopped = len(client.audio)
    assert stopped - greeting_bytes < 1.5 * 16000 * 2  # far from the whole answer
    await client.collect(0.8)
    assert len(client.audio) == stopped, "audio of the cancelled answer was sent after StopAudio"
    await comm.disconnect()


# --- refusals ---------------------------------------------------------------------------------------
async def test_unknown_call_connection_is_refused(fake_runtime):
    comm, client = await open_stream(connection_id="conn-nobody-knows")
    assert await closed_with(client) == (1008, "unknown call connection")
    assert tracker.active_count("phone") == 0
    await comm.wait()


async def test_no_connection_id_and_no_scenario_is_refused(fake_runtime):
    comm, client = await open_stream()
    code, reason = await closed_with(client)
    assert code == 1008 and "x-ms-call-connection-id" in reason
    comm, client = await open_stream("scenario=no-such-scenario")
    code, reason = await closed_with(client)
    assert code == 1008 and "unknown scenario" in reason


async def test_unsupported_sample_rate_closes_1003(fake_runtime):
    comm, client = await open_stream("scenario=banking")
    await client.metadata(8000)
    code, reason = await closed_with(client)
    assert code == 1003 and "sampleRate" in reason


@pytest.mark.parametrize("rate", [16000.5, "16000", [16000]])
async def test_a_sample_rate_that_is_no_whole_number_closes_1003(fake_runtime, rate):
    comm, client = await open_stream("scenario=banking")
    await client.send({"kind": "AudioMetadata", "audioMetadata": {"sampleRate": rate}})
    code, reason = await closed_with(client)
    assert code == 1003 and "sampleRate" in reason


async def test_a_whole_sample_rate_written_as_a_float_is_that_rate(fake_runtime):
    """JSON's 24000.0: frames are still counted in whole bytes (it once failed with 1011)."""
    comm, client = await open_stream("scenario=banking")
    await client.send({"kind": "AudioMetadata", "audioMetadata": {"sampleRate": 24000.0}})
    await client.collect(0.3)
    assert client.audio and not client.closed
    await comm.disconnect()


async def test_stream_limit(fake_runtime, settings):
    configure(settings, TELEPHONY_MAX_STREAMS=1)
    first, first_client = await open_stream("scenario=banking")
    second, second_client = await open_stream("scenario=banking")
    code, reason = await closed_with(second_client)
    assert code == 1013 and "try again" in reason
    assert tracker.active_count("phone") == 1
    await first_client.metadata()
    await first_client.collect(0.3)
    assert first_client.audio  # the first call is unaffected
    await first.disconnect()
    await asyncio.sleep(0.1)
    assert tracker.active_count("phone") == 0
    third, third_client = await open_stream("scenario=banking")
    await third_client.metadata()
    await third_client.collect(0.3)
    assert third_client.audio and not third_client.closed
    await third.disconnect()


async def test_start_failure_closes_1011_and_hangs_up(fake_runtime, settings):
    """A VOICE_LIVE call without a realtime API: a clear 1011 and the call is hung up."""
    from calls import acs
    from voiceagent.config import load_config

    hung_up = []

    class FakeTelephony:
        async def hang_up(self, connection_id: str) -> None:
            hung_up.append(connection_id)

    fake_runtime.__dict__.pop("_realtime_client", None)
    settings.CONFIG = load_config({})  # nothing realtime configured
    acs.set_telephony_client(FakeTelephony())
    try:
        call = await new_call(mode="VOICE_LIVE")
        comm, client = await open_stream(connection_id=call.connection_id)
        code, reason = await closed_with(client)
        assert code == 1011 and reason.startswith("the conversation could not start")
        assert hung_up == [call.connection_id]
        assert tracker.active_count("phone") == 0
    finally:
        acs.reset_telephony_client()


# --- hostile input ----------------------------------------------------------------------------------
async def test_bad_frames_are_dropped_and_the_call_goes_on(fake_runtime):
    comm, client = await open_stream("scenario=banking&events=1")
    await client.metadata()
    await greeted(client)
    await client.send({"kind": "AudioData", "audioData": {"data": "not base64!!"}})
    await client.send({"kind": "AudioData", "audioData": {"data": base64.b64encode(b"abc").decode()}})
    await client.send({"kind": "AudioData", "audioData": {"data": 42}})
    await client.send({"kind": "AudioData"})
    await client.send_raw("{not json")
    await client.send_raw("[1, 2]")
    await client.send_raw(json.dumps({"kind": 5}))
    await client.send_raw("[" * 100000 + "]" * 100000)  # deep nesting: 200 KB, under the size limit
    await client.send({"kind": "SomethingNew", "somethingNew": {}})
    await client.send({"kind": "DtmfData", "dtmfData": {"data": ["1"]}})
    await client.send({"kind": "AudioMetadata"})  # no rate -> that one is fatal (checked below)
    code, reason = await closed_with(client)
    assert code == 1003

    comm, client = await open_stream("scenario=banking&events=1")
    await client.metadata()
    await greeted(client)
    await client.send({"kind": "AudioData", "audioData": {"data": "not base64!!"}})
    await client.send({"kind": "AudioData", "audioData": {"data": base64.b64encode(b"abc").decode()}})
    await client.send_raw("{not json")
    await client.send_raw("[" * 100000 + "]" * 100000)
    await client.send_binary(b"\x00" * 640)
    await client.send({"kind": "SomethingNew"})
    await client.speak()  # the stream still works
    assert (await client.event("transcript", final=True))["payload"]["text"] == "i lost my card"
    await client.event("agent_response", final=True)
    assert not client.closed
    await comm.disconnect()


async def test_oversized_message_closes_only_that_stream(fake_runtime):
    calm_comm, calm = await open_stream("scenario=banking&events=1")
    hostile_comm, hostile = await open_stream("scenario=banking&events=1")
    await calm.metadata()
    await hostile.metadata()
    await hostile.send_raw(json.dumps({"kind": "AudioData", "audioData": {"data": "A" * 300_000}}))
    code, reason = await closed_with(hostile)
    assert code == 1009 and "too big" in reason
    hostile_binary_comm, hostile_binary = await open_stream("scenario=banking")
    await hostile_binary.send_binary(b"\x00" * 300_000)
    assert (await closed_with(hostile_binary))[0] == 1009
    # the other call never noticed
    await greeted(calm)
    await calm.speak()
    assert (await calm.event("transcript", final=True))["payload"]["text"] == "i lost my card"
    await calm.event("agent_response", final=True)
    assert not calm.closed
    await calm_comm.disconnect()
    await asyncio.sleep(0.2)
    assert tracker.active_count("phone") == 0


async def test_malformed_messages_are_counted_by_kind_and_logged_once_per_stream(
    fake_runtime, api_client, caplog
):
    """The provider needs no answer, but an operator needs to see them: ``/media/status`` counts
    them per kind, and each stream logs each kind once, not once per message."""

    def dropped() -> dict[str, int]:
        response = api_client.get("/api/v1/media/status")
        assert response.status_code == 200, response.content
        return response.json()["dropped_messages"]

    bad = {
        "malformed": lambda c: c.send_raw("{not json"),
        "bad_audio": lambda c: c.send({"kind": "AudioData", "audioData": {"data": "not base64!!"}}),
        "bad_dtmf": lambda c: c.send({"kind": "DtmfData", "dtmfData": {"data": ["1"]}}),
        "binary": lambda c: c.send_binary(b"\x00" * 640),
        "unknown_kind": lambda c: c.send({"kind": "SomethingNew", "somethingNew": {}}),
    }
    before = await asyncio.to_thread(dropped)
    for _ in range(2):  # two streams, three of each kind on each
        comm, client = await open_stream("scenario=banking&events=1")
        await client.metadata()
        await greeted(client)
        for send in bad.values():
            for _ in range(3):
                await send(client)
        await client.speak()  # the stream still works
        assert (await client.event("transcript", final=True))["payload"]["text"] == "i lost my card"
        await comm.disconnect()
    after = await asyncio.to_thread(dropped)
    assert {kind: after[kind] - before.get(kind, 0) for kind in bad} == dict.fromkeys(bad, 6)
    said = [r for r in caplog.records if r.name == "calls.media" and "was dropped" in r.getMessage()]
    assert len(said) == 2 * len(bad), [r.getMessage() for r in said]
    assert not [r for r in caplog.records if r.name == "calls.media" and r.levelname == "ERROR"]


async def test_a_flood_closes_1008_and_the_size_limit_is_a_setting(fake_runtime, settings):
    configure(
        settings,
        TELEPHONY_MAX_MESSAGES_PER_SECOND=20,
        WEBSOCKET_RATE_BURST_S=1,
        TELEPHONY_MAX_MESSAGE_BYTES=4096,
    )
    calm_comm, calm = await open_stream("scenario=banking&events=1")
    await calm.metadata()
    comm, client = await open_stream("scenario=banking")
    await client.metadata()
    await client.audio_ms(silence(2000, 16000))  # 100 frames at once: 5 s worth of the limit
    assert await closed_with(client) == (1008, "too many messages: the limit is 20 per second")
    comm, client = await open_stream("scenario=banking")
    await client.frame(silence(200, 16000))  # one 6.5 KB message
    code, reason = await closed_with(client)
    assert code == 1009 and reason.endswith("the limit is 4096"), reason
    await greeted(calm)  # the other call never noticed
    assert not calm.closed
    await calm_comm.disconnect()
    await asyncio.sleep(0.2)
    assert tracker.active_count("phone") == 0


# --- ending -----------------------------------------------------------------------------------------
async def test_the_agent_ends_the_call_after_its_goodbye_played(fake_runtime):
    from calls import acs
    from voiceagent.conversation.testing import ScriptedChat

    hung_up = []

    class FakeTelephony:
        async def hang_up(self, connection_id: str) -> None:
            hung_up.append(connection_id)

    fake_runtime.chat = ScriptedChat(
        [[("end_conversation", {"reason": "completed"})], "Goodbye and take care."]
    )
    acs.set_telephony_client(FakeTelephony())
    try:
        call = await new_call()
        comm, client = await open_stream("events=1", connection_id=call.connection_id)
        await client.metadata()
        await greeted(client)
        before = len(client.audio)
        await client.speak()
        code, reason = await closed_with(client)
        assert (code, reason) == (1000, "the agent ended the call")
        assert len(client.audio) - before >= 4 * 0.020 * 16000 * 2 * 0.9  # the goodbye played out
        assert hung_up == [call.connection_id]
        assert any(
            m.get("type") == "tool_call" and m["payload"]["name"] == "end_conversation" for m in client.wire
        )
        assert client.events[-1]["payload"]["name"] == "session_ended"
        assert tracker.active_count("phone") == 0
    finally:
        acs.reset_telephony_client()


async def test_a_hang_up_failure_is_logged_not_raised(fake_runtime, caplog):
    from calls import acs
    from voiceagent.conversation.testing import ScriptedChat

    class BrokenTelephony:
        async def hang_up(self, connection_id: str) -> None:
            raise acs.TelephonyError("the provider said no", status=500)

    fake_runtime.chat = ScriptedChat([[("end_conversation", {})], "Bye."])
    acs.set_telephony_client(BrokenTelephony())
    try:
        call = await new_call()
        comm, client = await open_stream(connection_id=call.connection_id)
        await client.metadata()
        await client.collect(GREETING_S + 0.3)
        await client.speak()
        assert await closed_with(client) == (1000, "the agent ended the call")
        assert "hang-up failed: TelephonyError" in caplog.text
    finally:
        acs.reset_telephony_client()


# --- provider authentication ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def signing():
    """An RSA key pair, its JWKS served over local HTTP, a token factory."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()
    fetched = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            fetched.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def token(*, aud=AUDIENCE, iss=ISSUER, exp_in=300, signer=key, alg="RS256", kid="k1") -> str:
        now = int(time.time())
        claims = {"iss": iss, "aud": aud, "iat": now, "nbf": now - 5, "exp": now + exp_in}
        secret = "s" * 32 if alg == "HS256" else signer
        return jwt.encode(claims, secret, algorithm=alg, headers={"kid": kid})

    yield {
        "url": f"http://127.0.0.1:{server.server_address[1]}/calling/keys",
        "token": token,
        "other": other,
        "fetched": fetched,
    }
    server.shutdown()
    server.server_close()


async def test_the_provider_token_is_required_and_verified(fake_runtime, settings, signing, caplog):
    configure(settings, TELEPHONY_MEDIA_AUDIENCE=AUDIENCE, TELEPHONY_MEDIA_JWKS_URL=signing["url"])
    call = await new_call()
    make = signing["token"]
    bad = {
        "missing": None,
        "not a jwt": "abc.def",
        "wrong audience": make(aud="someone-else"),
        "wrong issuer": make(iss="https://example.com"),
        "expired": make(exp_in=-3600),
        "another key": make(signer=signing["other"]),
        "unknown key id": make(kid="k9"),
        "hs256": make(alg="HS256"),
    }
    for case, token in bad.items():
        comm, client = await open_stream(connection_id=call.connection_id, token=token)
        code, reason = await closed_with(client)
        assert code == 1008 and reason.startswith("unauthorized"), (case, reason)
        if token:
            assert token not in reason and token not in caplog.text
        await comm.wait()
    assert tracker.active_count("phone") == 0

    # a valid token but no connection id: no simulator streams when the provider is authenticated
    comm, client = await open_stream("scenario=banking", token=make())
    code, reason = await closed_with(client)
    assert code == 1008 and "x-ms-call-connection-id" in reason

    good = make()
    comm, client = await open_stream("events=1", connection_id=call.connection_id, token=good)
    await client.metadata()
    await greeted(client)
    assert client.audio and not client.closed
    await comm.disconnect()
    assert good not in caplog.text
    assert len(signing["fetched"]) <= 3  # the key set is cached, not fetched per stream


# --- VOICE_LIVE -------------------------------------------------------------------------------------
async def test_a_voice_live_call_through_the_realtime_api(fake_runtime):
    with RealtimePeer(api_key="rt-key") as peer:
        fake_runtime.__dict__["_realtime_client"] = OpenAIRealtimeClient(
            "gpt-realtime", api_key="rt-key", base_url=f"{peer.url}/v1", connect_timeout=3
        )
        try:
            peer.user_says("block my card")
            peer.push(Say("Your card is blocked.", chunks=2, audio_ms=400))
            call = await new_call(mode="VOICE_LIVE")  # the call's mode wins over TELEPHONY_STREAMING_MODE
            comm, client = await open_stream("events=1", connection_id=call.connection_id)
            await client.metadata(24000)
            await client.event("agent_response", final=True)  # the greeting
            await client.collect(0.6)
            greeting_bytes = len(client.audio)
            assert greeting_bytes and {size for _, size in client.audio_frames} == {960}
            await client.audio_ms(tone(400, 24000))
            await client.audio_ms(silence(1200, 24000))
            await client.until(
                lambda m: (
                    m.get("type") == "agent_response"
                    and m["payload"]["final"]
                    and "blocked" in m["payload"]["text"]
                )
            )
            await client.collect(0.7)
            answer_s = (len(client.audio) - greeting_bytes) / 2 / 24000
            assert 0.3 <= answer_s <= 0.5, answer_s
            assert any(
                m.get("type") == "transcript" and m["payload"]["text"] == "block my card" for m in client.wire
            )
            update = peer.received("session.update")[0]["session"]
            assert update["audio"]["input"]["format"]["rate"] == 24000
            await comm.disconnect()
        finally:
            fake_runtime.__dict__.pop("_realtime_client", None)
    await fake_runtime.stop_realtime()


# --- /media/status ----------------------------------------------------------------------------------
async def test_media_status(fake_runtime, api_client, settings):
    def status() -> dict:
        response = api_client.get("/api/v1/media/status")
        assert response.status_code == 200, response.content
        return response.json()

    body = await asyncio.to_thread(status)
    assert set(body.pop("dropped_messages")) == set(DROP_KINDS)
    assert body == {
        "mode": "MEDIA",
        "active_streams": 0,
        "websocket_path": "/api/v1/media/stream",
        "audio_format": "pcm16KMono",
    }
    comm, client = await open_stream("scenario=banking")
    await client.metadata()
    await client.collect(0.1)
    assert (await asyncio.to_thread(status))["active_streams"] == 1
    await comm.disconnect()
    configure(settings, TELEPHONY_STREAMING_MODE="VOICE_LIVE")
    body = await asyncio.to_thread(status)
    assert body["mode"] == "VOICE_LIVE" and body["audio_format"] == "pcm24KMono"
    assert body["active_streams"] == 0


# --- dashboards -------------------------------------------------------------------------------------
async def test_the_call_is_published_to_the_dashboard_relay(fake_runtime):
    """Without ``?events=1`` the socket carries only provider messages; dashboards still see it all."""
    call = await new_call()
    dashboard = WebsocketCommunicator(APP, f"/api/v1/browser/dashboard/relay?session_id={call.session_id}")
    assert (await dashboard.connect())[0]
    assert json.loads(await dashboard.receive_from())["payload"]["name"] == "relay_connected"
    comm, client = await open_stream(connection_id=call.connection_id)
    await client.metadata()
    await client.collect(GREETING_S + 0.3)
    await client.speak()
    seen = []
    async with asyncio.timeout(8):
        while not (seen and seen[-1]["type"] == "response" and seen[-1]["payload"]["text"] == ANSWER):
            seen.append(json.loads(await dashboard.receive_from(8)))
    assert seen[0]["type"] == "event" and seen[0]["payload"]["name"] == "session_started"
    assert any(m["type"] == "transcript" and m["payload"]["text"] == "i lost my card" for m in seen)
    assert all(m["session_id"] == call.session_id for m in seen)
    assert set(client.types()) == {"AudioData"}
    await comm.disconnect()
    async with asyncio.timeout(5):
        while not (seen[-1]["type"] == "event" and seen[-1]["payload"]["name"] == "session_ended"):
            seen.append(json.loads(await dashboard.receive_from(5)))
    await dashboard.disconnect()
