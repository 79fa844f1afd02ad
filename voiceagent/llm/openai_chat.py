"""Chat providers over the ``openai`` SDK: any OpenAI-compatible server, and Azure OpenAI.

:class:`OpenAIChat` (``"openai-compatible"``) talks to ``OPENAI_BASE_URL`` (Ollama, llama.cpp,
vLLM, OpenAI itself) with ``OPENAI_MODEL``; :class:`AzureOpenAIChat` (``"azure-openai"``) talks to
the ``CLOUD_LLM_DEPLOYMENT`` deployment of ``CLOUD_LLM_ENDPOINT`` with ``CLOUD_LLM_API_KEY``, or
with a Microsoft Entra token from ``DefaultAzureCredential`` when ``USE_DEFAULT_CREDENTIAL`` is
true.

Both stream ``chat.completions``: text deltas become ``ChatChunk(text=...)``; tool-call deltas are
accumulated by their ``index`` and yielded once, complete, as ``ChatChunk(tool_calls=[...])``; the
round ends with ``ChatChunk(done=True, finish_reason=..., usage=...)``, the tokens from the
usage chunk ``stream_options.include_usage`` asks for (None when the server sends none). Every
failure (HTTP status, timeout, connection, malformed stream) is raised as :class:`ProviderError`
with a short message that never contains the key. ``LLM_TIMEOUT`` bounds the wait for the response
to start (retries included) and each read while it streams; the client retries once
(``max_retries=1``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError
from voiceagent.llm.chat_stream import ChunkAssembler

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_TIMEOUT_S", "AzureOpenAIChat", "OpenAIChat"]

DEFAULT_TIMEOUT_S = 15.0
AZURE_SCOPE = "https://cognitiveservices.azure.com/.default"
_PLACEHOLDER_KEY = "not-needed"  # local servers (Ollama, llama.cpp) accept any key
_MAX_MESSAGE = 160
_TOKEN_REFRESH_MARGIN_S = 300.0
_BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_SK_RE = re.compile(r"\bsk-[A-Za-z0-9_-]{4,}")


class _BaseOpenAIChat:
    """The streaming, tool-call assembly and error mapping both providers share."""

    name = "openai"
    label = "LLM"

    def __init__(self, client: Any, model: str, timeout: float, secrets: tuple[str, ...] = ()) -> None:
        self._client = client
        self.model = model
        self.timeout = float(timeout)
        self._secrets = tuple(s for s in secrets if s)

    # --- ChatProvider ------------------------------------------------------------------------------
    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        kwargs = self._request_kwargs(request)
        stream: Any = None
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    stream = await self._create(kwargs)
            except TimeoutError:
                raise ProviderError(f"{self.label} did not answer within {self.timeout:g}s") from None
            assembler = ChunkAssembler()
            async for data in stream:
                text = assembler.feed(data)
                if text:
                    yield ChatChunk(text=text)
            for chunk in assembler.finish():
                yield chunk
        except ProviderError:
            raise
        except openai.APITimeoutError:
            raise ProviderError(f"{self.label} timed out after {self.timeout:g}s") from None
        except openai.APIConnectionError as exc:
            raise ProviderError(f"{self.label} connection failed: {self._describe_cause(exc)}") from None
        except openai.APIStatusError as exc:
            raise ProviderError(self._status_message(exc)) from None
        except openai.OpenAIError as exc:
            raise ProviderError(f"{self.label} error: {self._scrub(str(exc))}") from None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.debug("%s: malformed response", self.label, exc_info=True)
            raise ProviderError(f"{self.label} sent a malformed response ({type(exc).__name__})") from None
        finally:
            if stream is not None:
                try:
                    await stream.close()
                except Exception:  # pragma: no cover - closing a broken stream
                    logger.debug("closing the %s stream failed", self.label, exc_info=True)

    async def warm(self) -> bool:
        """A cheap authenticated call (``GET /models``); True when the server answered."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._client.models.list(timeout=self.timeout)
            return True
        except Exception as exc:
            logger.warning("%s warm-up failed: %s", self.label, self._scrub(_short_error(exc)))
            return False

    async def close(self) -> None:
        await self._client.close()

    # --- helpers -----------------------------------------------------------------------------------
    async def _create(self, kwargs: dict[str, Any]) -> Any:
        """``chat.completions.create(**kwargs)`` (streaming), without the SDK's parameter transform.

        Why: ``create`` first walks every message and tool schema against the SDK's TypedDicts, in
        Python, on the event loop: ~2 ms of CPU per request with a system prompt, a short history
        and three tools (bench/bench_capacity.py --mode cloud; the largest stage of the server's own
        time between the caller's end of turn and the first audio). For our plain JSON dicts it
        changes nothing (no aliased keys, dates or files), so the body goes to ``post``
        unchanged: the same route (Azure deployment URLs included), headers, retries, timeout and
        stream parsing as ``create``.
        """
        body = {k: v for k, v in kwargs.items() if k != "timeout"}
        return await self._client.post(
            "/chat/completions",
            body=body,
            options={"timeout": kwargs["timeout"]},
            cast_to=ChatCompletion,
            stream=True,
            stream_cls=openai.AsyncStream[object],  # the chunks as JSON: see chat_stream.py
        )

    def _model_for(self, request: ChatRequest) -> str:
        return request.model or self.model

    def _request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self._model_for(request),
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": self.timeout,
        }
        if request.tools:
            kwargs["tools"] = request.tools
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.top_p is not None:
            kwargs["top_p"] = request.top_p
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        return kwargs

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = _BEARER_RE.sub(r"\1***", text)
        text = _SK_RE.sub("sk-***", text)
        text = " ".join(text.split())
        return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."

    def _describe_cause(self, exc: BaseException) -> str:
        cause = exc.__cause__ or exc.__context__
        return self._scrub(_short_error(cause) if cause is not None else str(exc) or type(exc).__name__)

    def _status_message(self, exc: openai.APIStatusError) -> str:
        detail = ""
        body = exc.body
        if isinstance(body, Mapping):
            error = body.get("error", body)
            if isinstance(error, Mapping):
                detail = str(error.get("message") or error.get("code") or "")
            elif isinstance(error, str):
                detail = error
        message = f"{self.label} returned HTTP {exc.status_code}"
        return f"{message}: {self._scrub(detail)}" if detail else message


