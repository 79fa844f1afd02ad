"""Azure VoiceLive: the beta event dialect over ``azure.ai.voicelive.aio.connect``.

VoiceLive already uses the event names the live engine handles, so only the ``session.update``
shape (``input_audio_format: "pcm16"``, Azure neural voices, ``azure-speech`` transcription) and
the SDK's aiohttp socket are its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from voiceagent.llm.realtime.connection import Connection, configured, enter, session_tools, turn_detection
from voiceagent.llm.realtime.session import (
    DEFAULT_CONNECT_TIMEOUT_S,
    OPENAI_VOICES,
    SAMPLE_RATE,
    RealtimeError,
    SessionConfig,
)

__all__ = [
    "VoiceLiveClient",
    "VoiceLiveConnection",
    "eou_supported",
    "voicelive_turn_detection",
    "voicelive_voice",
]


class VoiceLiveConnection(Connection):
    provider = "voicelive"
    label = "VoiceLive"

    def __init__(self, conn: Any, secrets: tuple[str, ...], model: str | None = None) -> None:
        super().__init__(secrets)
        self._conn = conn
        self.model = model
        # The SDK's send() is json.dumps + send_str on this aiohttp socket; sending our JSON text on
        # it directly saves a decode/encode pass per audio frame. The public send() is the fallback.
        self._send_str = getattr(getattr(conn, "_connection", None), "send_str", None)

    def session_event(self, session: SessionConfig) -> dict[str, Any]:
        body: dict[str, Any] = {
            "modalities": ["text", "audio"],
            "instructions": session.instructions,
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "input_audio_sampling_rate": SAMPLE_RATE,
            "turn_detection": voicelive_turn_detection(session, self.model),
            "tools": session_tools(session),
            "tool_choice": session.tool_choice,
        }
        if session.voice:
            body["voice"] = voicelive_voice(session.voice)
        if session.transcription:
            transcription: dict[str, Any] = {"model": session.transcription_model or "azure-speech"}
            if session.language:
                transcription["language"] = session.language
            body["input_audio_transcription"] = transcription
        if session.temperature is not None:
            body["temperature"] = session.temperature
        return {"type": "session.update", "session": body}

    async def _send_text(self, text: str) -> None:
        if self._send_str is not None:
            await self._send_str(text)
        else:
            await self._conn.send(json.loads(text))

    async def _recv_raw(self) -> bytes | str | None:
        from azure.ai.voicelive.aio import ConnectionClosed

        try:
            return await self._conn.recv_bytes()  # b"" for frames that carry no event (ignored)
        except ConnectionClosed as exc:
            if self._closing:
                return None
            raise RealtimeError(
                f"{self.label}: connection closed by the server (code {getattr(exc, 'code', '?')})"
            ) from None

    async def _close(self) -> None:
        await self._conn.close()


def eou_supported(model: str | None) -> bool:
    """VoiceLive's end-of-utterance detector works with its cascaded models (gpt-4o, gpt-4.1,
    phi...), not with the native speech-to-speech ones (gpt-realtime, gpt-4o-mini-realtime,
    phi4-mm-realtime), which the service documents as unsupported."""
    return bool(model) and "realtime" not in str(model).lower()


def voicelive_turn_detection(session: SessionConfig, model: str | None = None) -> dict[str, Any]:
    """``server_vad`` (or ``azure_semantic_vad`` with ``semantic_vad``): silence of
    ``silence_duration_ms`` ends a turn; where the model supports it, the semantic
    end-of-utterance detector waits longer for an unfinished sentence, up to
    ``endpointing_max_ms`` (its ``timeout_ms``)."""
    extra: dict[str, Any] = {"auto_truncate": False}  # the engine truncates what was not heard
    if session.endpointing_max_ms and eou_supported(model):
        english = not session.language or session.language.lower().startswith("en")
        extra["end_of_utterance_detection"] = {
            "model": "semantic_detection_v1" if english else "semantic_detection_v1_multilingual",
            "threshold_level": "default",
            "timeout_ms": int(session.endpointing_max_ms),
        }
    kind = "azure_semantic_vad" if session.semantic_vad else "server_vad"
    return turn_detection(session, kind, **extra)


def voicelive_voice(name: str) -> str | dict[str, str]:
    """OpenAI voice names pass as strings; anything else is an Azure neural voice."""
    if name.lower() in OPENAI_VOICES:
        return name.lower()
    return {"name": name, "type": "azure-standard"}


class VoiceLiveClient:
    """Azure VoiceLive through ``azure.ai.voicelive.aio.connect`` (API key or async token credential)."""

    name = "azure-voicelive"

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        api_key: str | None = None,
        credential: Any = None,
        api_version: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        if not endpoint:
            raise ValueError("VoiceLive needs an endpoint (CLOUD_REALTIME_VOICE_ENDPOINT)")
        if not model:
            raise ValueError("VoiceLive needs a model (CLOUD_REALTIME_VOICE_MODEL)")
        if not api_key and credential is None:
            raise ValueError("VoiceLive needs CLOUD_REALTIME_VOICE_API_KEY or USE_DEFAULT_CREDENTIAL=true")
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self.api_version = api_version
        self.connect_timeout = float(connect_timeout)
        self._api_key = api_key
        self._credential = credential
        self._owns_credential = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any], **kw: Any) -> VoiceLiveClient:
        key = config.get("CLOUD_REALTIME_VOICE_API_KEY")
        credential = None
        owns = False
        if not key and config.get("USE_DEFAULT_CREDENTIAL"):
            from azure.identity.aio import DefaultAzureCredential

            credential, owns = DefaultAzureCredential(), True
        client = cls(
            config.get("CLOUD_REALTIME_VOICE_ENDPOINT") or "",
            config.get("CLOUD_REALTIME_VOICE_MODEL") or "",
            api_key=key,
            credential=credential,
            **kw,
        )
        client._owns_credential = owns
        return client

    async def connect(self, session: SessionConfig) -> VoiceLiveConnection:
        from azure.ai.voicelive.aio import connect
        from azure.core.credentials import AzureKeyCredential

        credential = AzureKeyCredential(self._api_key) if self._api_key else self._credential
        secrets = (self._api_key or "",)
        options: dict[str, Any] = {"api_version": self.api_version} if self.api_version else {}
        manager = connect(endpoint=self.endpoint, credential=credential, model=self.model, **options)
        raw = await enter("VoiceLive", manager.__aenter__(), self.connect_timeout, secrets)
        return await configured(VoiceLiveConnection(raw, secrets, self.model), session)

    async def close(self) -> None:
        if self._owns_credential and self._credential is not None:
            with contextlib.suppress(Exception):
                await self._credential.close()
