"""Choose the speech providers from configuration and register their pools for ``GET /pools``.

``STT_PROVIDER`` / ``TTS_PROVIDER`` (``auto`` | ``azure`` | ``offline`` or an offline engine by
name, default ``auto``): ``auto`` picks Azure AI Speech when ``CLOUD_SPEECH_REGION`` and either
``CLOUD_SPEECH_KEY`` or ``USE_DEFAULT_CREDENTIAL`` are set, else the offline providers. Asking for
``azure`` without that configuration is a :class:`ConfigError` (one line at startup).

Offline synthesis is Piper (``piper``) with espeak-ng (``espeak``) as the fallback, offline
recognition Whisper (``whisper``) with pocketsphinx (``pocketsphinx``) as the fallback: when the
first cannot load, one WARNING says why and the fallback runs instead; the provider's ``label``
(startup log, ``/readiness``) says which one runs and why. Building loads the Piper voice (once per
process, ~0.5 s): call this off the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from voiceagent.config import ConfigError
from voiceagent.conversation.providers import ProviderError, STTProvider, TTSProvider, TurnModel
from voiceagent.speech.pools import POOLS

__all__ = [
    "PROVIDER_CHOICES",
    "build_offline_stt",
    "build_offline_tts",
    "build_speech_providers",
    "choose_speech_backend",
    "provider_label",
]

logger = logging.getLogger("voiceagent.speech.factory")

PROVIDER_CHOICES = ("auto", "azure", "offline")
OFFLINE_ENGINES = {"TTS_PROVIDER": ("piper", "espeak"), "STT_PROVIDER": ("whisper", "pocketsphinx")}


def choose_speech_backend(config: Mapping[str, Any], variable: str) -> str:
    """``"azure"``, ``"offline"`` or an offline engine's name for ``STT_PROVIDER``/``TTS_PROVIDER``."""
    from voiceagent.speech.azure_auth import AzureSpeechAuth

    choice = str(config.get(variable) or "auto").strip().lower()
    choices = (*PROVIDER_CHOICES, *OFFLINE_ENGINES.get(variable, ()))
    if choice not in choices:
        raise ConfigError(f"{variable}={choice!r} is invalid: accepts one of {', '.join(choices)}")
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
        from voiceagent.speech.azure_auth import AadTokenProvider, AzureSpeechAuth

        auth = AzureSpeechAuth.from_config(config)
        if auth.mode == "aad":  # one credential and token cache shared by both providers
            token_provider = AadTokenProvider(auth.resource_id or "")

    stt: Any
    tts: Any
    if stt_kind == "azure":
        from voiceagent.speech.azure_stt import AzureSTT

        stt = AzureSTT.from_config(config, token_provider=token_provider)
    else:
        stt = build_offline_stt(config, stt_kind)
    if tts_kind == "azure":
        from voiceagent.speech.azure_tts import AzureTTS

        tts = AzureTTS.from_config(config, token_provider=token_provider)
    else:
        tts = build_offline_tts(config, tts_kind)

    POOLS["stt"] = stt.pool
    POOLS["tts"] = tts.pool
    logger.info("speech providers: stt=%s tts=%s", provider_label(stt), provider_label(tts))
    return stt, tts


def provider_label(provider: Any) -> str:
    """A provider's name with what it runs (voice, model, fallback reason) when it says."""
    return str(getattr(provider, "label", None) or provider.name)


def build_offline_stt(config: Mapping[str, Any], kind: str = "offline") -> STTProvider:
    """Whisper with the scenarios' vocabulary, or pocketsphinx when asked or when Whisper's model
    or runtime is missing."""
    from voiceagent.speech.offline_stt import PocketsphinxSTT

    if kind == "pocketsphinx":
        return PocketsphinxSTT.from_config(config)
    from voiceagent.llm.rules import DIALOG_DIR
    from voiceagent.speech.vocabulary import build_prompt
    from voiceagent.speech.whisper_stt import WhisperSTT

    try:
        return WhisperSTT.from_config(config, prompt=build_prompt(DIALOG_DIR))
    except ProviderError as exc:
        logger.warning("Whisper STT unavailable, recognising with pocketsphinx instead: %s", exc)
        sphinx = PocketsphinxSTT.from_config(config)
        sphinx.label = f"{sphinx.name} (fallback: {exc})"  # type: ignore[attr-defined]
        return sphinx


def build_offline_tts(config: Mapping[str, Any], kind: str = "offline") -> TTSProvider:
    """Piper with its packaged voice (loaded here), or espeak-ng when asked or when Piper fails."""
    from voiceagent.speech.offline_tts import EspeakTTS

    if kind == "espeak":
        return EspeakTTS.from_config(config)
    from voiceagent.speech.piper_tts import PiperTTS

    piper = PiperTTS.from_config(config)
    try:
        piper.load(str(config.get("TTS_VOICE") or ""))
    except ProviderError as exc:
        logger.warning("Piper TTS unavailable, speaking with espeak-ng instead: %s", exc)
        espeak = EspeakTTS.from_config(config)
        espeak.label = f"{espeak.name} (fallback: {exc})"  # type: ignore[attr-defined]
        return espeak
    return piper


def build_turn_model(config: Mapping[str, Any], stt: Any = None) -> TurnModel | None:
    """The process's end-of-turn model as ``TURN_MODEL`` says, loaded here (~0.3 s: call it off the
    loop); ``None`` for ``none`` or when the model cannot load (logged once: the lexical rule alone
    then judges the end of turns, as before the model). Given the process's recogniser ``stt``, the
    model gives way while it is backlogged (``backlogged()``: a burst; see
    :mod:`voiceagent.speech.turn_model`)."""
    kind = str(config.get("TURN_MODEL") or "smart-turn").strip().lower()
    if kind == "none":
        return None
    from voiceagent.speech.turn_model import SmartTurnModel, TurnModelUnavailable

    try:
        model = SmartTurnModel()
    except TurnModelUnavailable as exc:
        logger.warning("end-of-turn model unavailable, judging the end of turns by the words alone: %s", exc)
        return None
    model.give_way = getattr(stt, "backlogged", None)
    logger.info("end-of-turn model: %s", model.label)
    return model
