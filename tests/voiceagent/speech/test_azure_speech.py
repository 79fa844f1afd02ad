"""Azure Speech: the pure parts (SSML, auth, SpeechConfig) and clear failures without the cloud.

No test reaches Azure. The "unreachable" tests point the real SDK at a closed port on 127.0.0.1:
it fails to connect within milliseconds and we check the failure comes out as a ProviderError that
names the cause and never the key.
"""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import azure.cognitiveservices.speech as speechsdk
import pytest

from voiceagent.config import ConfigError, load_config
from voiceagent.conversation.providers import ProviderError
from voiceagent.conversation.specs import VoiceSpec, resolve_voice
from voiceagent.speech.azure_auth import (
    AadTokenProvider,
    AzureSpeechAuth,
    build_speech_config,
    cancellation_message,
)
from voiceagent.speech.azure_stt import AzureSTT
from voiceagent.speech.azure_tts import AzureTTS, build_ssml

KEY = "fake-key-0123456789abcdef"
NS = {"s": "http://www.w3.org/2001/10/synthesis", "mstts": "https://www.w3.org/2001/mstts"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- SSML -------------------------------------------------------------------------------------------
def test_ssml_voice_style_rate():
    ssml = build_ssml("Hello there.", VoiceSpec("en-US-AvaMultilingualNeural", "chat", "+3%"))
    root = ET.fromstring(ssml)
    assert root.get("{http://www.w3.org/XML/1998/namespace}lang") == "en-US"
    voice = root.find("s:voice", NS)
    assert voice.get("name") == "en-US-AvaMultilingualNeural"
    style = voice.find("mstts:express-as", NS)
    assert style.get("style") == "chat"
    prosody = style.find("s:prosody", NS)
    assert prosody.get("rate") == "+3%"
    assert prosody.text == "Hello there."


def test_ssml_without_style_or_rate():
    root = ET.fromstring(build_ssml("Guten Tag", VoiceSpec("de-DE-KatjaNeural", None, None)))
    assert root.get("{http://www.w3.org/XML/1998/namespace}lang") == "de-DE"
    voice = root.find("s:voice", NS)
    assert voice.find("mstts:express-as", NS) is None and voice.find("s:prosody", NS) is None
    assert voice.text == "Guten Tag"
    # a defaulted rate is not worth a prosody element; no voice at all falls back to Ava
    root = ET.fromstring(build_ssml("x", VoiceSpec(None, None, "default")))
    assert root.find("s:voice", NS).get("name") == "en-US-AvaMultilingualNeural"
    assert root.find("s:voice/s:prosody", NS) is None


@pytest.mark.parametrize(
    "hostile",
    [
        '</prosody></voice><voice name="en-US-GuyNeural">pwned',
        "<speak><audio src='https://evil.example/x.wav'/></speak>",
        "Tom & Jerry's \"quotes\" <break time='10s'/> ]]> &amp; &#x41;",
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>&e;',
    ],
)
def test_ssml_escapes_hostile_text(hostile):
    root = ET.fromstring(build_ssml(hostile, VoiceSpec("en-US-AvaMultilingualNeural", "chat", "+3%")))
    voices = root.findall("s:voice", NS)
    assert len(voices) == 1 and voices[0].get("name") == "en-US-AvaMultilingualNeural"
    prosody = voices[0].find("mstts:express-as/s:prosody", NS)
    assert list(prosody) == []  # no element smuggled in
    assert prosody.text == hostile  # spoken verbatim


def test_ssml_drops_characters_xml_cannot_carry_and_bad_attributes():
    root = ET.fromstring(build_ssml("a\x00b\x1bc\ufffed", VoiceSpec("en-US-X", "chat", "+3%")))
    assert root.find("s:voice/mstts:express-as/s:prosody", NS).text == "abcd"
    ssml = build_ssml("hi", VoiceSpec('en-US-X" onload="x', 'chat" x="1', "+3%; drop table"))
    root = ET.fromstring(ssml)
    voice = root.find("s:voice", NS)
    assert voice.get("name") == 'en-US-X" onload="x'  # escaped inside the attribute, harmless
    assert voice.find("mstts:express-as", NS) is None  # invalid style left out
    assert voice.find("s:prosody", NS) is None  # invalid rate left out
    assert voice.text == "hi"


def test_resolve_voice_fills_defaults():
    default = VoiceSpec("en-US-AvaMultilingualNeural", "chat", "+3%")
    assert resolve_voice(None, default) == default
    assert resolve_voice(VoiceSpec(style="friendly"), default) == VoiceSpec(
        "en-US-AvaMultilingualNeural", "friendly", "+3%"
    )
    tts = AzureTTS(AzureSpeechAuth("westeurope", KEY), default_voice=lambda: default)
    assert tts.voice_for(VoiceSpec(rate="-5%")).rate == "-5%"
    assert tts.voice_for(VoiceSpec()).name == default.name


# --- auth --------------------------------------------------------------------------------------------
def test_auth_selection():
    key = AzureSpeechAuth.from_config({"CLOUD_SPEECH_REGION": "westeurope", "CLOUD_SPEECH_KEY": KEY})
    assert key.mode == "key" and KEY not in repr(key) and key.secrets == (KEY,)
    aad = AzureSpeechAuth.from_config(
        {
            "CLOUD_SPEECH_REGION": "westeurope",
            "CLOUD_SPEECH_KEY": KEY,
            "USE_DEFAULT_CREDENTIAL": True,
            "CLOUD_SPEECH_RESOURCE_ID": "/subscriptions/s/resourceGroups/g/providers/x/accounts/a",
        }
    )
    assert aad.mode == "aad"  # managed identity wins when selected, as for the chat LLM
    # default credential without a resource id: the key still works
    assert AzureSpeechAuth("westeurope", KEY, use_default_credential=True).mode == "key"
    with pytest.raises(ConfigError, match="CLOUD_SPEECH_RESOURCE_ID"):
        AzureSpeechAuth("westeurope", None, use_default_credential=True)
    with pytest.raises(ConfigError, match="CLOUD_SPEECH_KEY"):
        AzureSpeechAuth("westeurope")
    with pytest.raises(ConfigError, match="CLOUD_SPEECH_REGION"):
        AzureSpeechAuth("", KEY)


def test_is_configured_with_the_real_config_loader():
    assert not AzureSpeechAuth.is_configured(load_config({}))
    assert not AzureSpeechAuth.is_configured(load_config({"CLOUD_SPEECH_KEY": KEY}))
    assert not AzureSpeechAuth.is_configured(load_config({"CLOUD_SPEECH_REGION": "westeurope"}))
    assert AzureSpeechAuth.is_configured(
        load_config({"CLOUD_SPEECH_REGION": "westeurope", "CLOUD_SPEECH_KEY": KEY})
    )
    assert AzureSpeechAuth.is_configured(
        load_config({"CLOUD_SPEECH_REGION": "westeurope", "USE_DEFAULT_CREDENTIAL": "true"})
    )


def test_speech_config_is_built_offline():
    config = build_speech_config(AzureSpeechAuth("westeurope", KEY))
    assert isinstance(config, speechsdk.SpeechConfig)
    assert config.region == "westeurope"
    auth = AzureSpeechAuth("swedencentral", None, "/subscriptions/s/x", use_default_credential=True)
    config = build_speech_config(auth, "aad#/subscriptions/s/x#token123")
    assert config.region == "swedencentral"
    assert config.authorization_token == "aad#/subscriptions/s/x#token123"
    with pytest.raises(ProviderError, match="token"):
        build_speech_config(auth, None)
    config = build_speech_config(AzureSpeechAuth("westeurope", KEY), endpoint="wss://127.0.0.1:1/x")
    endpoint = config.get_property(speechsdk.PropertyId.SpeechServiceConnection_Endpoint)
    assert endpoint == "wss://127.0.0.1:1/x"


async def test_aad_token_is_formatted_cached_and_refreshed():
    calls = []

    class FakeCredential:
        def get_token(self, scope):
            calls.append(scope)
            return SimpleNamespace(token=f"tok{len(calls)}", expires_on=time.time() + expires_in)

    expires_in = 3600
    tokens = AadTokenProvider("/subscriptions/s/x", FakeCredential())
    assert await tokens.token() == "aad#/subscriptions/s/x#tok1"
    assert await tokens.token() == "aad#/subscriptions/s/x#tok1"  # cached
    assert calls == ["https://cognitiveservices.azure.com/.default"]
    tokens._expires_on = time.time() + 60  # within the refresh margin
    assert await tokens.token() == "aad#/subscriptions/s/x#tok2"

    class Broken:
        def get_token(self, scope):
            raise RuntimeError("no managed identity endpoint")

    with pytest.raises(ProviderError, match="Entra token.*no managed identity"):
        await AadTokenProvider("/r", Broken()).token()


def test_cancellation_message_is_one_line_and_redacted():
    details = SimpleNamespace(
        reason=speechsdk.CancellationReason.Error,
        error_code=speechsdk.CancellationErrorCode.AuthenticationFailure,
        error_details=f"WebSocket upgrade failed: Authentication error (401). key={KEY}\nwss://x\nmore",
    )
    msg = cancellation_message("Azure speech synthesis failed", details, (KEY,))
    assert "\n" not in msg
    assert "AuthenticationFailure" in msg and "401" in msg
    assert KEY not in msg and "<redacted>" in msg


# --- pools and failures without the cloud --------------------------------------------------------------
async def test_tts_pool_warms_offline_and_exhaustion_is_a_provider_error():
    tts = AzureTTS(AzureSpeechAuth("westeurope", KEY), pool_size=1, acquire_timeout=0.2, max_size=1)
    assert tts.name == "azure-speech" and tts.sample_rate == 24000
    assert await tts.warm() == 1  # synthesizers are created without touching the network
    held = await tts.pool.acquire()
    began = time.monotonic()
    with pytest.raises(ProviderError, match="speech synthesis busy"):
        async for _ in tts.synthesize("hello", VoiceSpec()):
            pass
    assert time.monotonic() - began < 2.0
    await tts.pool.release(held)
    await tts.close()


async def test_stt_pool_exhaustion_is_a_provider_error():
    stt = AzureSTT(AzureSpeechAuth("westeurope", KEY), pool_size=1, acquire_timeout=0.2, max_size=1)
    assert await stt.warm() == 1
    held = await stt.pool.acquire()
    with pytest.raises(ProviderError, match="speech recognition busy"):
        await stt.open("en-US", lambda t: None)
    await stt.pool.release(held)
    await stt.close()


async def test_tts_unreachable_service_is_a_clear_provider_error():
    endpoint = f"wss://127.0.0.1:{_closed_port()}/cognitiveservices/websocket/v1"
    tts = AzureTTS(AzureSpeechAuth("westeurope", KEY), pool_size=1, endpoint=endpoint)
    began = time.monotonic()
    with pytest.raises(ProviderError) as info:
        async for _ in tts.synthesize("hello", VoiceSpec("en-US-AvaMultilingualNeural", "chat", "+3%")):
            pass
    assert time.monotonic() - began < 10
    message = str(info.value)
    assert "Azure speech synthesis failed" in message and "Connection" in message
    assert KEY not in message and "\n" not in message
    metrics = tts.pool.metrics()
    assert metrics["in_use"] == 0 and metrics["warm"] == 0  # the failed synthesizer was discarded
    await tts.close()


@pytest.mark.slow
async def test_stt_unreachable_service_is_a_clear_provider_error():
    endpoint = f"wss://127.0.0.1:{_closed_port()}/speech/recognition/conversation/cognitiveservices/v1"
    stt = AzureSTT(AzureSpeechAuth("westeurope", KEY), pool_size=1, endpoint=endpoint, finish_timeout=5)
    interims: list[str] = []
    stream = await stt.open("en-US", interims.append)
    await stream.push(b"\0" * 3200)
    with pytest.raises(ProviderError) as info:
        await stream.finish()
    message = str(info.value)
    assert "Azure speech recognition failed" in message and "Connection" in message
    assert KEY not in message
    assert stt.pool.metrics()["in_use"] == 0
    await stt.close()
