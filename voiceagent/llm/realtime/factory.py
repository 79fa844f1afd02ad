"""Choosing and building the configured realtime client (``REALTIME_PROVIDER``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from voiceagent.llm.realtime.openai_realtime import OpenAIRealtimeClient
from voiceagent.llm.realtime.session import setting
from voiceagent.llm.realtime.voicelive import VoiceLiveClient

logger = logging.getLogger(__name__)

__all__ = ["PROVIDER_CHOICES", "build_realtime_client", "realtime_provider_kind"]

PROVIDER_CHOICES = ("auto", "voicelive", "openai")


def realtime_provider_kind(config: Mapping[str, Any]) -> str:
    """``"voicelive"`` or ``"openai"``: what :func:`build_realtime_client` builds.

    ``REALTIME_PROVIDER`` (default ``auto``): ``auto`` picks VoiceLive when
    ``CLOUD_REALTIME_VOICE_ENDPOINT`` is set, else OpenAI when ``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL`` is set. There is no offline realtime provider: live mode needs one of them.
    """
    choice = str(setting(config, "REALTIME_PROVIDER") or "auto").strip().lower()
    if choice not in PROVIDER_CHOICES:
        raise ValueError(f"REALTIME_PROVIDER={choice!r} is not one of {', '.join(PROVIDER_CHOICES)}")
    if choice == "auto":
        if config.get("CLOUD_REALTIME_VOICE_ENDPOINT"):
            return "voicelive"
        if config.get("OPENAI_API_KEY") or config.get("OPENAI_BASE_URL"):
            return "openai"
        raise ValueError(
            "live (speech-to-speech) mode needs a realtime voice API: set CLOUD_REALTIME_VOICE_ENDPOINT "
            "(Azure VoiceLive) or OPENAI_API_KEY (OpenAI Realtime)"
        )
    if choice == "voicelive" and not config.get("CLOUD_REALTIME_VOICE_ENDPOINT"):
        raise ValueError("REALTIME_PROVIDER=voicelive needs CLOUD_REALTIME_VOICE_ENDPOINT")
    return choice


def build_realtime_client(config: Mapping[str, Any], **kw: Any) -> VoiceLiveClient | OpenAIRealtimeClient:
    """The configured realtime client (raises ``ValueError`` when none can be built)."""
    kind = realtime_provider_kind(config)
    client: VoiceLiveClient | OpenAIRealtimeClient
    if kind == "voicelive":
        client = VoiceLiveClient.from_config(config, **kw)
    else:
        client = OpenAIRealtimeClient.from_config(config, **kw)
    logger.info("realtime voice provider: %s (model %s)", client.name, client.model)
    return client
