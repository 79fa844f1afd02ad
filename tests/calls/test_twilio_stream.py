"""Twilio Media Streams (``/api/v1/twilio/stream``) in process: Twilio's side played by the test
client (signed upgrade, ``connected``/``start``/``media``/``dtmf``/``mark``/``stop``), the engine on
instant scripted providers (cascade) or the local realtime peer (live)."""

from __future__ import annotations

import asyncio
import json

import pytest
from acs_media_client import over_communicator
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from realtime_peer import RealtimePeer, Say
from twilio_media_client import TwilioMediaClient, sign, silence, tone, twilio_sid

from calls import callmap
from calls.callmap import CallInfo
from calls.models import Call
from voiceagent.config import Config
from voiceagent.connections import tracker
from voiceagent.llm.realtime import OpenAIRealtimeClient
from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
PATH = "/api/v1/twilio/stream"
BASE_URL = "https://voice.example.com"
PUBLIC = "wss://voice.example.com/api/v1/twilio/stream"
ACCOUNT = twilio_sid("AC")
TOKEN = "twilio-test-token"
GREETING = "Hello, thank you for calling. I'm the virtual assistant. How can I help you today?"
GREETING_S = len(GREETING.split()) * 0.020  # InstantTTS: 20 ms per word


@pytest.fixture
def twilio(fake_runtime, settings):
    settings.CONFIG = Config(
        {
            **settings.CONFIG,
            "TELEPHONY_PROVIDER": "twilio",
            "TWILIO_ACCOUNT_SID": ACCOUNT,
            "TWILIO_AUTH_TOKEN": TOKEN,
            "BASE_URL": BASE_URL,
        },
        {},
    )
    return fake_runtime


async def new_call(scenario: str = "banking", mode: str = "MEDIA") -> CallInfo:
    """What the voice webhook does: the session, the call map entry and the call row."""
    from agents_app import sessions
    from agents_app.catalog import catalog

    def create() -> str:
        spec = catalog.scenario(scenario)
        session_id = sessions.new_session_id()
        sessions.create_session(session_id, spec.name, spec.start_agent, transport="phone")
        return session_id

    session_id = await sessions.db_call(create)
    info = CallInfo(twilio_sid("CA"), session_id, scenario, mode, "inbound", "+15550100")
    await callmap.remember(info)
    await sessions.db_call(
        lambda: Call.objects.create(
            connection_id=info.connection_id, session_id=session_id, direction="inbound", status="connected"
        )
    )
    return info


async def open_stream(
    call: CallInfo | None = None,
    query: str = "",
    signature: str | None = "sign",
    signed_query: str | None = None,
) -> tuple[WebsocketCommunicator, TwilioMediaClient]:
    """A stream as Twilio opens it: the upgrade signed over the public URL (``signed_query``: the
    query the signature was made for, when it is not the one sent)."""
    signed = PUBLIC + (
        f"?{signed_query if signed_query is not None else query}" if (signed_query or query) else ""
    )
    headers = []
    if signature is not None:
        headers.append(
            (b"x-twilio-signature", (sign(TOKEN, signed) if signature == "sign" else signature).encode())
        )
    comm = WebsocketCommunicator(APP, PATH + (f"?{query}" if query else ""), headers=headers)
    connected, _ = await comm.connect()
    assert connected
    client = TwilioMediaClient(over_communicator(comm), account_sid=ACCOUNT)
    if call is not None:
        client.call_sid = call.connection_id
    return comm, client


async def started(call: CallInfo, query: str = "events=1") -> tuple[WebsocketCommunicator, TwilioMediaClient]:
    comm, client = await open_stream(call, query)
    await client.begin({"session_id": call.session_id, "scenario": call.scenario})
    return comm, client


async def closed_with(client: TwilioMediaClient, timeout: float = 8.0) -> tuple[int, str]:
    info = await client.wait_closed(timeout)
    return info["code"], info["reason"]


