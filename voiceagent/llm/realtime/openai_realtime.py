"""The OpenAI Realtime API (GA): its event dialect over ``openai.AsyncOpenAI().realtime.connect``.

GA renamed a few server events (normalised back to the beta names the engine handles,
:data:`GA_TO_INTERNAL`), nests the audio settings under ``session.audio``, calls assistant text
``output_text`` and cannot change the voice once audio was produced. Events are written straight
to the websockets connection when it is open and has room (the audio path's hot spot).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from voiceagent.llm.realtime.connection import Connection, configured, enter, session_tools, turn_detection
from voiceagent.llm.realtime.session import (
    DEFAULT_CONNECT_TIMEOUT_S,
    OPENAI_VOICES,
    SAMPLE_RATE,
    RealtimeError,
    SessionConfig,
    setting,
)

logger = logging.getLogger(__name__)

__all__ = [
    "GA_TO_INTERNAL",
    "OpenAIConnection",
    "OpenAIRealtimeClient",
    "openai_turn_detection",
    "openai_voice",
    "semantic_eagerness",
]

DEFAULT_OPENAI_MODEL = "gpt-realtime"
OPENAI_FALLBACK_VOICE = "alloy"

# OpenAI GA server event names -> the internal (beta / VoiceLive) names the engine handles.
GA_TO_INTERNAL: dict[str, str] = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}


def _can_write_directly(ws: Any) -> bool:
    """The websockets (>= 14, asyncio) connection exposes what :meth:`OpenAIConnection._send_text`
    uses to write a text frame without ``send()``; otherwise every message goes through ``send()``."""
    needed = ("protocol", "fragmented_send_waiter", "paused", "transport", "send_data")
    return all(hasattr(ws, name) for name in needed) and hasattr(getattr(ws, "protocol", None), "send_text")


try:
    from websockets.protocol import State as _WsState

    _WS_OPEN: Any = _WsState.OPEN
except ImportError:  # pragma: no cover - websockets comes with openai[realtime]
    _WS_OPEN = object()


class OpenAIConnection(Connection):
    provider = "openai"
    label = "OpenAI realtime"

    def __init__(self, conn: Any, secrets: tuple[str, ...]) -> None:
        super().__init__(secrets)
        self._conn = conn
        self._voice: str | None = None
        # send_raw() goes through the SDK's reconnect send queue (a per-message task lookup and
        # accounting); with reconnects off (no on_reconnecting) the websocket is fixed, so the text
        # goes straight to it. send_raw() is the fallback.
        ws = getattr(conn, "_connection", None)
        self._ws_send = getattr(ws, "send", None)
        self._ws = ws if _can_write_directly(ws) else None

    def session_event(self, session: SessionConfig) -> dict[str, Any]:
        audio_format = {"type": "audio/pcm", "rate": SAMPLE_RATE}
        audio_in: dict[str, Any] = {
            "format": audio_format,
            "turn_detection": openai_turn_detection(session),
        }
        if session.transcription:
            transcription: dict[str, Any] = {"model": session.transcription_model or "gpt-4o-mini-transcribe"}
            if session.language:
                transcription["language"] = session.language.split("-")[0].lower()
            audio_in["transcription"] = transcription
        audio_out: dict[str, Any] = {"format": dict(audio_format)}
        voice = openai_voice(session.voice)
        if voice and not self.voice_locked:
            audio_out["voice"] = voice
            self._voice = voice
        elif voice and voice != self._voice:
            logger.info(
                "OpenAI realtime cannot change the voice after audio was produced; keeping %s", self._voice
            )
        body = {
            "type": "realtime",
            "instructions": session.instructions,
            "output_modalities": ["audio"],
            "audio": {"input": audio_in, "output": audio_out},
            "tools": session_tools(session),
            "tool_choice": session.tool_choice,
        }
        return {"type": "session.update", "session": body}

    def _outgoing(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        if event.get("type") == "conversation.item.create":
            item = event.get("item") or {}
            if item.get("role") == "assistant":  # GA: assistant text is "output_text"
                content = [
                    {**c, "type": "output_text"} if c.get("type") == "text" else c
                    for c in item.get("content") or ()
                ]
                return {**event, "item": {**item, "content": content}}
        return event

    def _normalise(self, event: dict[str, Any]) -> dict[str, Any]:
        kind = event["type"]
        internal = GA_TO_INTERNAL.get(kind)
        if internal is not None:
            event["type"] = internal
            if internal == "response.audio.delta":
                self.voice_locked = True
        return event

    async def _send_text(self, text: str) -> None:
        # never the SDK's send(): it runs its typed transform over every event
        ws = self._ws
        if (
            ws is not None
            and ws.protocol.state is _WS_OPEN
            and ws.fragmented_send_waiter is None
            and not ws.paused
            and not ws.transport.is_closing()
        ):
            # What websockets' send() does for an open socket with room in its write buffer, minus
            # its async context manager: frame the text and hand it to the transport. 10 000 appends
            # a second at 200 sessions made that wrapper ~15 % of the process (bench_live_relay).
            # Anything else (closing, a full buffer to drain, a fragmented send) takes send().
            ws.protocol.send_text(text.encode())
            ws.send_data()
            return
        if self._ws_send is not None:
            await self._ws_send(text)
        else:
            await self._conn.send_raw(text)

    async def _recv_raw(self) -> bytes | str | None:
        from websockets.exceptions import ConnectionClosed

        try:
            return await self._conn.recv_bytes()
        except ConnectionClosed as exc:
            if self._closing:
                return None
            code = exc.rcvd.code if exc.rcvd is not None else 1006
            raise RealtimeError(f"{self.label}: connection closed by the server (code {code})") from None

    async def _close(self) -> None:
        await self._conn.close()


def semantic_eagerness(max_ms: int | None) -> str:
    """OpenAI's semantic VAD takes no timeout, only an eagerness whose longest waits are 2 s
    (high), 4 s (medium) and 8 s (low): the least eager one that still ends a turn within
    ``max_ms`` (ENDPOINTING_MAX_MS)."""
    if max_ms is None:
        return "auto"
    if max_ms <= 2000:
        return "high"
    return "medium" if max_ms <= 4000 else "low"


def openai_turn_detection(session: SessionConfig) -> dict[str, Any]:
    """``server_vad`` (silence ends the turn after ``silence_duration_ms``), or with
    ``semantic_vad`` the turn detector model, whose eagerness follows ``endpointing_max_ms``
    (it has no silence setting: the model picks the wait up to that bound)."""
    if session.semantic_vad:
        return {
            "type": "semantic_vad",
            "eagerness": semantic_eagerness(session.endpointing_max_ms),
            "create_response": session.auto_respond,
            "interrupt_response": session.auto_respond,
        }
    return turn_detection(session)


def openai_voice(name: str | None) -> str | None:
    """OpenAI voices only; an Azure voice name (the TTS_VOICE default) falls back to ``alloy``."""
    if not name:
        return None
    if name.lower() in OPENAI_VOICES:
        return name.lower()
    return OPENAI_FALLBACK_VOICE


class OpenAIRealtimeClient:
    """The OpenAI Realtime API (GA) through ``openai.AsyncOpenAI(...).realtime.connect(model=...)``."""

    name = "openai-realtime"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        import openai

        self.model = model or DEFAULT_OPENAI_MODEL
        self.base_url = base_url
        self.connect_timeout = float(connect_timeout)
        self._api_key = api_key or ""
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "not-needed", base_url=base_url, max_retries=0, timeout=self.connect_timeout
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], **kw: Any) -> OpenAIRealtimeClient:
        model = (
            config.get("CLOUD_REALTIME_VOICE_MODEL")
            or setting(config, "OPENAI_REALTIME_MODEL")
            or DEFAULT_OPENAI_MODEL
        )
        return cls(model, api_key=config.get("OPENAI_API_KEY"), base_url=config.get("OPENAI_BASE_URL"), **kw)

    async def connect(self, session: SessionConfig) -> OpenAIConnection:
        secrets = (self._api_key,)
        manager = self._client.realtime.connect(
            model=self.model,
            websocket_connection_options={"open_timeout": self.connect_timeout},
        )
        raw = await enter("OpenAI realtime", manager.enter(), self.connect_timeout, secrets)
        return await configured(OpenAIConnection(raw, secrets), session)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._client.close()
