"""``/metrics`` counts what happened in a browser-socket conversation on the instant providers: the
conversation, its turns and their stage latencies, a tool call, a handoff and a barge-in. The
registry is process-wide, so every figure is read as the difference a conversation makes."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from prometheus_client.parser import text_string_to_metric_families
from test_browser_consumer import connect, is_event, msg, recv, until

from voiceagent.conversation.testing import ScriptedChat

pytestmark = pytest.mark.django_db(transaction=True)
LONG_REPLY = "Sure, " + "I can help with that, " * 20 + "today."  # ~2 s of audio: still playing


class Scrape:
    """One ``GET /metrics``, parsed: ``value(name, **labels)`` sums the matching samples."""

    def __init__(self, text: str):
        self.samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def value(self, name: str, **labels: str) -> float:
        wanted = labels.items()
        return sum(s.value for s in self.samples if s.name == name and wanted <= s.labels.items())


async def scrape(api_client) -> Scrape:
    response = await sync_to_async(api_client.get)("/metrics")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    return Scrape(response.content.decode())


def state(name: str):
    return lambda m: m["type"] == "event" and m["payload"].get("state") == name


def final_response(m: dict) -> bool:
    return m["type"] == "response" and m["payload"]["final"]


async def test_metrics_count_a_browser_conversation(fake_runtime, api_client):
    fake_runtime.chat = ScriptedChat([[("handoff_auth_agent", {"reason": "lost card"})]], default=LONG_REPLY)
    before = await scrape(api_client)
    comm = await connect()
    await recv(comm)
    await comm.send_to(text_data=msg("config", scenario="banking"))
    await comm.send_to(text_data=msg("text", text="i lost my card"))
    await until(comm, is_event("handoff"))
    await until(comm, state("listening"), timeout=10)
    await asyncio.sleep(0.8)  # the new agent's greeting plays out
    await comm.send_to(text_data=msg("text", text="hello there"))
    await until(comm, final_response)
    await comm.send_to(text_data=msg("text", text="actually wait"))  # over the reply still playing
    await until(comm, is_event("barge_in"))
    during = await scrape(api_client)
    await until(comm, final_response)
    await asyncio.sleep(0.3)  # committed once played
    await comm.disconnect()

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    for _ in range(50):  # turns close as their audio is committed, off the socket's path
        after = await scrape(api_client)
        if delta("voiceagent_turns_total", transport="browser") >= 2:
            break
        await asyncio.sleep(0.1)
    assert delta("voiceagent_conversations_total", transport="browser", mode="cascade") == 1
    turns = delta("voiceagent_turns_total", transport="browser")
    assert turns >= 2
    e2e = delta("voiceagent_turn_latency_seconds_count", stage="end_to_first_audio", transport="browser")
    assert 1 <= e2e <= turns
    assert delta("voiceagent_turn_latency_seconds_count", stage="tts_first_audio", transport="browser") >= 2
    assert delta("voiceagent_turn_latency_seconds_count", stage="stt", transport="browser") == 0  # typed
    assert delta("voiceagent_turn_latency_seconds_sum", stage="end_to_first_audio", transport="browser") > 0
    assert delta("voiceagent_tool_calls_total", tool="handoff_auth_agent", outcome="ok") == 1
    assert delta("voiceagent_handoffs_total", type="announced") == 1
    assert delta("voiceagent_barge_ins_total", transport="browser") == 1
    active = "voiceagent_active_conversations"
    assert during.value(active, transport="browser") - before.value(active, transport="browser") == 1
    assert delta(active, transport="browser") == 0
    assert after.value("voiceagent_pool_clients_in_use", pool="tts") >= 0


async def test_metrics_count_error_events_by_code(fake_runtime, api_client):
    fake_runtime.chat = ScriptedChat([RuntimeError("model down")])
    before = await scrape(api_client)
    comm = await connect()
    await recv(comm)
    await comm.send_to(text_data=msg("text", text="hello"))
    await until(comm, lambda m: m["type"] == "error" and m["payload"]["code"] == "llm_error")
    after = await scrape(api_client)
    await comm.disconnect()
    name = "voiceagent_errors_total"
    assert after.value(name, kind="llm_error") - before.value(name, kind="llm_error") == 1


async def test_a_conversation_the_agent_ends_is_no_longer_active(fake_runtime, api_client):
    fake_runtime.chat = ScriptedChat([[("end_conversation", {"reason": "completed"})], "Goodbye."])
    before = await scrape(api_client)
    comm = await connect()
    await recv(comm)
    await comm.send_to(text_data=msg("text", text="that is all"))
    await until(comm, is_event("session_ended"), timeout=10)
    after = await scrape(api_client)
    await comm.disconnect()
    for name, labels, made in (
        ("voiceagent_conversations_total", {"transport": "browser", "mode": "cascade"}, 1),
        ("voiceagent_tool_calls_total", {"tool": "end_conversation", "outcome": "ok"}, 1),
        ("voiceagent_active_conversations", {"transport": "browser"}, 0),  # the codec dropped it itself
    ):
        assert after.value(name, **labels) - before.value(name, **labels) == made, name
