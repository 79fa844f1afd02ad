"""OpenAIChat and AzureOpenAIChat through the real openai client against a local wire-level peer."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from openai_peer import HTTPError, OpenAIPeer, Text, ToolCall, ToolCalls

from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError
from voiceagent.llm.factory import build_chat_provider
from voiceagent.llm.openai_chat import AzureOpenAIChat, OpenAIChat

KEY = "test-key-0123456789"
DEPLOYMENT = "gpt-test-deploy"
API_VERSION = "2024-10-21"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
BLOCK_TOOL = {
    "type": "function",
    "function": {
        "name": "block_card",
        "description": "Block a card.",
        "parameters": {"type": "object", "properties": {"card_last4": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def peer():
    with OpenAIPeer(api_key=KEY, bearer_tokens=("entra-token",)) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_peer(peer):
    peer.reset()
    yield
    peer.reset()


def make_provider(kind: str, peer: OpenAIPeer, timeout: float = 5.0, **kw):
    if kind == "openai":
        return OpenAIChat(
            base_url=peer.openai_base_url, model="peer-model", api_key=KEY, timeout=timeout, **kw
        )
    return AzureOpenAIChat(
        endpoint=peer.azure_endpoint,
        deployment=DEPLOYMENT,
        api_version=API_VERSION,
        api_key=KEY,
        timeout=timeout,
        **kw,
    )


@pytest.fixture(params=["openai", "azure"])
async def provider(request, peer):
    chat = make_provider(request.param, peer)
    chat.kind = request.param
    yield chat
    await chat.close()


def request_with(**kw) -> ChatRequest:
    base = {
        "messages": [
            {"role": "system", "content": "You are a test assistant."},
            {"role": "user", "content": "What's the weather in Paris?"},
        ],
        "tools": [],
    }
    base.update(kw)
    return ChatRequest(**base)


async def collect(provider, request: ChatRequest) -> list[ChatChunk]:
    return [chunk async for chunk in provider.stream(request)]


def texts(chunks: list[ChatChunk]) -> list[str]:
    return [c.text for c in chunks if c.text]


async def test_streamed_text_arrives_in_several_chunks(provider, peer):
    peer.push(Text("The weather in Paris is mild and sunny today.", chunks=4))
    chunks = await collect(provider, request_with())

    assert len(texts(chunks)) == 4
    assert "".join(texts(chunks)) == "The weather in Paris is mild and sunny today."
    assert chunks[-1].done and chunks[-1].finish_reason == "stop"
    assert not any(c.tool_calls for c in chunks)

    body = peer.last_body
    assert body["stream"] is True
    assert body["messages"][1] == {"role": "user", "content": "What's the weather in Paris?"}
    assert "tools" not in body  # omitted when empty
    assert "temperature" not in body and "max_tokens" not in body and "top_p" not in body
    if provider.kind == "openai":
        assert peer.chat_requests()[-1].path == "/v1/chat/completions"
        assert body["model"] == "peer-model"
        assert peer.chat_requests()[-1].headers["authorization"] == f"Bearer {KEY}"
    else:
        recorded = peer.chat_requests()[-1]
        assert recorded.path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
        assert recorded.query["api-version"] == API_VERSION
        assert recorded.headers["api-key"] == KEY
        assert body["model"] == DEPLOYMENT


async def test_split_tool_call_is_assembled(provider, peer):
    args = {"city": "Paris", "unit": "celsius"}
    peer.push(
        ToolCalls(
            [ToolCall("get_weather", args, id="call_abc123")],
            text="Let me check that.",
            fragments=5,
        )
    )
    chunks = await collect(
        provider, request_with(tools=[WEATHER_TOOL], temperature=0.3, top_p=0.9, max_tokens=50)
    )

    assert "".join(texts(chunks)) == "Let me check that."
    calls = [c for c in chunks if c.tool_calls]
    assert len(calls) == 1  # one chunk with the complete calls
    (call,) = calls[0].tool_calls
    assert (call.id, call.name) == ("call_abc123", "get_weather")
    assert json.loads(call.arguments) == args
    assert chunks[-1].done and chunks[-1].finish_reason == "tool_calls"
    # text first, then tool calls, then done
    assert chunks.index(calls[0]) > max(i for i, c in enumerate(chunks) if c.text)

    body = peer.last_body
    assert body["tools"] == [WEATHER_TOOL]
    assert body["temperature"] == 0.3 and body["top_p"] == 0.9 and body["max_tokens"] == 50


async def test_two_parallel_tool_calls(provider, peer):
    peer.push(
        ToolCalls(
            [
                ToolCall("get_weather", {"city": "Paris"}, id="call_1"),
                ToolCall("block_card", {"card_last4": "4242"}, id="call_2"),
            ],
            fragments=3,
        )
    )
    chunks = await collect(provider, request_with(tools=[WEATHER_TOOL, BLOCK_TOOL]))
    (batch,) = [c.tool_calls for c in chunks if c.tool_calls]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in batch] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "block_card", {"card_last4": "4242"}),
    ]
    assert not texts(chunks)


async def test_tool_results_are_sent_back_in_openai_format(provider, peer):
    peer.push(Text("It is sunny."))
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
    ]
    chunks = await collect(provider, request_with(messages=messages, tools=[WEATHER_TOOL]))
    assert "".join(texts(chunks)) == "It is sunny."
    sent = peer.last_body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}


async def test_request_body_skips_the_sdk_parameter_transform(provider, peer, monkeypatch):
    """The body goes out as built, without the SDK's per-request TypedDict walk (~2 ms of event-loop
    CPU per turn); what reaches the server is what ``create`` would have sent."""
    import openai.resources.chat.completions.completions as completions

    async def transform(*args, **kwargs):
        raise AssertionError("the SDK's parameter transform ran")

    monkeypatch.setattr(completions, "async_maybe_transform", transform)
    peer.push(Text("Sunny.", chunks=1))
    request = request_with(tools=[WEATHER_TOOL], temperature=0.2, top_p=0.9, max_tokens=50)
    assert "".join(texts(await collect(provider, request))) == "Sunny."
    body = peer.last_body
    assert body["messages"] == request.messages and body["tools"] == [WEATHER_TOOL]
    assert (body["stream"], body["temperature"], body["top_p"], body["max_tokens"]) == (True, 0.2, 0.9, 50)


async def test_http_500_raises_provider_error_after_one_retry(provider, peer):
    peer.push(HTTPError(500), HTTPError(500))
    with pytest.raises(ProviderError) as info:
        await collect(provider, request_with())
    assert "500" in str(info.value)
    assert KEY not in str(info.value)
    assert len(peer.chat_requests()) == 2  # max_retries=1


async def test_http_401_is_reported_without_the_key(peer):
    for kind in ("openai", "azure"):
        chat = (
            OpenAIChat(base_url=peer.openai_base_url, model="m", api_key="wrong-key-abcdef", timeout=5)
            if kind == "openai"
            else AzureOpenAIChat(
                endpoint=peer.azure_endpoint,
                deployment=DEPLOYMENT,
                api_version=API_VERSION,
                api_key="wrong-key-abcdef",
                timeout=5,
            )
        )
        try:
            with pytest.raises(ProviderError) as info:
                await collect(chat, request_with())
            assert "401" in str(info.value)
            assert "wrong-key-abcdef" not in str(info.value)
            assert await chat.warm() is False
        finally:
            await chat.close()


async def test_delay_beyond_timeout_raises_within_the_timeout(peer):
    for kind in ("openai", "azure"):
        chat = make_provider(kind, peer, timeout=0.5)
        peer.push(Text("too late", delay=3.0), Text("too late", delay=3.0))
        began = time.monotonic()
        try:
            with pytest.raises(ProviderError) as info:
                await collect(chat, request_with())
        finally:
            await chat.close()
        elapsed = time.monotonic() - began
        assert 0.4 < elapsed < 1.5, elapsed
        assert "0.5s" in str(info.value)
        peer.reset()


async def test_stall_mid_stream_raises(peer):
    chat = make_provider("openai", peer, timeout=0.5)
    peer.push(Text("one two three four", chunks=4, chunk_delay=2.0))
    received: list[ChatChunk] = []
    began = time.monotonic()
    try:
        with pytest.raises(ProviderError):
            async for chunk in chat.stream(request_with()):
                received.append(chunk)
    finally:
        await chat.close()
    assert time.monotonic() - began < 2.0
    assert not any(c.done for c in received)


async def test_warm(provider, peer):
    assert await provider.warm() is True
    assert peer.requests[-1].path in ("/v1/models", "/openai/models")
    peer.models_status = 503
    assert await provider.warm() is False


async def test_unreachable_server(peer):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    chat = OpenAIChat(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key=KEY, timeout=2)
    try:
        assert await chat.warm() is False
        began = time.monotonic()
        with pytest.raises(ProviderError) as info:
            await collect(chat, request_with())
        assert "connection" in str(info.value).lower()
        assert time.monotonic() - began < 3
    finally:
        await chat.close()


async def test_azure_entra_token_provider(peer):
    calls = 0

    async def token() -> str:
        nonlocal calls
        calls += 1
        return "entra-token"

    chat = AzureOpenAIChat(
        endpoint=peer.azure_endpoint, deployment=DEPLOYMENT, api_version=API_VERSION, token_provider=token
    )
    try:
        peer.push(Text("hi"))
        chunks = await collect(chat, request_with())
        assert "".join(texts(chunks)) == "hi"
        recorded = peer.chat_requests()[-1]
        assert recorded.headers["authorization"] == "Bearer entra-token"
        assert "api-key" not in recorded.headers
        assert calls >= 1
    finally:
        await chat.close()


async def test_cancelled_stream_closes_cleanly(provider, peer):
    peer.push(Text("one two three four five six", chunks=6, chunk_delay=0.05))
    agen = provider.stream(request_with())
    first = await agen.__anext__()
    assert first.text
    await agen.aclose()
    # the connection pool still works afterwards
    peer.push(Text("again"))
    assert "".join(texts(await collect(provider, request_with()))) == "again"


async def test_factory_selection(peer):
    azure = build_chat_provider(
        {
            "CLOUD_LLM_ENDPOINT": peer.azure_endpoint,
            "CLOUD_LLM_DEPLOYMENT": DEPLOYMENT,
            "CLOUD_LLM_API_KEY": KEY,
            "CLOUD_LLM_API_VERSION": API_VERSION,
            "OPENAI_BASE_URL": peer.openai_base_url,
            "OPENAI_MODEL": "peer-model",
            "LLM_TIMEOUT": 3.0,
        }
    )
    compatible = build_chat_provider(
        {"OPENAI_BASE_URL": peer.openai_base_url, "OPENAI_MODEL": "peer-model", "OPENAI_API_KEY": KEY}
    )
    forced = build_chat_provider(
        {"OPENAI_BASE_URL": peer.openai_base_url, "OPENAI_MODEL": "peer-model", "LLM_PROVIDER": "rules"}
    )
    offline = build_chat_provider({})
    try:
        assert (azure.name, azure.timeout) == ("azure-openai", 3.0)
        assert compatible.name == "openai-compatible"
        assert forced.name == "offline-rules"
        assert offline.name == "offline-rules"
        peer.push(Text("from azure"), Text("from compatible"))
        assert "".join(texts(await collect(azure, request_with()))) == "from azure"
        assert "".join(texts(await collect(compatible, request_with()))) == "from compatible"
        with pytest.raises(ValueError):
            build_chat_provider({"LLM_PROVIDER": "azure"})
        with pytest.raises(ValueError):
            build_chat_provider({"LLM_PROVIDER": "bogus"})
    finally:
        await asyncio.gather(azure.close(), compatible.close(), forced.close(), offline.close())


def test_azure_default_credential_is_lazy():
    """USE_DEFAULT_CREDENTIAL builds a DefaultAzureCredential token provider without any network call."""
    chat = AzureOpenAIChat.from_config(
        {
            "CLOUD_LLM_ENDPOINT": "https://example.invalid",
            "CLOUD_LLM_DEPLOYMENT": DEPLOYMENT,
            "USE_DEFAULT_CREDENTIAL": True,
        }
    )
    assert chat._credential is not None
    assert chat.api_version == "2024-10-21"
    asyncio.run(chat.close())
