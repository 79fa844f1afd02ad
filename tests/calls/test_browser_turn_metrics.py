"""The ``turn_metrics`` server message on the browser socket: once per assistant turn, after its
final ``response``, with the very figures stored in the history (``GET /sessions/{id}``)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from test_browser_consumer import connect, msg, recv, until

from voiceagent.conversation.timing import STAGES, USAGE_KEYS

pytestmark = pytest.mark.django_db(transaction=True)


def is_metrics(m) -> bool:
    return m["type"] == "turn_metrics"


async def test_each_assistant_turn_is_followed_by_its_turn_metrics(fake_runtime, api_client):
    comm = await connect()
    session_id = (await recv(comm))["session_id"]
    await comm.send_to(text_data=msg("config", scenario="banking"))
    await comm.send_to(text_data=msg("control", action="start"))
    greeting = await until(comm, is_metrics)
    await comm.send_to(text_data=msg("text", text="what is my balance"))
    answer = await until(comm, is_metrics)
    await comm.disconnect()

    for seen in (greeting, answer):
        finals = [i for i, m in enumerate(seen) if m["type"] == "response" and m["payload"]["final"]]
        assert finals and finals[-1] < len(seen) - 1  # the figures follow the words
    first, second = greeting[-1], answer[-1]
    assert first["session_id"] == session_id and isinstance(first["ts"], float)
    assert set(first["payload"]) == {"turn_index", "agent", "latency_ms", "usage"}
    assert (first["payload"]["turn_index"], second["payload"]["turn_index"]) == (1, 2)
    assert first["payload"]["agent"] == "concierge" and second["payload"]["agent"]
    assert set(STAGES) <= set(second["payload"]["latency_ms"])
    assert set(second["payload"]["usage"]) == set(USAGE_KEYS)
    assert first["payload"]["latency_ms"]["end_to_first_audio"] is None  # the greeting
    assert isinstance(second["payload"]["latency_ms"]["end_to_first_audio"], float)

    for _ in range(50):  # the history writer is off the socket path
        history = (await sync_to_async(api_client.get)(f"/api/v1/sessions/{session_id}")).json()["history"]
        stored = [t for t in history if t["role"] == "assistant"]
        if len(stored) >= 2:
            break
        await asyncio.sleep(0.1)
    assert [t["latency_ms"] for t in stored[:2]] == [
        first["payload"]["latency_ms"],
        second["payload"]["latency_ms"],
    ]
    assert [t["usage"] for t in stored[:2]] == [first["payload"]["usage"], second["payload"]["usage"]]
    assert [t["agent"] for t in stored[:2]] == [first["payload"]["agent"], second["payload"]["agent"]]