# --- a call -----------------------------------------------------------------------------------------
async def test_a_cascade_call_in_twilio_framing(twilio):
    from agents_app import sessions

    call = await new_call()
    comm, client = await started(call)
    hello = await client.event("event", name="session_started")
    assert hello["session_id"] == call.session_id and hello["payload"]["transport"] == "phone"
    greeting = await client.event("agent_response", final=True)
    assert greeting["payload"]["text"] == GREETING
    mark = await client.until(lambda m: m.get("event") == "mark")
    # the greeting: 20 ms frames of base64 mu-law at 8 kHz on our streamSid, then a mark after it
    media = [m for m in client.wire if m.get("event") == "media"]
    assert media and all(set(m) == {"event", "streamSid", "media"} for m in media)
    assert {m["streamSid"] for m in media} == {client.stream_sid} == {mark["streamSid"]}
    assert {len(m["media"]["payload"]) for m in media} == {216}  # base64 of 160 bytes
    assert abs(client.audio_seconds() - GREETING_S) <= 0.04, client.audio_seconds()
    times = [t for t, _ in client.audio_frames]
    assert times[-1] - times[0] >= GREETING_S * 0.6  # paced, not a burst
    assert mark["mark"]["name"] == "response-1" and client.marks == [("response-1", len(client.audio))]

    await client.collect(0.3)  # the engine hears the greeting end
    before = len(client.audio)
    await client.speak()
    transcript = await client.event("transcript", final=True)
    assert transcript["payload"] == {"text": "i lost my card", "final": True, "speaker": "user"}
    assert (await client.event("agent_response", final=True))["payload"][
        "text"
    ] == "Sure, I can help with that."
    await client.until(lambda m: m.get("event") == "mark" and m["mark"]["name"] == "response-2")
    assert len(client.audio) - before >= 6 * 0.020 * 8000 * 2 * 0.9  # six words of speech came back
    assert twilio.chat.requests[-1].messages[-1]["content"] == "i lost my card"

    await client.stop()  # the caller hung up: Twilio says stop
    assert await closed_with(client) == (1000, "the call ended")
    assert tracker.active_count("phone") == 0
    row = await sessions.db_call(lambda: Call.objects.get(connection_id=call.connection_id))
    assert row.status == "disconnected" and row.ended_at is not None
    history = await sessions.db_call(sessions.history, call.session_id)
    assert [t["role"] for t in history][-2:] == ["user", "assistant"]


async def test_dtmf_reaches_the_cascade(twilio):
    call = await new_call()
    comm, client = await started(call)
    await client.event("agent_response", final=True)
    for digit in "12":
        await client.dtmf(digit)
    await client.dtmf("x")  # not a keypad digit: dropped
    await client.dtmf("#")
    assert (await client.event("transcript", final=True))["payload"]["text"] == "Keypad entry: 12"
    await client.event("agent_response", final=True)
    assert twilio.chat.requests[-1].messages[-1]["content"] == "Keypad entry: 12"
    await comm.disconnect()


async def test_barge_in_clears_and_nothing_stale_follows(twilio):
    from voiceagent.conversation.testing import ScriptedChat

    twilio.chat = ScriptedChat(default=" ".join(["word"] * 150))  # a 3 s answer
    call = await new_call()
    comm, client = await started(call)
    await client.until(lambda m: m.get("event") == "mark")  # the greeting played
    await client.collect(0.3)
    greeting_bytes = len(client.audio)
    await client.speak()
    await client.event("agent_response", final=True)
    async with asyncio.timeout(5):
        while len(client.audio) - greeting_bytes < 0.3 * 8000 * 2:  # the answer is playing
            await client.next_message()
    await client.audio_ms(tone(200, 8000))  # the caller talks over it
    await client.until(lambda m: m.get("event") == "clear")
    assert client.wire[-1] == {"event": "clear", "streamSid": client.stream_sid}
    stopped = len(client.audio)
    assert stopped - greeting_bytes < 1.5 * 8000 * 2  # far from the whole answer
    await client.collect(0.8)
    assert len(client.audio) == stopped, "audio of the cancelled answer was sent after clear"
    assert [name for name, _ in client.marks] == ["response-1"]  # the cut answer is never marked
    await comm.disconnect()


