"""Per-turn timings through a real transport: a browser-socket conversation (cascade on the instant
providers, and live against the local realtime peer), then ``GET /sessions/{id}`` shows
``latency_ms`` and ``usage`` on every assistant turn. No thresholds: keys, types, nulls."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from realtime_peer import RealtimePeer, Say
from test_browser_consumer import SILENCE, TONE, connect, msg, recv, until

from voiceagent.conversation.timing import STAGES, USAGE_KEYS
from voiceagent.llm.realtime import OpenAIRealtimeClient

pytestmark = pytest.mark.django_db(transaction=True)


def final_response(m) -> bool:
    return m["type"] == "response" and m["payload"]["final"]


async def session_history(api_client, session_id: str) -> list[dict]:
    for _ in range(50):  # the history writer is off the socket path
        body = (await sync_to_async(api_client.get)(f"/api/v1/sessions/{session_id}")).json()
        if sum(t["role"] == "assistant" for t in body["history"]) >= 3:
            return body["history"]
        await asyncio.sleep(0.1)
    return body["history"]


def assistant_turns(history: list[dict]) -> list[dict]:
    turns = [t for t in history if t["role"] == "assistant"]
    for turn in turns:
        assert set(STAGES) <= set(turn["latency_ms"]) and set(turn["usage"]) == set(USAGE_KEYS)
        assert {"tools", "handoff", "barge_in"} <= set(turn["latency_ms"])
    assert all("latency_ms" not in t for t in history if t["role"] != "assistant")
    return turns


async def test_cascade_browser_conversation_has_timings_on_every_assistant_turn(fake_runtime, api_client):
    comm = await connect()
    session_id = (await recv(comm))["session_id"]
    await comm.send_to(text_data=msg("config", scenario="banking", sample_rate=16000))
    await comm.send_to(text_data=msg("control", action="start"))
    await until(comm, final_response)
    await until(comm, lambda m: m["type"] == "event" and m["payload"].get("state") == "listening")
    await asyncio.sleep(0.3)  # the greeting plays out
    for _ in range(10):
        await comm.send_to(bytes_data=TONE * 2)
    for _ in range(40):
        await comm.send_to(bytes_data=SILENCE)
    await until(comm, final_response)
    await until(comm, lambda m: m["type"] == "event" and m["payload"].get("state") == "listening")
    await asyncio.sleep(0.3)
    await comm.send_to(text_data=msg("text", text="and typed"))
    await until(comm, final_response)
    await asyncio.sleep(0.3)  # committed once played
    await comm.disconnect()
    greeting, spoken, typed = assistant_turns(await session_history(api_client, session_id))[:3]
    assert greeting["latency_ms"]["end_to_first_audio"] is None
    assert greeting["latency_ms"]["tts_first_audio"] is not None
    lat = spoken["latency_ms"]
    assert all(isinstance(lat[k], float) for k in STAGES)
    assert lat["end_to_first_audio"] >= lat["stt"]
    assert spoken["usage"]["stt_audio_s"] > 0 and spoken["usage"]["tts_chars"] > 0
    assert typed["latency_ms"]["stt"] is None and typed["latency_ms"]["end_to_first_audio"] is not None


async def test_live_browser_conversation_has_timings_on_every_assistant_turn(fake_runtime, api_client):
    with RealtimePeer(api_key="rt-key") as peer:
        fake_runtime.__dict__["_realtime_client"] = OpenAIRealtimeClient(
            "gpt-realtime", api_key="rt-key", base_url=f"{peer.url}/v1", connect_timeout=3
        )
        peer.push(Say("Your card is blocked."))
        comm = await connect()
        session_id = (await recv(comm))["session_id"]
        await comm.send_to(
            text_data=json.dumps({"type": "config", "payload": {"scenario": "banking", "mode": "live"}})
        )
        await comm.send_to(text_data=msg("control", action="start"))
        await until(comm, final_response, timeout=8)
        await asyncio.sleep(0.5)
        await comm.send_to(text_data=msg("text", text="block my card"))
        await until(comm, lambda m: final_response(m) and "blocked" in m["payload"]["text"], timeout=8)
        await asyncio.sleep(0.6)  # committed once played
        await comm.disconnect()
    await fake_runtime.stop_realtime()
    turns = assistant_turns(await session_history(api_client, session_id))
    assert len(turns) >= 2
    greeting, answer = turns[:2]
    for turn in (greeting, answer):
        assert turn["latency_ms"]["llm_first_token"] is None and turn["latency_ms"]["tts_first_audio"] is None
        assert turn["usage"]["realtime_audio_out_s"] > 0 and turn["usage"]["llm_tokens_out"] > 0
    assert answer["latency_ms"]["stt"] is None  # typed
    assert isinstance(answer["latency_ms"]["end_to_first_audio"], float)
