"""The served process: uvicorn with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a local OTLP receiver.
Its lifecycle sets tracing up; a browser-socket conversation (instant speech, the offline rules
chat) and an API request arrive at the receiver as a tree once the service shuts down (flush)."""

from __future__ import annotations

import asyncio
import json
import signal

import httpx
import pytest
import websockets
from otlp_receiver import OtlpReceiver
from servers import base_env, free_port, migrate, start, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def typed_turn(ws_url: str) -> str:
    """A typed turn over the browser socket, answered; the session id."""
    async with websockets.connect(f"{ws_url}/api/v1/browser/conversation") as ws:
        session_id = json.loads(await ws.recv())["session_id"]
        await ws.send(json.dumps({"type": "text", "payload": {"text": "i lost my card"}}))
        thinking = False  # the greeting comes first; the answer's turn begins with "thinking"
        async with asyncio.timeout(20):
            while True:
                raw = await ws.recv()
                message = json.loads(raw) if isinstance(raw, str) else {}
                payload = message.get("payload") or {}
                thinking = thinking or payload.get("state") == "thinking"
                if thinking and message.get("type") == "response" and payload.get("final"):
                    break
        await asyncio.sleep(1.0)  # the answer plays out and is committed
    return session_id


def test_served_process_exports_the_trace_tree(tmp_path):
    port = free_port()
    with OtlpReceiver() as receiver:
        env = base_env(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_SERVICE_NAME="voiceagent-test",
            LIFECYCLE_PLUGINS="instant_speech",
            STT_POOL_SIZE="0",
            TTS_POOL_SIZE="0",
        )
        migrate(env)
        server = start("uvicorn", port, env, tmp_path / "server.log")
        try:
            wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=60, status=200)
            session_id = asyncio.run(typed_turn(f"ws://127.0.0.1:{port}"))
            answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions/{session_id}", timeout=10)
        finally:
            server.send_signal(signal.SIGINT)  # the lifespan shutdown flushes the spans
            server.wait(timeout=30)
        spans = receiver.wait_for(lambda s: any(x.name == "conversation" for x in s), timeout=5)
    log = (tmp_path / "server.log").read_text()
    (conversation,) = [s for s in spans if s.name == "conversation"]
    assert conversation.resource["service.name"] == "voiceagent-test", log
    assert conversation.attributes["voiceagent.session_id"] == session_id
    assert conversation.attributes["voiceagent.transport"] == "browser"
    turns = [s for s in spans if s.name == "turn" and s.parent_id == conversation.span_id]
    assert turns  # the answer (the greeting, interrupted by the typed text at once, may have none)
    stages = {s.name for s in spans if s.parent_id in {t.span_id for t in turns}}
    assert {"llm", "tts"} <= stages
    (request,) = [s for s in spans if s.attributes.get("url.path") == f"/api/v1/sessions/{session_id}"]
    assert request.name == "GET /api/v1/sessions/<str:session_id>"
    assert request.attributes["http.response.status_code"] == answer.status_code
