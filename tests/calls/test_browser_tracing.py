"""Traces through a real transport: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a local OTLP/HTTP
receiver, a browser-socket conversation (instant providers) and an API request arrive as a tree:
conversation -> turns -> STT/LLM/TTS, tool and handoff spans, and a server span per request."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from otlp_receiver import tracing_into
from realtime_peer import Say
from test_browser_consumer import SILENCE, TONE, connect, is_event, msg, recv, until
from test_browser_live import start_live
from test_browser_turn_timing import final_response

from voiceagent.handlers import ApiASGIHandler
from voiceagent.observability import tracing

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receiver(monkeypatch):
    with tracing_into(monkeypatch) as peer:
        yield peer


def listening(m) -> bool:
    return m["type"] == "event" and m["payload"].get("state") == "listening"


async def answered(comm) -> None:
    """The agent's answer is final and has played out (a turn is committed once played)."""
    await until(comm, final_response)
    await until(comm, listening)
    await asyncio.sleep(0.3)


async def test_conversation_and_request_spans_arrive_as_a_tree(fake_runtime, receiver):
    comm = await connect()
    session_id = (await recv(comm))["session_id"]
    await comm.send_to(text_data=msg("config", scenario="banking", sample_rate=16000))
    await comm.send_to(text_data=msg("control", action="start"))
    await answered(comm)  # the greeting
    for frame in [TONE * 2] * 10 + [SILENCE] * 40:  # a spoken turn
        await comm.send_to(bytes_data=frame)
    await answered(comm)
    fake_runtime.chat.script.extend([[("handoff_auth_agent", {"reason": "lost card"})]])
    await comm.send_to(text_data=msg("text", text="i lost my card"))
    await until(comm, is_event("handoff"))
    await answered(comm)
    await comm.disconnect()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=ApiASGIHandler()), base_url="http://t"
    ) as http:
        answer = await http.get(f"/api/v1/sessions/{session_id}", headers={"X-Request-ID": "trace-1"})
    await asyncio.to_thread(tracing.shutdown)  # flushes the batch

    spans = receiver.wait_for(lambda s: any(x.name == "conversation" for x in s))
    by_id = {s.span_id: s for s in spans}
    (conversation,) = [s for s in spans if s.name == "conversation"]
    assert conversation.resource["service.name"] == "voiceagent"
    assert conversation.attributes == {
        "voiceagent.session_id": session_id,
        "voiceagent.scenario": "banking",
        "voiceagent.transport": "browser",
        "voiceagent.mode": "cascade",
        "voiceagent.close_reason": conversation.attributes["voiceagent.close_reason"],
    }
    turns = sorted((s for s in spans if s.name == "turn"), key=lambda s: s.start_ns)
    assert len(turns) >= 3  # the greeting, the spoken turn, the typed one with its handoff
    for turn in turns:
        assert turn.parent_id == conversation.span_id and turn.trace_id == conversation.trace_id
        assert conversation.start_ns <= turn.start_ns <= turn.end_ns <= conversation.end_ns
        assert turn.attributes["voiceagent.session_id"] == session_id
    stages = [s for s in spans if s.parent_id in {t.span_id for t in turns}]
    for stage in stages:
        parent = by_id[stage.parent_id]
        assert parent.start_ns <= stage.start_ns <= stage.end_ns <= parent.end_ns + 1_000_000
    names = {s.name for s in stages}
    assert {"stt", "llm", "tts", "tool handoff_auth_agent", "handoff"} <= names
    (tool,) = [s for s in stages if s.name == "tool handoff_auth_agent"]
    assert tool.attributes == {"voiceagent.tool": "handoff_auth_agent"}
    assert by_id[tool.parent_id].attributes["voiceagent.agent"] in {"concierge", "auth_agent"}
    spoken = by_id[next(s for s in stages if s.name == "stt").parent_id]
    assert spoken.attributes["voiceagent.latency_ms.stt"] >= 0
    assert spoken.attributes["voiceagent.usage.stt_audio_s"] > 0
    assert spoken.attributes["voiceagent.usage.tts_chars"] > 0

    (request,) = [s for s in spans if s.attributes.get("url.path") == f"/api/v1/sessions/{session_id}"]
    assert request.kind == 2 and request.parent_id == ""  # SERVER, a root of its own trace
    assert request.attributes["http.request.method"] == "GET"
    assert request.attributes["http.response.status_code"] == answer.status_code


async def test_live_conversation_turns_have_a_realtime_stage(fake_runtime, live_runtime, receiver):
    live_runtime.push(Say("Your card is blocked."))
    comm = await start_live()
    await answered(comm)  # the greeting
    await comm.send_to(text_data=msg("text", text="block my card"))
    await answered(comm)
    await comm.disconnect()
    await fake_runtime.stop_realtime()
    await asyncio.to_thread(tracing.shutdown)

    spans = receiver.wait_for(lambda s: any(x.name == "conversation" for x in s))
    (conversation,) = [s for s in spans if s.name == "conversation"]
    assert conversation.attributes["voiceagent.mode"] == "live"
    turns = {s.span_id: s for s in spans if s.name == "turn" and s.parent_id == conversation.span_id}
    (realtime,) = [
        s for s in spans if s.name == "realtime"
    ]  # the typed answer (the greeting has no turn end)
    turn = turns[realtime.parent_id]
    assert turn.start_ns == realtime.start_ns <= realtime.end_ns <= turn.end_ns
    assert turn.attributes["voiceagent.usage.llm_tokens_out"] > 0
    assert not {"llm", "tts"} & {s.name for s in spans if s.parent_id in turns}
