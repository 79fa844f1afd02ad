"""The realtime clients (VoiceLive, OpenAI GA) through the real SDKs against the local realtime peer."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from realtime_peer import Drop, RealtimePeer, Say
from servers import free_port

from voiceagent.config import load_config
from voiceagent.llm.realtime import (
    OpenAIRealtimeClient,
    RealtimeError,
    SessionConfig,
    VoiceLiveClient,
    build_realtime_client,
    realtime_provider_kind,
)

KEY = "rt-secret-key-0123456789"
KINDS = ["voicelive", "openai"]
TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Look up an account.",
    "parameters": {"type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]},
}
SESSION = SessionConfig(
    instructions="You are helpful.", voice="alloy", tools=(TOOL,), silence_duration_ms=650, language="en-US"
)


@pytest.fixture(scope="module")
def peer():
    with RealtimePeer(api_key=KEY, bearer_tokens=("entra-token",)) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_peer(peer):
    peer.reset()
    yield
    peer.reset()


def make_client(kind: str, base: str, key: str = KEY, timeout: float = 3.0):
    if kind == "voicelive":
        return VoiceLiveClient(base, "gpt-realtime", api_key=key, connect_timeout=timeout)
    return OpenAIRealtimeClient("gpt-realtime", api_key=key, base_url=f"{base}/v1", connect_timeout=timeout)


async def collect(conn, until: str = "response.done", timeout: float = 5.0) -> list[dict]:
    events = []
    async with asyncio.timeout(timeout):
        async for event in conn:
            events.append(event)
            if event["type"] == until:
                return events
    return events


@pytest.mark.parametrize("kind", KINDS)
async def test_connect_configures_the_session_and_normalises_server_events(kind, peer):
    client = make_client(kind, peer.url)
    conn = await client.connect(SESSION)
    try:
        await conn.send(
            {"type": "response.create", "response": {"instructions": 'Say "Hello there, caller."'}}
        )
        events = await collect(conn)
    finally:
        await conn.close()
        await client.close()
    assert [e["type"] for e in events] == [
        "session.created",
        "session.updated",
        "response.created",
        "response.output_item.added",
        "conversation.item.created",  # GA: conversation.item.added
        "response.content_part.added",
        "response.audio.delta",  # GA: response.output_audio.delta
        "response.audio_transcript.delta",  # GA: response.output_audio_transcript.delta
        "response.audio.delta",
        "response.audio_transcript.delta",
        "response.audio.delta",
        "response.audio_transcript.delta",
        "response.audio.done",
        "response.audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
    ]
    assert events[-4]["transcript"] == "Hello there, caller."
    (handshake,) = peer.connections
    assert handshake.query["model"] == "gpt-realtime"
    if kind == "voicelive":
        assert handshake.path == "/voice-live/realtime" and handshake.query["api-version"]
        assert handshake.headers["api-key"] == KEY
        session = peer.received("session.update")[0]["session"]
        assert session["turn_detection"]["silence_duration_ms"] == 650
        assert session["input_audio_transcription"] == {"model": "azure-speech", "language": "en-US"}
        assert session["voice"] == "alloy"
    else:
        assert handshake.path == "/v1/realtime"
        assert handshake.headers["authorization"] == f"Bearer {KEY}"
        session = peer.received("session.update")[0]["session"]
        assert session["type"] == "realtime" and session["output_modalities"] == ["audio"]
        assert session["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 650
        assert session["audio"]["input"]["transcription"]["language"] == "en"
        assert session["audio"]["output"]["voice"] == "alloy"
    assert session["tools"] == [TOOL] and session["instructions"] == "You are helpful."
    assert not [e for e in events if e["type"] == "error"]


async def test_voicelive_with_a_token_credential(peer):
    from azure.core.credentials import AccessToken
    from azure.core.credentials_async import AsyncTokenCredential

    class Credential(AsyncTokenCredential):  # a subclass: the SDK's isinstance check on the Protocol
        scopes: tuple = ()

        async def get_token(self, *scopes, **kwargs):
            Credential.scopes = scopes
            return AccessToken("entra-token", int(time.time()) + 3600)

        async def close(self):
            return None

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return None

    client = VoiceLiveClient(peer.url, "gpt-realtime", credential=Credential())
    conn = await client.connect(SESSION)
    await conn.close()
    assert peer.connections[0].headers["authorization"] == "Bearer entra-token"
    assert Credential.scopes == ("https://ai.azure.com/.default",)


@pytest.mark.parametrize("kind", KINDS)
async def test_rejected_credentials_are_not_retryable_and_never_leak(kind, peer, caplog):
    caplog.set_level(logging.DEBUG)
    client = make_client(kind, peer.url, key="wrong-secret-key-987654")
    with pytest.raises(RealtimeError) as info:
        await client.connect(SESSION)
    await client.close()
    assert info.value.retryable is False
    assert "401" in str(info.value)
    assert "wrong-secret-key-987654" not in str(info.value)
    assert "wrong-secret-key-987654" not in caplog.text


@pytest.mark.parametrize("kind", KINDS)
async def test_unreachable_and_slow_servers_fail_fast(kind, peer):
    client = make_client(kind, f"http://127.0.0.1:{free_port()}")
    began = time.monotonic()
    with pytest.raises(RealtimeError) as info:
        await client.connect(SESSION)
    assert info.value.retryable is True and time.monotonic() - began < 2
    await client.close()

    peer.accept_delay = 2.0
    client = make_client(kind, peer.url, timeout=0.3)
    began = time.monotonic()
    with pytest.raises(RealtimeError, match="within 0.3s"):
        await client.connect(SESSION)
    assert time.monotonic() - began < 1.5
    await client.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_dropped_connection_raises_and_our_close_ends_quietly(kind, peer):
    peer.push(Drop(Say("one two three four", chunks=4), after=1))
    client = make_client(kind, peer.url)
    conn = await client.connect(SESSION)
    await conn.send({"type": "response.create"})
    seen = []
    with pytest.raises(RealtimeError, match="closed by the server|connection lost"):
        async with asyncio.timeout(5):
            async for event in conn:
                seen.append(event["type"])
    assert "response.audio.delta" in seen
    with pytest.raises(RealtimeError):
        for _ in range(20):  # the socket is gone: sends fail (possibly after a buffered one)
            await conn.send({"type": "input_audio_buffer.append", "audio": ""})
            await asyncio.sleep(0.01)
    await conn.close()

    conn = await client.connect(SESSION)
    reader = asyncio.create_task(collect(conn, until="never"))
    await asyncio.sleep(0.1)
    await conn.close()
    events = await asyncio.wait_for(reader, 3)  # iteration just ends
    assert [e["type"] for e in events][:2] == ["session.created", "session.updated"]
    await client.close()


async def test_openai_keeps_the_voice_once_audio_was_produced(peer):
    client = make_client("openai", peer.url)
    conn = await client.connect(SESSION)
    await conn.send({"type": "response.create", "response": {"instructions": 'Say "Hi."'}})
    await collect(conn)
    event = conn.session_event(SessionConfig(instructions="You are billing.", voice="coral"))
    assert "voice" not in event["session"]["audio"]["output"]  # the service would refuse the change
    await conn.update_session(SessionConfig(instructions="You are billing.", voice="coral"))
    assert (await collect(conn, until="session.updated"))[-1]["session"]["instructions"] == "You are billing."
    # assistant text items use GA's output_text
    await conn.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": "Earlier."}],
            },
        }
    )
    await collect(conn, until="conversation.item.created")
    assert peer.received("conversation.item.create")[0]["item"]["content"][0]["type"] == "output_text"
    await conn.close()
    await client.close()


def test_provider_selection():
    assert realtime_provider_kind({"CLOUD_REALTIME_VOICE_ENDPOINT": "https://x"}) == "voicelive"
    assert realtime_provider_kind({"OPENAI_API_KEY": "k"}) == "openai"
    assert (
        realtime_provider_kind(
            {
                "CLOUD_REALTIME_VOICE_ENDPOINT": "https://x",
                "OPENAI_API_KEY": "k",
                "REALTIME_PROVIDER": "openai",
            }
        )
        == "openai"
    )
    with pytest.raises(ValueError, match="needs a realtime voice API"):
        realtime_provider_kind({})
    with pytest.raises(ValueError, match="not one of"):
        realtime_provider_kind({"REALTIME_PROVIDER": "pigeon"})
    with pytest.raises(ValueError, match="needs CLOUD_REALTIME_VOICE_ENDPOINT"):
        realtime_provider_kind({"REALTIME_PROVIDER": "voicelive"})
    # not in the validated table (yet): read from the raw environment
    config = load_config(
        {"REALTIME_PROVIDER": "openai", "CLOUD_REALTIME_VOICE_ENDPOINT": "https://x.example"}
    )
    assert realtime_provider_kind(config) == "openai"


async def test_build_from_config():
    config = load_config(
        {
            "CLOUD_REALTIME_VOICE_ENDPOINT": "https://voice.example",
            "CLOUD_REALTIME_VOICE_MODEL": "gpt-realtime",
            "CLOUD_REALTIME_VOICE_API_KEY": KEY,
        }
    )
    client = build_realtime_client(config)
    assert isinstance(client, VoiceLiveClient) and client.model == "gpt-realtime"
    assert KEY not in repr(vars(client).get("endpoint"))
    with pytest.raises(ValueError, match="API_KEY or USE_DEFAULT_CREDENTIAL"):
        build_realtime_client(
            load_config(
                {"CLOUD_REALTIME_VOICE_ENDPOINT": "https://v.example", "CLOUD_REALTIME_VOICE_MODEL": "m"}
            )
        )
    managed = build_realtime_client(
        load_config(
            {
                "CLOUD_REALTIME_VOICE_ENDPOINT": "https://v.example",
                "CLOUD_REALTIME_VOICE_MODEL": "m",
                "USE_DEFAULT_CREDENTIAL": "true",
            }
        )
    )
    assert managed._credential is not None
    await managed.close()
    openai_client = build_realtime_client(
        load_config(
            {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "chat", "OPENAI_API_KEY": "k"}
        )
    )
    assert isinstance(openai_client, OpenAIRealtimeClient) and openai_client.model == "gpt-realtime"
    await openai_client.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_public_sdk_send_paths_work_too(kind, peer):
    """The raw-socket fast path has a fallback through each SDK's public send; both speak the same."""
    client = make_client(kind, peer.url)
    conn = await client.connect(SESSION)
    if kind == "voicelive":
        conn._send_str = None
    else:
        conn._ws = conn._ws_send = None
    await conn.send_json('{"type": "input_audio_buffer.append", "audio": "AAAAAA=="}')
    await conn.send({"type": "response.create", "response": {"instructions": 'Say "Fallback."'}})
    events = await collect(conn)
    assert events[-1]["type"] == "response.done"
    assert [e["type"] for e in peer.received()][-2:] == ["input_audio_buffer.append", "response.create"]
    await conn.close()
    await client.close()


