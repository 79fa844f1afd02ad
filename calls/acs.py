"""The telephony provider's Call Automation client (Azure Communication Services).

Callers (``calls/telephony_views.py``, ``calls/media.py``) use exactly this surface: they place,
answer and end calls and never see an SDK type. Every provider failure becomes one
:class:`TelephonyError` with the provider's HTTP status (None when it could not be reached) and a
message that is safe to show and log: it never carries the access key or a request signature.

The SDK client holds an aiohttp session bound to the event loop that opened it, so the wrapper
keeps one SDK client per running loop (ASGI serves from one loop; ``async_to_sync`` callers and
tests may use others).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from django.conf import settings

__all__ = [
    "CallStarted",
    "TelephonyClient",
    "TelephonyError",
    "readiness_check",
    "reset_telephony_client",
    "set_telephony_client",
    "telephony_client",
]

logger = logging.getLogger("calls.acs")

AUDIO_FORMATS = ("pcm16KMono", "pcm24KMono")
_MAX_DETAIL = 200


class TelephonyError(Exception):
    """The provider refused or could not be reached. ``status`` is its HTTP status (None when it
    could not be reached); the message is safe to show (no secrets)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CallStarted:
    connection_id: str
    server_call_id: str | None
    state: str | None  # the provider's callConnectionState, e.g. "connecting"