async def test_a_live_call_takes_audio_and_dtmf(twilio):
    with RealtimePeer(api_key="rt-key") as peer:
        twilio.__dict__["_realtime_client"] = OpenAIRealtimeClient(
            "gpt-realtime", api_key="rt-key", base_url=f"{peer.url}/v1", connect_timeout=3
        )
        try:
            peer.user_says("block my card")
            peer.push(Say("Your card is blocked.", chunks=2, audio_ms=400))
            call = await new_call(mode="VOICE_LIVE")
            comm, client = await started(call)
            await client.event("agent_response", final=True)  # the greeting
            await client.collect(0.6)
            greeting_bytes = len(client.audio)
            assert greeting_bytes
            await client.audio_ms(tone(400, 8000))
            await client.audio_ms(silence(1200, 8000))
            await client.until(
                lambda m: (
                    m.get("type") == "agent_response"
                    and m["payload"]["final"]
                    and "blocked" in m["payload"]["text"]
                )
            )
            await client.collect(0.7)
            answer_s = (len(client.audio) - greeting_bytes) / 2 / 8000
            assert 0.3 <= answer_s <= 0.5, answer_s
            update = peer.received("session.update")[0]["session"]
            assert update["audio"]["input"]["format"]["rate"] == 24000  # 8 kHz mu-law upsampled for it
            await client.dtmf("4")
            await client.dtmf("#")
            await client.until(
                lambda m: m.get("type") == "transcript" and m["payload"]["text"] == "Keypad entry: 4",
                timeout=8,
            )
            await comm.disconnect()
        finally:
            twilio.__dict__.pop("_realtime_client", None)
    await twilio.stop_realtime()


# --- refusals and bad frames: each closes only its own stream ---------------------------------------
@pytest.mark.parametrize(
    ("signature", "signed_query", "query"),
    [(None, None, ""), ("forged", None, ""), ("sign", "", "events=1")],
    ids=["missing", "forged", "query-not-signed"],
)
async def test_an_unsigned_or_forged_upgrade_is_refused(twilio, signature, signed_query, query):
    comm, client = await open_stream(query=query, signature=signature, signed_query=signed_query)
    assert await closed_with(client) == (1008, "missing or invalid X-Twilio-Signature")
    assert tracker.active_count("phone") == 0


async def test_without_twilio_configured_the_stream_is_refused(fake_runtime):
    comm, client = await open_stream()
    code, reason = await closed_with(client)
    assert code == 1008 and "Twilio is not configured" in reason


async def bad(client: TwilioMediaClient, call: CallInfo, action: str) -> None:
    parameters = {"session_id": call.session_id}
    if action == "media_before_start":
        await client.connected()
        await client.frame(b"\xff" * 160)
    elif action == "unknown_stream":
        await client.begin(parameters)
        await client.frame(b"\xff" * 160, stream_sid=twilio_sid("MZ"))
    elif action == "second_start":
        await client.begin(parameters)
        await client.start(parameters)
    elif action == "unknown_call":
        client.call_sid = twilio_sid("CA")
        await client.begin(parameters)
    elif action == "other_session":
        await client.begin({"session_id": "someone-else"})
    elif action == "pcm_format":
        await client.start(parameters, {"encoding": "audio/l16", "sampleRate": 16000, "channels": 1})
    elif action == "not_json":
        await client.send_raw("{not json")
    elif action == "no_event":
        await client.send_raw(json.dumps({"streamSid": client.stream_sid}))
    elif action == "bad_base64":
        await client.begin(parameters)
        await client.send({"event": "media", "streamSid": client.stream_sid, "media": {"payload": "%%%"}})
    elif action == "binary":
        await client.socket.send_bytes(b"\x00" * 10)
    elif action == "oversized":
        await client.send_raw(json.dumps({"event": "media", "pad": "x" * 300_000}))


@pytest.mark.parametrize(
    ("action", "code", "reason"),
    [
        ("media_before_start", 1008, "media before start"),
        ("unknown_stream", 1008, "unknown streamSid"),
        ("second_start", 1008, "a second start on this stream"),
        ("unknown_call", 1008, "unknown call"),
        ("other_session", 1008, "the stream's session_id is not the call's"),
        ("pcm_format", 1003, "unsupported mediaFormat: expected audio/x-mulaw at 8000 Hz, mono"),
        ("not_json", 1007, "a message that is not a JSON object with an event"),
        ("no_event", 1007, "a message that is not a JSON object with an event"),
        ("bad_base64", 1007, "media payload is not base64"),
        ("binary", 1003, "binary frames are not part of a Twilio Media Stream"),
        ("oversized", 1009, None),
    ],
)
async def test_bad_frames_close_only_their_stream(twilio, action, code, reason):
    bystander_call = await new_call()
    bystander_comm, bystander = await started(bystander_call)
    await bystander.event("agent_response", final=True)
    call = await new_call()
    comm, client = await open_stream(call)
    await bad(client, call, action)
    got_code, got_reason = await closed_with(client)
    assert got_code == code and (reason is None or got_reason == reason), (got_code, got_reason)
    # the other call goes on
    await bystander.speak()
    assert (await bystander.event("transcript", final=True))["payload"]["text"] == "i lost my card"
    assert tracker.active_count("phone") == 1
    await bystander_comm.disconnect()


