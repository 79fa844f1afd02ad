"""Streamed chat chunks read as plain JSON: the shapes real servers send, in-stream errors and
malformed chunks, through the real ``openai`` client against the wire-level peer, and the
assembler's own rules."""

from __future__ import annotations

import json

import pytest
from openai_peer import OpenAIPeer, RawEvents

from voiceagent.conversation.providers import ChatRequest, ProviderError
from voiceagent.llm.chat_stream import ChunkAssembler
from voiceagent.llm.openai_chat import AzureOpenAIChat, OpenAIChat

KEY = "test-key-0123456789"


@pytest.fixture(scope="module")
def peer():
    with OpenAIPeer(api_key=KEY) as server:
        yield server


@pytest.fixture(params=["openai", "azure"])
async def provider(request, peer):
    peer.reset()
    if request.param == "openai":
        chat = OpenAIChat(base_url=peer.openai_base_url, model="m", api_key=KEY, timeout=5)
    else:
        chat = AzureOpenAIChat(
            endpoint=peer.azure_endpoint, deployment="d", api_version="2024-10-21", api_key=KEY, timeout=5
        )
    yield chat
    await chat.close()
    peer.reset()


def chunk(delta: dict | None = None, finish_reason: str | None = None, index: int = 0, **extra) -> dict:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice], "usage": None, **extra}


async def collect(provider):
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[])
    return [c async for c in provider.stream(request)]


async def test_azure_shapes_nulls_and_usage(provider, peer):
    """Azure opens with a filter-results chunk without choices; deltas carry explicit nulls; the
    usage arrives in a last chunk without choices."""
    peer.push(
        RawEvents(
            [
                {"id": "", "object": "", "choices": [], "prompt_filter_results": [{"prompt_index": 0}]},
                chunk({"role": "assistant", "content": "", "tool_calls": None, "function_call": None}),
                chunk({"content": "Hello", "tool_calls": None}),
                chunk({"content": None, "refusal": None}),
                chunk({"content": " there."}, content_filter_results={"hate": {"filtered": False}}),
                chunk({}, "stop"),
                {"id": "c1", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}},
            ]
        )
    )
    chunks = await collect(provider)
    assert "".join(c.text for c in chunks if c.text) == "Hello there."
    done = chunks[-1]
    assert done.done and done.finish_reason == "stop"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (12, 3)


async def test_in_stream_error_is_a_provider_error_without_the_key(provider, peer):
    error = {"error": {"message": f"The server is overloaded ({KEY})", "type": "server_error"}}
    peer.push(RawEvents([chunk({"content": "Let me"}), error]))
    received = []
    with pytest.raises(ProviderError) as info:
        async for c in provider.stream(ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[])):
            received.append(c)
    assert "overloaded" in str(info.value) and KEY not in str(info.value)
    assert [c.text for c in received] == ["Let me"] and not any(c.done for c in received)


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        '{"choices": "nope"}',
        '{"choices": [1]}',
        '{"choices": [{"index": 0, "delta": "text"}]}',
        '{"choices": [{"index": 0, "delta": {"content": 5}}]}',
        '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]}',
        '{"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}',
        '{"choices": [], "usage": {"prompt_tokens": "many"}}',
    ],
)
async def test_malformed_chunk_is_reported_as_malformed(provider, peer, payload):
    peer.push(RawEvents([chunk({"content": "ok"}), payload]))
    with pytest.raises(ProviderError) as info:
        await collect(provider)
    assert "malformed" in str(info.value)


def test_other_choices_are_ignored_and_reasons_kept():
    assembler = ChunkAssembler()
    assert assembler.feed(chunk({"content": "a"})) == "a"
    assert assembler.feed(chunk({"content": "b"}, index=1)) == ""
    assert assembler.feed({"choices": [{"delta": {"content": "c"}}]}) == "c"  # no index: the first
    assert assembler.feed(chunk(None, "length")) == ""
    (done,) = assembler.finish()
    assert done.done and done.finish_reason == "length" and done.usage is None


def test_tool_calls_assembled_by_index_name_repeated_or_split():
    assembler = ChunkAssembler()
    feed = [
        {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "block_", "arguments": ""}}]},
        {
            "tool_calls": [
                {"index": 0, "id": "call_a", "function": {"name": "get_weather", "arguments": '{"ci'}}
            ]
        },
        {"tool_calls": [{"index": 1, "function": {"name": "card", "arguments": '{"card_last4": "42"}'}}]},
        {
            "tool_calls": [
                {"index": 0, "id": "call_x", "function": {"name": "get_weather", "arguments": 'ty": 1}'}}
            ]
        },
    ]
    for delta in feed:
        assembler.feed(chunk(delta))
    calls, done = assembler.finish()
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls.tool_calls] == [
        ("call_a", "get_weather", {"city": 1}),
        ("call_b", "block_card", {"card_last4": "42"}),
    ]
    assert done.finish_reason == "tool_calls"


def test_calls_without_index_id_or_arguments_get_them():
    assembler = ChunkAssembler()
    delta = {"tool_calls": [{"function": {"name": "hang_up"}}, {"function": {"name": "transfer"}}]}
    assembler.feed(chunk(delta, "tool_calls"))  # no index: the position in the list
    calls, _ = assembler.finish()
    assert [(c.name, c.arguments) for c in calls.tool_calls] == [("hang_up", "{}"), ("transfer", "{}")]
    assert all(c.id.startswith("call_") for c in calls.tool_calls)