async def test_openai_writes_frames_directly_and_waits_through_send_when_the_socket_pushes_back(peer):
    """An open socket with room gets the frame written at once (no await inside); a paused one (its
    write buffer is full) goes through websockets' send(), which waits for the drain; order holds."""
    client = make_client("openai", peer.url)
    conn = await client.connect(SESSION)
    ws = conn._ws
    assert ws is not None, "the websockets connection offers the direct write"
    sent: list[str] = []
    real_send = ws.send

    async def recording_send(message, *args, **kwargs):
        sent.append(message)
        await real_send(message, *args, **kwargs)

    ws.send = conn._ws_send = recording_send
    first = '{"type": "input_audio_buffer.append", "audio": "AQA="}'
    await conn.send_json(first)
    assert sent == []  # written directly
    ws.pause_writing()  # as the transport does when its buffer passes the high-water mark
    second = asyncio.create_task(conn.send_json('{"type": "input_audio_buffer.append", "audio": "AgA="}'))
    await asyncio.sleep(0.05)
    assert len(sent) == 1 and not second.done()  # through send(), waiting for the drain
    ws.resume_writing()
    await asyncio.wait_for(second, 3)
    await conn.send({"type": "response.create", "response": {"instructions": 'Say "Ordered."'}})
    await collect(conn)
    appends = [e["audio"] for e in peer.received("input_audio_buffer.append")]
    assert appends[-2:] == ["AQA=", "AgA="]
    assert peer.received()[-1]["type"] == "response.create"
    await conn.close()
    await client.close()