async def test_unknown_events_are_dropped_and_counted(twilio, api_client):
    call = await new_call()
    comm, client = await started(call)
    await client.event("agent_response", final=True)
    before = (await asyncio.to_thread(api_client.get, "/api/v1/media/status")).json()["dropped_messages"]
    await client.send({"event": "something-new", "streamSid": client.stream_sid})
    await client.speak()
    assert (await client.event("transcript", final=True))["payload"]["text"] == "i lost my card"
    after = (await asyncio.to_thread(api_client.get, "/api/v1/media/status")).json()["dropped_messages"]
    assert after["unknown_kind"] == before["unknown_kind"] + 1
    await comm.disconnect()


async def test_the_agent_ends_the_call_and_it_is_hung_up_through_twilio(twilio):
    from calls import twilio_api
    from voiceagent.conversation.testing import ScriptedChat

    hung_up = []

    class FakeTwilio:
        async def hang_up(self, call_sid: str) -> None:
            hung_up.append(call_sid)

    twilio.chat = ScriptedChat([[("end_conversation", {"reason": "completed"})], "Goodbye and take care."])
    twilio_api.set_twilio_client(FakeTwilio())
    try:
        call = await new_call()
        comm, client = await started(call)
        await client.until(lambda m: m.get("event") == "mark")
        await client.collect(0.3)
        before = len(client.audio)
        await client.speak()
        assert await closed_with(client) == (1000, "the agent ended the call")
        assert len(client.audio) - before >= 4 * 0.020 * 8000 * 2 * 0.9  # the goodbye played out
        assert hung_up == [call.connection_id]
    finally:
        twilio_api.reset_twilio_client()


async def test_twilio_stop_is_not_hung_up(twilio):
    from calls import twilio_api

    hung_up = []

    class FakeTwilio:
        async def hang_up(self, call_sid: str) -> None:
            hung_up.append(call_sid)

    twilio_api.set_twilio_client(FakeTwilio())
    try:
        call = await new_call()
        comm, client = await started(call, query="")
        await client.collect(0.2)
        await client.stop()
        assert await closed_with(client) == (1000, "the call ended")
        assert hung_up == []
        assert await callmap.lookup(call.connection_id) is None
    finally:
        twilio_api.reset_twilio_client()


async def test_a_conversation_that_cannot_start_in_time_closes_1011_and_is_hung_up(twilio, monkeypatch):
    """Frames Twilio keeps sending while the start waits cost nothing; the call is hung up."""
    from calls import phone_stream, twilio_api
    from voiceagent.runtime import runtime

    hung_up = []

    class FakeTwilio:
        async def hang_up(self, call_sid: str) -> None:
            hung_up.append(call_sid)

    made = runtime.new_conversation_for

    def slow(*args, **kwargs):
        conversation = made(*args, **kwargs)
        started = conversation.start

        async def start():
            await asyncio.sleep(1.0)
            await started()

        conversation.start = start
        return conversation

    monkeypatch.setattr(runtime, "new_conversation_for", slow)
    monkeypatch.setattr(phone_stream, "START_DEADLINE_S", 0.3)
    twilio_api.set_twilio_client(FakeTwilio())
    try:
        call = await new_call()
        comm, client = await open_stream(call)
        await client.begin({"session_id": call.session_id})
        await client.audio_ms(silence(400, 8000))  # the line goes on while the start waits
        await client.dtmf("1")
        code, reason = await closed_with(client)
        assert (code, reason) == (1011, "the conversation could not start: no start within 0.3 s")
        assert hung_up == [call.connection_id]
        assert tracker.active_count("phone") == 0
    finally:
        twilio_api.reset_twilio_client()
