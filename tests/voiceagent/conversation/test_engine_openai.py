"""The engine driving the real openai client against the local OpenAI-compatible peer:
streamed text, a streamed tool call executed through the registry, the result fed back, a handoff."""

from __future__ import annotations

import asyncio

from enginekit import Harness
from openai_peer import OpenAIPeer, Text, ToolCall, ToolCalls

from voiceagent.llm.openai_chat import AzureOpenAIChat, OpenAIChat


async def run_turns(h: Harness, n: int) -> None:
    await h.idle()
    for _ in range(n):
        h.speak()
        await asyncio.sleep(0.01)
        await h.idle(timeout=10)


def check(h: Harness, peer: OpenAIPeer) -> None:
    kinds = h.kinds()
    assert "ToolCall(lookup:ok)" in kinds
    assert "AgentResponse(front:Your balance is forty two dollars and fifty cents.)" in kinds
    assert "Handoff(front->billing:announced)" in kinds and "AgentResponse(billing:Billing here.)" in kinds
    bodies = peer.chat_requests()
    first = bodies[0].body
    assert first["stream"] is True
    assert first["messages"][0] == {"role": "system", "content": "You are the front desk."}
    assert {t["function"]["name"] for t in first["tools"]} == {"lookup", "to_billing", "to_tech"}
    second = bodies[1].body["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert second[-1]["role"] == "tool" and "42.5" in second[-1]["content"]


async def test_engine_with_openai_compatible_server():
    with OpenAIPeer(api_key="sk-local") as peer:
        peer.push(
            ToolCalls([ToolCall("lookup", {"account": "123"})]),
            Text("Your balance is forty two dollars and fifty cents.", chunks=5),
            ToolCalls([ToolCall("to_billing", {"reason": "invoice"})]),
        )
        chat = OpenAIChat(base_url=peer.openai_base_url, model="llama3", api_key="sk-local", timeout=5)
        h = Harness(texts=["what is my balance", "billing please"])
        h.conv.chat = chat
        async with h:
            await run_turns(h, 2)
        await chat.close()
        check(h, peer)
        assert peer.chat_requests()[0].body["model"] == "llama3"
    # the tokens of both rounds of the turn (tool call, answer), from the include_usage chunk
    assert peer.chat_requests()[0].body["stream_options"] == {"include_usage": True}
    answer = [t for t in h.store.turns["s1"] if t.role == "assistant"][1]
    assert answer.usage["llm_tokens_in"] == 2 and answer.usage["llm_tokens_out"] > 0


async def test_engine_with_azure_openai():
    with OpenAIPeer(api_key="azure-key") as peer:
        peer.push(
            ToolCalls([ToolCall("lookup", {"account": "123"})]),
            Text("Your balance is forty two dollars and fifty cents.", chunks=5),
            ToolCalls([ToolCall("to_billing", {})]),
        )
        chat = AzureOpenAIChat(
            endpoint=peer.azure_endpoint,
            deployment="gpt-4o-voice",
            api_version="2024-10-21",
            api_key="azure-key",
            timeout=5,
        )
        h = Harness(texts=["what is my balance", "billing please"])
        h.conv.chat = chat
        async with h:
            await run_turns(h, 2)
        await chat.close()
        check(h, peer)
        assert "/openai/deployments/gpt-4o-voice/" in peer.chat_requests()[0].path
