"""build_speech_providers: Azure when configured, offline otherwise, explicit overrides, pools."""

from __future__ import annotations

import pytest

from voiceagent.config import ConfigError, load_config
from voiceagent.speech import pools
from voiceagent.speech.azure_stt import AzureSTT
from voiceagent.speech.azure_tts import AzureTTS
from voiceagent.speech.factory import build_speech_providers, choose_speech_backend
from voiceagent.speech.piper_tts import PiperTTS
from voiceagent.speech.whisper_stt import WhisperSTT

KEY = "fake-key-0123456789abcdef"
AZURE = {"CLOUD_SPEECH_REGION": "westeurope", "CLOUD_SPEECH_KEY": KEY}


@pytest.fixture(autouse=True)
def _clean_pools():
    saved = dict(pools.POOLS)
    pools.POOLS.clear()
    yield
    pools.POOLS.clear()
    pools.POOLS.update(saved)


async def _close(*providers):
    for provider in providers:
        await provider.close()


async def test_offline_by_default_and_pools_registered():
    stt, tts = build_speech_providers(load_config({"STT_POOL_SIZE": "3", "TTS_POOL_SIZE": "5"}))
    assert isinstance(stt, WhisperSTT) and isinstance(tts, PiperTTS)
    assert (stt.name, tts.name) == ("offline-whisper", "offline-piper")
    assert pools.POOLS["stt"] is stt.pool and pools.POOLS["tts"] is tts.pool
    metrics = pools.pool_metrics()
    assert metrics["stt"]["provider"] == "offline-whisper" and metrics["stt"]["size"] == 3
    assert metrics["tts"]["provider"] == "offline-piper" and metrics["tts"]["size"] == 5
    assert tts.sample_rate == 24000 and stt.sample_rate == 16000
    # the warm size is not a ceiling: both grow up to BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS
    # + 2 x CONTACTCENTER_MONITOR_MAX_SESSIONS
    assert metrics["stt"]["max_size"] == metrics["tts"]["max_size"] == 440
    await _close(stt, tts)


@pytest.mark.parametrize("speech", ["offline", "azure"])
async def test_pools_grow_up_to_the_session_limits_of_the_cascade_transports(speech):
    limits = {
        "BROWSER_MAX_CONNECTIONS": "30",
        "TELEPHONY_MAX_STREAMS": "12",
        "CONTACTCENTER_MAX_SESSIONS": "99",
        "CONTACTCENTER_MONITOR_MAX_SESSIONS": "3",
    }
    config = load_config({**(AZURE if speech == "azure" else {}), **limits, "STT_POOL_SIZE": "4"})
    stt, tts = build_speech_providers(config)
    assert (stt.pool.size, stt.pool.max_size, tts.pool.max_size) == (4, 48, 48)
    await _close(stt, tts)


async def test_azure_when_region_and_key_are_set():
    config = load_config({**AZURE, "VAD_SILENCE_TIMEOUT": "700", "POOL_ACQUIRE_TIMEOUT": "0.5"})
    stt, tts = build_speech_providers(config)
    assert isinstance(stt, AzureSTT) and isinstance(tts, AzureTTS)
    assert stt.segmentation_silence_timeout_ms == 700
    assert stt.pool.acquire_timeout == 0.5 and tts.pool.acquire_timeout == 0.5
    assert tts.voice_for(None).name == "en-US-AvaMultilingualNeural"  # TTS_VOICE default
    assert pools.pool_metrics()["tts"]["provider"] == "azure-speech"
    await _close(stt, tts)


async def test_azure_with_managed_identity_shares_one_token_cache():
    config = load_config(
        {
            "CLOUD_SPEECH_REGION": "westeurope",
            "USE_DEFAULT_CREDENTIAL": "true",
            "CLOUD_SPEECH_RESOURCE_ID": "/subscriptions/s/resourceGroups/g/providers/x/accounts/a",
        }
    )
    stt, tts = build_speech_providers(config)
    assert stt.auth.mode == "aad" and tts.auth.mode == "aad"
    assert stt._tokens is tts._tokens is not None
    await _close(stt, tts)


async def test_region_alone_is_not_enough():
    stt, tts = build_speech_providers(load_config({"CLOUD_SPEECH_REGION": "westeurope"}))
    assert isinstance(stt, WhisperSTT) and isinstance(tts, PiperTTS)
    await _close(stt, tts)


async def test_explicit_overrides_mix_providers():
    stt, tts = build_speech_providers({**AZURE, "STT_PROVIDER": "offline", "TTS_PROVIDER": "AUTO"})
    assert isinstance(stt, WhisperSTT) and isinstance(tts, AzureTTS)
    await _close(stt, tts)
    stt, tts = build_speech_providers({**AZURE, "TTS_PROVIDER": "offline"})
    assert isinstance(stt, AzureSTT) and isinstance(tts, PiperTTS)
    await _close(stt, tts)


def test_bad_choices_are_config_errors():
    with pytest.raises(ConfigError, match="TTS_PROVIDER=azure needs CLOUD_SPEECH_REGION"):
        build_speech_providers({"TTS_PROVIDER": "azure"})
    with pytest.raises(ConfigError, match="STT_PROVIDER='google' is invalid"):
        choose_speech_backend({"STT_PROVIDER": "google"}, "STT_PROVIDER")
    with pytest.raises(ConfigError, match="CLOUD_SPEECH_RESOURCE_ID"):
        build_speech_providers({"CLOUD_SPEECH_REGION": "westeurope", "USE_DEFAULT_CREDENTIAL": True})
    assert pools.POOLS == {}  # nothing half-registered
