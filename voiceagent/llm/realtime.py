"""Realtime voice (speech-to-speech) clients: Azure VoiceLive and the OpenAI Realtime API (GA).

One small interface for the live engine (:mod:`voiceagent.conversation.live`)::

    client = build_realtime_client(config)            # VoiceLiveClient | OpenAIRealtimeClient
    conn = await client.connect(SessionConfig(...))    # handshake + the first session.update
    await conn.send({"type": "input_audio_buffer.append", "audio": b64})
    async for event in conn: ...                       # server events as dicts, normalised names
    await conn.update_session(SessionConfig(...))      # e.g. after a handoff
    await conn.close()

Both services speak the same event protocol over one WebSocket per conversation, in two dialects:
VoiceLive uses the beta names and session shape (``response.audio.delta``,
``input_audio_format: "pcm16"``), OpenAI GA renamed a few server events
(``response.output_audio.delta``, ``response.output_audio_transcript.*``,
``conversation.item.added``) and nests the audio settings under ``session.audio``. Server events
are normalised to the beta names (:data:`GA_TO_INTERNAL`), so the engine handles one set;
``session.update`` is built per dialect from the neutral :class:`SessionConfig`. Every other
client event the engine sends (``input_audio_buffer.append``, ``conversation.item.create``,
``conversation.item.truncate``, ``response.create``, ``response.cancel``) has the same shape in
both; assistant text items are the one content-type difference and are mapped on the way out.

The SDKs make the connection (URL, auth headers, handshake) and receive raw messages, which are
decoded here to plain dicts (the SDKs' typed models would cost a validation pass per audio
frame). Events go out as JSON text on the SDK's own socket (aiohttp ``send_str`` for VoiceLive,
the websockets connection for OpenAI), the same bytes the SDKs' ``send`` would write, without
their per-message extra work; each SDK's public send is the fallback. Failures surface as
:class:`RealtimeError` (a :class:`ProviderError`): connecting (refused, timed out after
``connect_timeout`` seconds, rejected credentials: ``retryable`` says whether trying again can
help), sending, and receiving (the connection dropped). Error messages never contain the key or
token. The connection does not reconnect on its own: a realtime conversation's server state dies
with its socket, so the engine decides what a drop means.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from voiceagent.conversation.providers import ProviderError

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "GA_TO_INTERNAL",
    "PROVIDER_CHOICES",
    "SAMPLE_RATE",
    "OpenAIRealtimeClient",
    "RealtimeClient",
    "RealtimeConnection",
    "RealtimeError",
    "SessionConfig",
    "VoiceLiveClient",
    "build_realtime_client",
    "realtime_provider_kind",
]

SAMPLE_RATE = 24000  # pcm16 in and out
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_OPENAI_MODEL = "gpt-realtime"
PROVIDER_CHOICES = ("auto", "voicelive", "openai")
OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}
)
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

_BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_MAX_MESSAGE = 200


class RealtimeError(ProviderError):
    """The realtime API failed; ``retryable`` is False for answers that will not change (401, 404)."""

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class SessionConfig:
    """What a conversation asks of the realtime session, independent of the dialect."""

    instructions: str = ""
    voice: str | None = None
    tools: tuple[dict, ...] = ()
    tool_choice: str = "auto"
    silence_duration_ms: int = 500
    vad_threshold: float = 0.5
    prefix_padding_ms: int = 300
    transcription: bool = True
    transcription_model: str | None = None  # None: the dialect's default
    language: str | None = None  # BCP-47, e.g. "en-US"
    temperature: float | None = None


class RealtimeConnection(Protocol):
    provider: str

    async def send(self, event: Mapping[str, Any]) -> None: ...

    async def send_json(self, text: str) -> None: ...

    def session_event(self, session: SessionConfig) -> dict[str, Any]: ...

    async def update_session(self, session: SessionConfig) -> None: ...

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...

    async def close(self) -> None: ...


class RealtimeClient(Protocol):
    name: str

    async def connect(self, session: SessionConfig) -> RealtimeConnection: ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------------------------------
# The shared connection logic
# --------------------------------------------------------------------------------------------------


class _Connection:
    """One realtime WebSocket: raw JSON out, normalised dicts in."""

    provider = "realtime"
    label = "realtime API"

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets
        self._closing = False
        self.voice_locked = False  # OpenAI: the voice cannot change once audio was produced

    # --- the dialect ----------------------------------------------------------------------------
    def session_event(self, session: SessionConfig) -> dict[str, Any]:
        raise NotImplementedError

    def _outgoing(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        return event

    def _normalise(self, event: dict[str, Any]) -> dict[str, Any]:
        return event

    # --- transport (per SDK) -----------------------------------------------------------------------
    async def _send_text(self, text: str) -> None:
        raise NotImplementedError

    async def _recv_raw(self) -> bytes | str | None:
        """The next message; None when the connection closed."""
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    # --- RealtimeConnection -------------------------------------------------------------------------
    async def send(self, event: Mapping[str, Any]) -> None:
        await self.send_json(json.dumps(self._outgoing(event)))

    async def send_json(self, text: str) -> None:
        """A client event already encoded as JSON (the audio path builds its appends itself)."""
        try:
            await self._send_text(text)
        except RealtimeError:
            raise
        except Exception as exc:
            raise RealtimeError(f"{self.label}: send failed ({self.scrub(exc)})") from None

    async def update_session(self, session: SessionConfig) -> None:
        await self.send(self.session_event(session))

    async def recv(self) -> dict[str, Any] | None:
        """The next server event (normalised), or None once the connection is closed."""
        while True:
            try:
                raw = await self._recv_raw()
            except RealtimeError:
                raise
            except Exception as exc:
                if self._closing:
                    return None
                raise RealtimeError(f"{self.label}: connection lost ({self.scrub(exc)})") from None
            if raw is None:
                return None
            if not raw:
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                logger.warning("%s sent a message that is not JSON; ignored", self.label)
                continue
            if isinstance(event, dict) and isinstance(event.get("type"), str):
                return self._normalise(event)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            event = await self.recv()
            if event is None:
                return
            yield event

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        try:
            await self._close()
        except Exception as exc:  # closing a broken socket
            logger.debug("%s: close failed: %s", self.label, self.scrub(exc))

    def scrub(self, exc: BaseException | str) -> str:
        text = str(exc) or type(exc).__name__
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, "***")
        text = _BEARER_RE.sub(r"\1***", text)
        return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _tools(session: SessionConfig) -> list[dict]:
    return [dict(t) for t in session.tools]


def _turn_detection(session: SessionConfig, **extra: Any) -> dict[str, Any]:
    return {
        "type": "server_vad",
        "threshold": session.vad_threshold,
        "prefix_padding_ms": session.prefix_padding_ms,
        "silence_duration_ms": int(session.silence_duration_ms),
        **extra,
    }


# --------------------------------------------------------------------------------------------------
# Azure VoiceLive
# --------------------------------------------------------------------------------------------------


class _VoiceLiveConnection(_Connection):
    provider = "voicelive"
    label = "VoiceLive"

    def __init__(self, conn: Any, secrets: tuple[str, ...]) -> None:
        super().__init__(secrets)
        self._conn = conn
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
            "turn_detection": _turn_detection(session),
            "tools": _tools(session),
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

    async def connect(self, session: SessionConfig) -> _VoiceLiveConnection:
        from azure.ai.voicelive.aio import connect
        from azure.core.credentials import AzureKeyCredential

        credential = AzureKeyCredential(self._api_key) if self._api_key else self._credential
        secrets = (self._api_key or "",)
        options: dict[str, Any] = {"api_version": self.api_version} if self.api_version else {}
        manager = connect(endpoint=self.endpoint, credential=credential, model=self.model, **options)
        raw = await _enter("VoiceLive", manager.__aenter__(), self.connect_timeout, secrets)
        return await _configured(_VoiceLiveConnection(raw, secrets), session)

    async def close(self) -> None:
        if self._owns_credential and self._credential is not None:
            with contextlib.suppress(Exception):
                await self._credential.close()


# --------------------------------------------------------------------------------------------------
# OpenAI Realtime (GA)
# --------------------------------------------------------------------------------------------------


def _can_write_directly(ws: Any) -> bool:
    """The websockets (>= 14, asyncio) connection exposes what :meth:`_OpenAIConnection._send_text`
    uses to write a text frame without ``send()``; otherwise every message goes through ``send()``."""
    needed = ("protocol", "fragmented_send_waiter", "paused", "transport", "send_data")
    return all(hasattr(ws, name) for name in needed) and hasattr(getattr(ws, "protocol", None), "send_text")


try:
    from websockets.protocol import State as _WsState

    _WS_OPEN: Any = _WsState.OPEN
except ImportError:  # pragma: no cover - websockets comes with openai[realtime]
    _WS_OPEN = object()


class _OpenAIConnection(_Connection):
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
            "turn_detection": _turn_detection(session, create_response=True, interrupt_response=True),
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
            "tools": _tools(session),
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
            or _setting(config, "OPENAI_REALTIME_MODEL")
            or DEFAULT_OPENAI_MODEL
        )
        return cls(model, api_key=config.get("OPENAI_API_KEY"), base_url=config.get("OPENAI_BASE_URL"), **kw)

    async def connect(self, session: SessionConfig) -> _OpenAIConnection:
        secrets = (self._api_key,)
        manager = self._client.realtime.connect(
            model=self.model,
            websocket_connection_options={"open_timeout": self.connect_timeout},
        )
        raw = await _enter("OpenAI realtime", manager.enter(), self.connect_timeout, secrets)
        return await _configured(_OpenAIConnection(raw, secrets), session)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._client.close()


# --------------------------------------------------------------------------------------------------
# Errors and configuration
# --------------------------------------------------------------------------------------------------


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status of a refused WebSocket upgrade, whichever library raised it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        response = getattr(exc, "response", None)
        for value in (getattr(exc, "status", None), getattr(response, "status_code", None)):
            if isinstance(value, int):
                return value
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _connect_error(label: str, exc: BaseException, secrets: tuple[str, ...]) -> RealtimeError:
    status = _status_of(exc)
    if status in (401, 403):
        return RealtimeError(f"{label} rejected the credentials (HTTP {status})", retryable=False)
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return RealtimeError(f"{label} refused the connection (HTTP {status})", retryable=False)
    text = str(exc) or type(exc).__name__
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _BEARER_RE.sub(r"\1***", text)
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    detail = f"HTTP {status}" if status is not None else text
    return RealtimeError(f"{label}: connection failed ({detail})")


async def _enter(label: str, opening, timeout: float, secrets: tuple[str, ...]):
    """Await an SDK's connection opening within ``timeout``; failures as :class:`RealtimeError`."""
    try:
        async with asyncio.timeout(timeout):
            return await opening
    except TimeoutError:
        raise RealtimeError(f"{label} did not accept the connection within {timeout:g}s") from None
    except Exception as exc:
        raise _connect_error(label, exc, secrets) from None


async def _configured(conn, session: SessionConfig):
    """Send the first ``session.update``; a connection that cannot take it is closed, not leaked."""
    try:
        await conn.update_session(session)
    except BaseException:
        await conn.close()
        raise
    return conn


def _setting(config: Mapping[str, Any], name: str) -> Any:
    """A setting from the validated table, else (not declared there) the raw environment."""
    value = config.get(name)
    if value is None and hasattr(config, "raw"):
        value = config.raw(name)  # type: ignore[attr-defined]
    return value


def realtime_provider_kind(config: Mapping[str, Any]) -> str:
    """``"voicelive"`` or ``"openai"``: what :func:`build_realtime_client` builds.

    ``REALTIME_PROVIDER`` (default ``auto``): ``auto`` picks VoiceLive when
    ``CLOUD_REALTIME_VOICE_ENDPOINT`` is set, else OpenAI when ``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL`` is set. There is no offline realtime provider: live mode needs one of them.
    """
    choice = str(_setting(config, "REALTIME_PROVIDER") or "auto").strip().lower()
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
