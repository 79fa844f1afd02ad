"""Choose the speech providers from configuration and register their pools for ``GET /pools``.

``STT_PROVIDER`` / ``TTS_PROVIDER`` (``auto`` | ``azure`` | ``offline``, default ``auto``):
``auto`` picks Azure AI Speech when ``CLOUD_SPEECH_REGION`` and either ``CLOUD_SPEECH_KEY`` or
``USE_DEFAULT_CREDENTIAL`` are set, else the offline providers (pocketsphinx, espeak-ng).
Asking for ``azure`` without that configuration is a :class:`ConfigError` (one line at startup).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from voiceagent.config import ConfigError
from voiceagent.conversation.providers import STTProvider, TTSProvider
from voiceagent.speech.pools import POOLS

__all__ = ["PROVIDER_CHOICES", "build_speech_providers", "choose_speech_backend"]

logger = logging.getLogger("voiceagent.speech.factory")

PROVIDER_CHOICES = ("auto", "azure", "offline")


def choose_speech_backend(config: Mapping[str, Any], variable: str) -> str:
    """``"azure"`` or ``"offline"`` for ``STT_PROVIDER`` or ``TTS_PROVIDER``."""
    from voiceagent.speech.azure_speech import AzureSpeechAuth

    choice = str(config.get(variable) or "auto").strip().lower()
    if choice not in PROVIDER_CHOICES:
        raise ConfigError(f"{variable}={choice!r} is invalid: accepts one of {', '.join(PROVIDER_CHOICES)}")
    configured = AzureSpeechAuth.is_configured(config)
    if choice == "azure" and not configured:
        raise ConfigError(
            f"{variable}=azure needs CLOUD_SPEECH_REGION and CLOUD_SPEECH_KEY "
            "(or USE_DEFAULT_CREDENTIAL=true with CLOUD_SPEECH_RESOURCE_ID)"
        )
    if choice == "auto":
        return "azure" if configured else "offline"
    return choice


def build_speech_providers(config: Mapping[str, Any]) -> tuple[STTProvider, TTSProvider]:
    """Build (STT, TTS) for ``config`` and register their pools as ``POOLS["stt"]``/``["tts"]``.

    Nothing here touches the network or builds decoders; call ``warm()`` on each afterwards.
    """
    stt_kind = choose_speech_backend(config, "STT_PROVIDER")
    tts_kind = choose_speech_backend(config, "TTS_PROVIDER")
    token_provider = None
    if "azure" in (stt_kind, tts_kind):
        from voiceagent.speech.azure_speech import AadTokenProvider, AzureSpeechAuth

        auth = AzureSpeechAuth.from_config(config)
        if auth.mode == "aad":  # one credential and token cache shared by both providers
            token_provider = AadTokenProvider(auth.resource_id or "")

    stt: Any
    tts: Any
    if stt_kind == "azure":
        from voiceagent.speech.azure_speech import AzureSTT

        stt = AzureSTT.from_config(config, token_provider=token_provider)
    else:
        from voiceagent.speech.offline_stt import PocketsphinxSTT

        stt = PocketsphinxSTT.from_config(config)
    if tts_kind == "azure":
        from voiceagent.speech.azure_speech import AzureTTS

        tts = AzureTTS.from_config(config, token_provider=token_provider)
    else:
        from voiceagent.speech.offline_tts import EspeakTTS

        tts = EspeakTTS.from_config(config)

    POOLS["stt"] = stt.pool
    POOLS["tts"] = tts.pool
    logger.info("speech providers: stt=%s tts=%s", stt.name, tts.name)
    return stt, tts