class TelephonyClient:
    """Async wrapper of ``azure.communication.callautomation.aio.CallAutomationClient``.

    ``access_key`` (base64, as the portal shows it) signs requests with HMAC; without it
    ``credential`` (an async token credential) or ``DefaultAzureCredential`` is used. Each call is
    bounded by ``timeout_s`` so a hung provider cannot hold a request forever.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        access_key: str | None = None,
        credential: Any = None,
        source_number: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if not endpoint:
            raise ValueError("endpoint is required")
        self.endpoint = endpoint.rstrip("/")
        self.source_number = source_number
        self.timeout_s = timeout_s
        self._access_key = access_key
        self._credential = credential
        self._owned_credentials: list[Any] = []
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show the key
        auth = "key" if self._access_key else "token"
        return f"TelephonyClient({self.host!r}, auth={auth})"

    @property
    def host(self) -> str:
        return urlparse(self.endpoint).netloc or self.endpoint

    # --- SDK plumbing -----------------------------------------------------------------------------
    def _make_credential(self) -> Any:
        if self._access_key:
            from azure.core.credentials import AzureKeyCredential

            return AzureKeyCredential(self._access_key)
        if self._credential is not None:
            return self._credential
        from azure.identity.aio import DefaultAzureCredential

        credential = DefaultAzureCredential()
        self._owned_credentials.append(credential)
        return credential

    def _sdk(self) -> Any:
        """The SDK client of the running loop (created on first use in that loop)."""
        from azure.communication.callautomation.aio import CallAutomationClient

        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                client = CallAutomationClient(
                    self.endpoint,
                    self._make_credential(),
                    connection_timeout=self.timeout_s,
                    read_timeout=self.timeout_s,
                    retry_total=1,
                    retry_backoff_factor=0.2,
                    retry_backoff_max=1,
                )
                self._clients[loop] = client
            return client

    def _media_options(self, media_url: str, audio_format: str) -> Any:
        from azure.communication.callautomation import (
            AudioFormat,
            MediaStreamingAudioChannelType,
            MediaStreamingContentType,
            MediaStreamingOptions,
            StreamingTransportType,
        )

        if audio_format not in AUDIO_FORMATS:
            raise ValueError(f"audio_format must be one of {', '.join(AUDIO_FORMATS)}")
        fmt = AudioFormat.PCM16_K_MONO if audio_format == "pcm16KMono" else AudioFormat.PCM24_K_MONO
        return MediaStreamingOptions(
            transport_url=media_url,
            transport_type=StreamingTransportType.WEBSOCKET,
            content_type=MediaStreamingContentType.AUDIO,
            audio_channel_type=MediaStreamingAudioChannelType.MIXED,
            start_media_streaming=True,
            enable_bidirectional=True,
            audio_format=fmt,
            enable_dtmf_tones=True,
        )

    async def _run(self, what: str, coro: Any) -> Any:
        """Await an SDK call within ``timeout_s``, translating every failure to TelephonyError."""
        from azure.core.exceptions import (
            AzureError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        try:
            return await asyncio.wait_for(coro, self.timeout_s)
        except TimeoutError:
            raise TelephonyError(
                f"telephony provider unreachable: {what} timed out after {self.timeout_s:g} s", None
            ) from None
        except HttpResponseError as exc:
            status = exc.status_code
            detail = self._scrub(_error_detail(exc))
            if status is None:  # e.g. a token credential that could not get a token
                raise TelephonyError(f"telephony authentication failed: {detail}", None) from None
            raise TelephonyError(f"telephony provider refused {what} ({status}): {detail}", status) from None
        except (ServiceRequestError, ServiceResponseError) as exc:
            detail = self._scrub(_short(str(exc.message if hasattr(exc, "message") else exc)))
            raise TelephonyError(f"telephony provider unreachable: {detail}", None) from None
        except AzureError as exc:
            detail = self._scrub(_short(str(exc)))
            raise TelephonyError(f"telephony provider error: {detail}", None) from None
        except OSError as exc:
            raise TelephonyError(f"telephony provider unreachable: {type(exc).__name__}", None) from None

    def _scrub(self, text: str) -> str:
        """Belt and braces: whatever the provider echoes, the key never leaves this module."""
        if self._access_key and self._access_key in text:
            text = text.replace(self._access_key, "***")
        if "Signature=" in text:
            text = text.split("Signature=")[0] + "Signature=***"
        return text

    @staticmethod
    def _started(props: Any) -> CallStarted:
        state = getattr(props, "call_connection_state", None)
        return CallStarted(
            connection_id=str(props.call_connection_id),
            server_call_id=getattr(props, "server_call_id", None),
            state=str(state.value if hasattr(state, "value") else state) if state is not None else None,
        )

    # --- the surface callers use -------------------------------------------------------------------
    async def create_call(
        self,
        phone_number: str,
        *,
        callback_url: str,
        media_url: str,
        audio_format: str,
        operation_context: str | None = None,
    ) -> CallStarted:
        """Place an outbound PSTN call that streams bidirectional audio to ``media_url``."""
        from azure.communication.callautomation import PhoneNumberIdentifier

        if not self.source_number:
            raise TelephonyError("TELEPHONY_PHONE_NUMBER is not set: no caller id for outbound calls", None)
        media = self._media_options(media_url, audio_format)
        props = await self._run(
            "create_call",
            self._sdk().create_call(
                PhoneNumberIdentifier(phone_number),
                callback_url,
                source_caller_id_number=PhoneNumberIdentifier(self.source_number),
                operation_context=operation_context,
                media_streaming=media,
            ),
        )
        return self._started(props)

    async def answer_call(
        self,
        incoming_call_context: str,
        *,
        callback_url: str,
        media_url: str,
        audio_format: str,
        operation_context: str | None = None,
    ) -> CallStarted:
        """Answer an IncomingCall event's call with the same media streaming as outbound calls."""
        media = self._media_options(media_url, audio_format)
        props = await self._run(
            "answer_call",
            self._sdk().answer_call(
                incoming_call_context,
                callback_url,
                operation_context=operation_context,
                media_streaming=media,
            ),
        )
        return self._started(props)

    async def hang_up(self, connection_id: str) -> None:
        """End the call for everyone; a 404 (unknown or ended call) surfaces as status 404."""
        if not connection_id:
            raise TelephonyError("connection id is required", 400)
        connection = self._sdk().get_call_connection(connection_id)
        await self._run("hang_up", connection.hang_up(is_for_everyone=True))

    async def transfer(
        self, connection_id: str, target: str, *, operation_context: str | None = None
    ) -> None:
        """Transfer the call to ``target`` (``+E164`` phone number, or an ACS user's raw id
        ``8:acs:...``); its outcome arrives as a ``CallTransferAccepted`` / ``CallTransferFailed``
        callback. A PSTN target is called from our number (``source_number``)."""
        from azure.communication.callautomation import CommunicationUserIdentifier, PhoneNumberIdentifier

        if not connection_id:
            raise TelephonyError("connection id is required", 400)
        pstn = target.startswith("+")
        identifier = PhoneNumberIdentifier(target) if pstn else CommunicationUserIdentifier(target)
        caller_id = PhoneNumberIdentifier(self.source_number) if pstn and self.source_number else None
        connection = self._sdk().get_call_connection(connection_id)
        await self._run(
            "transfer",
            connection.transfer_call_to_participant(
                identifier, operation_context=operation_context, source_caller_id_number=caller_id
            ),
        )

    async def close(self) -> None:
        """Close the SDK client of the running loop (others are dropped) and owned credentials."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            clients = dict(self._clients)
            self._clients.clear()
            owned, self._owned_credentials = self._owned_credentials, []
        for client_loop, client in clients.items():
            if client_loop is loop:
                try:
                    await client.close()
                except Exception:  # closing must not fail shutdown
                    logger.debug("closing the telephony client failed", exc_info=True)
        for credential in owned:
            try:
                await credential.close()
            except Exception:
                logger.debug("closing the telephony credential failed", exc_info=True)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def _json_body(response: Any) -> Any:
    try:
        return json.loads(response.text()) if response is not None else None
    except (ValueError, TypeError, AttributeError):  # not JSON, or no body was read
        return None


def _error_detail(exc: Any) -> str:
    """The provider's ``{error: {code, message}}`` when present, else the HTTP reason."""
    code = message = None
    error = getattr(exc, "error", None)
    if error is not None:
        code, message = getattr(error, "code", None), getattr(error, "message", None)
    if not message:
        body = _json_body(getattr(exc, "response", None))
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            code, message = err.get("code"), err.get("message")
    if not message:
        message = getattr(exc, "reason", None) or type(exc).__name__
    return _short(f"{code}: {message}" if code else str(message))