def _short_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _setting(config: Mapping[str, Any], name: str, default: Any = None) -> Any:
    value = config.get(name)
    return default if value is None or value == "" else value


class OpenAIChat(_BaseOpenAIChat):
    """Any OpenAI-compatible chat-completions server (``OPENAI_BASE_URL``, ``OPENAI_MODEL``)."""

    name = "openai-compatible"
    label = "OpenAI-compatible server"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 1,
    ) -> None:
        if not base_url:
            raise ValueError("OpenAIChat needs a base_url (OPENAI_BASE_URL)")
        if not model:
            raise ValueError("OpenAIChat needs a model (OPENAI_MODEL)")
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or _PLACEHOLDER_KEY,
            timeout=float(timeout),
            max_retries=max_retries,
        )
        super().__init__(client, model, timeout, secrets=(api_key or "",))
        self.base_url = base_url

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> OpenAIChat:
        return cls(
            base_url=_setting(config, "OPENAI_BASE_URL"),
            model=_setting(config, "OPENAI_MODEL"),
            api_key=_setting(config, "OPENAI_API_KEY"),
            timeout=float(_setting(config, "LLM_TIMEOUT", DEFAULT_TIMEOUT_S)),
        )


class AzureOpenAIChat(_BaseOpenAIChat):
    """One Azure OpenAI chat deployment, by API key or Microsoft Entra token.

    The deployment decides the model: ``ChatRequest.model`` (an agent's model override) is not
    used to route, since deployment names are chosen per resource.
    """

    name = "azure-openai"
    label = "Azure OpenAI"

    def __init__(
        self,
        endpoint: str,
        deployment: str,
        api_version: str,
        api_key: str | None = None,
        token_provider: Callable[[], Awaitable[str]] | None = None,
        use_default_credential: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 1,
    ) -> None:
        if not endpoint or not deployment:
            raise ValueError("AzureOpenAIChat needs an endpoint and a deployment (CLOUD_LLM_*)")
        self._credential: Any = None
        auth: dict[str, Any] = {}
        if token_provider is not None:
            auth["azure_ad_token_provider"] = token_provider
        elif use_default_credential or not api_key:
            self._credential, auth["azure_ad_token_provider"] = default_credential_token_provider()
        else:
            auth["api_key"] = api_key
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=endpoint,
            azure_deployment=deployment,
            api_version=api_version,
            timeout=float(timeout),
            max_retries=max_retries,
            **auth,
        )
        super().__init__(client, deployment, timeout, secrets=(api_key or "",))
        self.endpoint = endpoint
        self.deployment = deployment
        self.api_version = api_version

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AzureOpenAIChat:
        return cls(
            endpoint=_setting(config, "CLOUD_LLM_ENDPOINT"),
            deployment=_setting(config, "CLOUD_LLM_DEPLOYMENT"),
            api_version=_setting(config, "CLOUD_LLM_API_VERSION", "2024-10-21"),
            api_key=_setting(config, "CLOUD_LLM_API_KEY"),
            use_default_credential=bool(_setting(config, "USE_DEFAULT_CREDENTIAL", False)),
            timeout=float(_setting(config, "LLM_TIMEOUT", DEFAULT_TIMEOUT_S)),
        )

    def _model_for(self, request: ChatRequest) -> str:
        return self.deployment

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            credential, self._credential = self._credential, None
            if credential is not None:
                try:
                    closed = credential.close()
                    if inspect.isawaitable(closed):
                        await closed
                except Exception:  # pragma: no cover - best effort
                    logger.debug("closing the Azure credential failed", exc_info=True)


class _ThreadedTokenProvider:
    """An async bearer-token provider over a sync azure-identity credential (``get_token`` runs in a
    thread), caching the token until five minutes before it expires."""

    def __init__(self, credential: Any, scope: str = AZURE_SCOPE) -> None:
        self._credential = credential
        self._scope = scope
        self._token: str | None = None
        self._expires_on = 0.0
        self._lock = asyncio.Lock()

    async def __call__(self) -> str:
        if self._token and time.time() < self._expires_on - _TOKEN_REFRESH_MARGIN_S:
            return self._token
        async with self._lock:
            if not (self._token and time.time() < self._expires_on - _TOKEN_REFRESH_MARGIN_S):
                access = await asyncio.to_thread(self._credential.get_token, self._scope)
                self._token, self._expires_on = access.token, float(access.expires_on)
        return self._token


def default_credential_token_provider() -> tuple[Any, Callable[[], Awaitable[str]]]:
    """``(credential, async token provider)`` for Azure OpenAI from ``DefaultAzureCredential``.

    ``azure.identity.aio`` needs aiohttp as its transport; without it (it is not a dependency of
    this project) the sync credential is used from a thread. Nothing touches the network here.
    """
    if importlib.util.find_spec("aiohttp") is not None:
        from azure.identity.aio import DefaultAzureCredential, get_bearer_token_provider

        credential = DefaultAzureCredential()
        return credential, get_bearer_token_provider(credential, AZURE_SCOPE)
    from azure.identity import DefaultAzureCredential as SyncDefaultAzureCredential

    credential = SyncDefaultAzureCredential()
    return credential, _ThreadedTokenProvider(credential)
