"""Azure AI Speech: what STT and TTS share - credentials, the SDK's SpeechConfig, the client base
both providers extend (:class:`AzureSpeechClient`) and one-line failure messages.

Auth (:class:`AzureSpeechAuth`): ``CLOUD_SPEECH_KEY`` + ``CLOUD_SPEECH_REGION``, or, with
``USE_DEFAULT_CREDENTIAL=true`` and ``CLOUD_SPEECH_RESOURCE_ID``, a Microsoft Entra token from
azure-identity passed as the authorization token ``aad#<resource_id>#<token>`` with the region.
Nothing here reaches the network except fetching a token (:meth:`AadTokenProvider.token`).

Failures (unreachable service, bad key, throttling) surface as :class:`ProviderError` carrying the
SDK's cancellation reason, code and first line of details (:func:`cancellation_message`), with
any configured secret redacted (:func:`redact`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import azure.cognitiveservices.speech as speechsdk

from voiceagent.config import ConfigError
from voiceagent.conversation.providers import ProviderError

__all__ = [
    "AZURE_SPEECH_SCOPE",
    "AadTokenProvider",
    "AzureSpeechAuth",
    "AzureSpeechClient",
    "build_speech_config",
    "cancellation_message",
    "redact",
    "setting",
]

AZURE_SPEECH_SCOPE: Final = "https://cognitiveservices.azure.com/.default"
TOKEN_REFRESH_MARGIN_S: Final = 300.0


def setting(config: Mapping[str, Any], name: str, default: Any = None) -> Any:
    value = config.get(name)
    return default if value is None or value == "" else value


@dataclass(frozen=True)
class AzureSpeechAuth:
    """Which credentials reach the Speech resource. ``mode`` is ``"key"`` or ``"aad"``.

    Managed identity (``aad``) wins when ``USE_DEFAULT_CREDENTIAL`` is on and the resource id is
    known (as for the chat LLM); otherwise the key is used. The key never appears in ``repr``.
    """

    region: str
    key: str | None = field(default=None, repr=False)
    resource_id: str | None = None
    use_default_credential: bool = False

    def __post_init__(self) -> None:
        if not self.region:
            raise ConfigError("CLOUD_SPEECH_REGION is required for Azure Speech")
        if not self.key and not (self.use_default_credential and self.resource_id):
            if self.use_default_credential:
                raise ConfigError(
                    "CLOUD_SPEECH_RESOURCE_ID is required for Azure Speech with USE_DEFAULT_CREDENTIAL "
                    "(or set CLOUD_SPEECH_KEY)"
                )
            raise ConfigError("Azure Speech needs CLOUD_SPEECH_KEY or USE_DEFAULT_CREDENTIAL=true")

    @property
    def mode(self) -> str:
        return "aad" if self.use_default_credential and self.resource_id else "key"

    @staticmethod
    def is_configured(config: Mapping[str, Any]) -> bool:
        """True when the configuration asks for Azure Speech (region plus key or default credential)."""
        return bool(
            setting(config, "CLOUD_SPEECH_REGION")
            and (setting(config, "CLOUD_SPEECH_KEY") or setting(config, "USE_DEFAULT_CREDENTIAL", False))
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AzureSpeechAuth:
        return cls(
            region=setting(config, "CLOUD_SPEECH_REGION") or "",
            key=setting(config, "CLOUD_SPEECH_KEY"),
            resource_id=setting(config, "CLOUD_SPEECH_RESOURCE_ID"),
            use_default_credential=bool(setting(config, "USE_DEFAULT_CREDENTIAL", False)),
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.key,) if self.key else ()


class AadTokenProvider:
    """Microsoft Entra tokens for Speech, formatted ``aad#<resource_id>#<token>``, cached until
    five minutes before expiry. ``credential`` is any azure-identity (sync) ``TokenCredential``;
    ``DefaultAzureCredential`` by default, created on first use. ``get_token`` runs in a thread.
    """

    def __init__(self, resource_id: str, credential: Any = None):
        self.resource_id = resource_id
        self._credential = credential
        self._owns_credential = credential is None
        self._value: str | None = None
        self._expires_on = 0.0
        self._lock: asyncio.Lock | None = None

    async def token(self) -> str:
        if self._value and time.time() < self._expires_on - TOKEN_REFRESH_MARGIN_S:
            return self._value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._value and time.time() < self._expires_on - TOKEN_REFRESH_MARGIN_S:
                return self._value
            try:
                access = await asyncio.to_thread(self._fetch)
            except Exception as exc:
                raise ProviderError(f"Azure Speech: could not get a Microsoft Entra token: {exc}") from None
            self._value = f"aad#{self.resource_id}#{access.token}"
            self._expires_on = float(access.expires_on)
            return self._value

    def _fetch(self) -> Any:
        if self._credential is None:
            from azure.identity import DefaultAzureCredential

            self._credential = DefaultAzureCredential()
        return self._credential.get_token(AZURE_SPEECH_SCOPE)

    async def close(self) -> None:
        if self._owns_credential and self._credential is not None:
            credential, self._credential = self._credential, None
            with contextlib.suppress(Exception):
                await asyncio.to_thread(credential.close)


def build_speech_config(
    auth: AzureSpeechAuth, authorization_token: str | None = None, endpoint: str | None = None
) -> speechsdk.SpeechConfig:
    """A SpeechConfig for ``auth`` (no network). ``endpoint`` overrides the regional endpoint."""
    if auth.mode == "aad":
        if not authorization_token:
            raise ProviderError("Azure Speech: managed-identity auth needs a token")
        if endpoint:
            config = speechsdk.SpeechConfig(endpoint=endpoint)
            config.authorization_token = authorization_token
            return config
        return speechsdk.SpeechConfig(auth_token=authorization_token, region=auth.region)
    if endpoint:
        return speechsdk.SpeechConfig(subscription=auth.key, endpoint=endpoint)
    return speechsdk.SpeechConfig(subscription=auth.key, region=auth.region)


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    return text


def cancellation_message(what: str, details: Any, secrets: tuple[str, ...]) -> str:
    """One line from SDK cancellation details: reason, error code, first line of the details."""
    reason = getattr(getattr(details, "reason", None), "name", None) or str(getattr(details, "reason", ""))
    code = getattr(details, "error_code", None) or getattr(details, "code", None)
    code_name = getattr(code, "name", None) or (str(code) if code is not None else "")
    text = (getattr(details, "error_details", "") or "").strip().splitlines()
    parts = [p for p in (reason, code_name, text[0] if text else "") if p]
    return redact(f"{what}: {' / '.join(parts) or 'cancelled'}", secrets)


class AzureSpeechClient:
    """What :class:`~voiceagent.speech.azure_stt.AzureSTT` and
    :class:`~voiceagent.speech.azure_tts.AzureTTS` share: the credentials, an optional endpoint
    override and the token cache (one for both when the factory passes the same provider)."""

    def __init__(
        self, auth: AzureSpeechAuth, endpoint: str | None, token_provider: AadTokenProvider | None
    ) -> None:
        self.auth = auth
        self.endpoint = endpoint
        self._tokens = token_provider or (
            AadTokenProvider(auth.resource_id or "") if auth.mode == "aad" else None
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.auth.secrets

    async def speech_config(self) -> speechsdk.SpeechConfig:
        """A SpeechConfig, with a current token under managed identity (no network otherwise)."""
        token = await self._tokens.token() if self._tokens is not None else None
        return build_speech_config(self.auth, token, self.endpoint)

    async def _close_tokens(self) -> None:
        if self._tokens is not None:
            await self._tokens.close()