# --- the process's client -------------------------------------------------------------------------
_lock = threading.Lock()
_injected: TelephonyClient | None = None
_has_injected = False
_cached: tuple[tuple, TelephonyClient] | None = None


def _config_key() -> tuple | None:
    cfg = settings.CONFIG
    endpoint = cfg.TELEPHONY_ENDPOINT
    if not endpoint:
        return None
    return (
        endpoint,
        cfg.TELEPHONY_ACCESS_KEY,
        cfg.TELEPHONY_PHONE_NUMBER,
        bool(cfg.USE_DEFAULT_CREDENTIAL),
    )


def telephony_client() -> TelephonyClient | None:
    """The process's client built from ``TELEPHONY_ENDPOINT`` (+ ``TELEPHONY_ACCESS_KEY`` or managed
    identity) and ``TELEPHONY_PHONE_NUMBER``; None when telephony is not configured."""
    global _cached
    with _lock:
        if _has_injected:
            return _injected
        key = _config_key()
        if key is None:
            return None
        if _cached is not None and _cached[0] == key:
            return _cached[1]
        endpoint, access_key, number, use_default = key
        client = TelephonyClient(
            endpoint,
            access_key=None if use_default and not access_key else access_key,
            source_number=number,
        )
        _cached = (key, client)
        return client


def set_telephony_client(client: TelephonyClient | None) -> None:
    """Make :func:`telephony_client` return ``client`` (None = "not configured") until reset."""
    global _injected, _has_injected
    with _lock:
        _injected, _has_injected = client, True


def reset_telephony_client() -> None:
    """Forget the injected and the cached client; the next call rebuilds from settings."""
    global _injected, _has_injected, _cached
    with _lock:
        _injected, _has_injected, _cached = None, False, None


async def readiness_check() -> tuple[str, str]:
    """Configuration-only readiness (no network): a health probe must not place calls or cost."""
    cfg = settings.CONFIG
    if not cfg.TELEPHONY_ENDPOINT:
        return "not_configured", "TELEPHONY_ENDPOINT not set: phone calls disabled"
    host = urlparse(cfg.TELEPHONY_ENDPOINT).netloc or cfg.TELEPHONY_ENDPOINT
    if not cfg.TELEPHONY_PHONE_NUMBER:
        return "unhealthy", f"ACS endpoint {host}: TELEPHONY_PHONE_NUMBER not set (no caller id)"
    if not cfg.BASE_URL:
        return "unhealthy", f"ACS endpoint {host}: BASE_URL not set (callback and media URLs cannot be built)"
    auth = "access key" if cfg.TELEPHONY_ACCESS_KEY else "managed identity"
    return "healthy", f"ACS endpoint {host} configured ({auth})"
