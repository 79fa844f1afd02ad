"""Acceptance: the front door of a deployment - HTTP as documented, and every refusal a client can
meet on the WebSockets, with the close code (or AudioHook ``disconnect``) and reason the README
promises. The server runs with small limits so that a handful of clients exceed each of them."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest
import websockets
from deployments import KNOWN_LOG_FINDINGS, assert_log_clean, unexpected
from provider_clients import ContactCenterCaller
from websockets.exceptions import ConnectionClosed

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

CC_KEY = "acceptance-contact-center-key"
SERVER_ENV = {
    "BROWSER_MAX_CONNECTIONS": "2",
    "BROWSER_MAX_MESSAGE_BYTES": "16384",
    "BROWSER_MAX_MESSAGES_PER_SECOND": "20",
    "WEBSOCKET_RATE_BURST_S": "1",  # a bucket of 20 messages
    "TELEPHONY_MAX_STREAMS": "1",
    "CONTACTCENTER_MAX_SESSIONS": "1",
    "CONTACTCENTER_API_KEY": CC_KEY,
}


def connect(url: str, **kwargs):
    """A client socket that reads everything the server sends (no flow-control stall on close)."""
    return websockets.connect(url, max_queue=None, open_timeout=30, **kwargs)


async def first_message(ws, timeout: float = 15.0) -> dict | None:
    """The next JSON message, or None when the server closed instead."""
    try:
        while True:
            raw = await asyncio.wait_for(ws.recv(), timeout)
            if isinstance(raw, str):
                message = json.loads(raw)
                if message.get("type") != "audio_levels":
                    return message
    except ConnectionClosed:
        return None


async def closed_with(ws, timeout: float = 15.0) -> tuple[int | None, str, list[dict]]:
    """Read until the server closes: (close code, reason, the JSON messages received before)."""
    messages: list[dict] = []
    try:
        async with asyncio.timeout(timeout):
            async for raw in ws:
                if isinstance(raw, str):
                    messages.append(json.loads(raw))
    except ConnectionClosed:
        pass
    return ws.close_code, ws.close_reason, messages


async def place_call(deployment) -> dict:
    async with httpx.AsyncClient(timeout=30, headers=deployment.auth) as http:
        response = await http.post(
            f"{deployment.http}/calls/initiate", json={"phone_number": "+15551230001", "scenario": "banking"}
        )
    assert response.status_code == 202, response.text
    return response.json()


def media_headers(call: dict | None, token: str | None) -> dict[str, str]:
    headers = {"x-ms-call-connection-id": call["connection_id"]} if call else {}
    return headers | ({"Authorization": f"Bearer {token}"} if token else {})


def test_http_answers_as_documented(deployment):
    base = deployment.http
    assert httpx.get(f"{base}/health", timeout=10).json()["status"] == "healthy"  # anonymous
    assert httpx.get(f"{base}/ready", timeout=10).status_code == 200
    refused = httpx.get(f"{base}/scenarios", timeout=10)
    assert refused.status_code == 401 and refused.json()["detail"]  # an API key exists: required
    scenarios = httpx.get(f"{base}/scenarios", headers=deployment.auth, timeout=10)
    assert {"banking", "default"} <= {s["name"] for s in scenarios.json()["scenarios"]}
    missing = httpx.get(f"{base}/no-such-thing", headers=deployment.auth, timeout=10)
    assert missing.status_code == 404 and missing.json()["detail"]
    status = httpx.get(f"{base}/browser/status", headers=deployment.auth, timeout=10).json()
    assert status["max_connections"] == 2
    page = httpx.get(base.replace("/api/v1", "/"), timeout=10)
    assert page.status_code == 200 and "Start microphone" in page.text
    assert httpx.get(f"{base}/docs/", headers=deployment.auth, timeout=10).status_code == 200


async def test_browser_socket_without_api_key_is_refused_with_1008(deployment):
    async with connect(f"{deployment.ws}/browser/conversation") as ws:
        code, reason, _ = await closed_with(ws)
    assert code == 1008 and reason.startswith("unauthorized"), (code, reason)


async def test_dashboard_without_api_key_is_refused_with_1008(deployment):
    async with connect(f"{deployment.ws}/browser/dashboard/relay") as ws:
        code, reason, _ = await closed_with(ws)
    assert code == 1008 and reason.startswith("unauthorized"), (code, reason)


async def test_a_bad_message_is_answered_and_an_oversized_one_closes_with_1009(deployment):
    async with connect(f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}") as ws:
        assert (await first_message(ws))["payload"]["name"] == "session_started"
        await ws.send("this is not JSON")
        answer = await first_message(ws)
        assert answer["type"] == "error" and answer["payload"]["code"] == "bad_json", answer  # still open
        await ws.send(bytes(20000))  # the limit is 16384
        code, reason, _ = await closed_with(ws)
    assert code == 1009 and reason.startswith("message too big"), (code, reason)


async def test_flooding_closes_with_1008(deployment):
    async with connect(f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}") as ws:
        config = json.dumps({"type": "config", "payload": {"sample_rate": 16000}})
        with contextlib.suppress(ConnectionClosed):
            for _ in range(60):  # at once; the limit is 20 a second (and a burst of 20)
                await ws.send(config)
        code, reason, _ = await closed_with(ws)
    assert code == 1008 and reason.startswith("too many messages"), (code, reason)


async def test_browser_conversations_over_the_limit_are_refused_with_1013(deployment):
    url = f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}"
    accepted, refusal = [], None
    try:
        for _ in range(2 * deployment.workers + 1):  # the limit is 2 per process
            ws = await connect(url)
            first = await first_message(ws)
            if first is not None and first["payload"].get("name") == "session_started":
                accepted.append(ws)
                continue
            refusal = (ws.close_code, ws.close_reason) if first is None else (await closed_with(ws))[:2]
            break
        assert refusal is not None, f"all {len(accepted)} conversations were accepted"
        assert refusal[0] == 1013 and refusal[1].startswith("server busy"), refusal
        assert 2 <= len(accepted) <= 2 * deployment.workers
        if deployment.workers == 1:  # a place frees up: the next conversation is accepted again
            await accepted.pop().close()
            await asyncio.sleep(0.5)
            accepted.append(ws := await connect(url))
            assert (await first_message(ws))["payload"]["name"] == "session_started"
    finally:
        for ws in accepted:
            await ws.close()


async def test_media_stream_needs_the_providers_token_and_a_known_call(deployment, peers):
    call = await place_call(deployment)
    async with connect(f"{deployment.ws}/media/stream", additional_headers=media_headers(call, None)) as ws:
        code, reason, _ = await closed_with(ws)
    assert code == 1008 and reason.startswith("unauthorized"), (code, reason)
    token = peers.jwks.token()
    unknown = {"connection_id": "no-such-call"}
    async with connect(
        f"{deployment.ws}/media/stream", additional_headers=media_headers(unknown, token)
    ) as ws:
        code, reason, _ = await closed_with(ws)
    assert (code, reason) == (1008, "unknown call connection")


async def test_media_streams_over_the_limit_are_refused_with_1013(deployment, peers):
    accepted, refusal = [], None
    try:
        for _ in range(deployment.workers + 1):  # the limit is 1 per process
            call = await place_call(deployment)
            ws = await connect(
                f"{deployment.ws}/media/stream?events=1",
                additional_headers=media_headers(call, peers.jwks.token()),
            )
            first = await first_message(ws)
            if first is not None and first.get("payload", {}).get("name") == "session_started":
                accepted.append(ws)
                continue
            refusal = (ws.close_code, ws.close_reason) if first is None else (await closed_with(ws))[:2]
            break
    finally:
        for ws in accepted:
            await ws.close()
    assert refusal is not None, f"all {len(accepted)} streams were accepted"
    assert refusal[0] == 1013 and refusal[1].startswith("server busy"), refusal


async def test_contact_center_refuses_a_wrong_key_and_sessions_over_the_limit(deployment):
    wrong = await ContactCenterCaller.connect(deployment.ws, voice="-", api_key="not-the-key")
    refused = await wrong.client.next_message(10)
    await wrong.ws.close()
    assert refused["type"] == "disconnect" and refused["parameters"]["reason"] == "unauthorized", refused
    sessions, refusal = [], None
    try:
        for _ in range(deployment.workers + 1):  # the limit is 1 per process
            caller = await ContactCenterCaller.connect(deployment.ws, voice="-", api_key=CC_KEY)
            sessions.append(caller)
            answer = await caller.open()
            if answer["type"] == "disconnect":
                refusal = answer["parameters"]
                break
            assert answer["type"] == "opened", answer
    finally:
        for caller in sessions:
            await caller.close()
    assert refusal is not None, f"all {len(sessions)} sessions were opened"
    assert refusal["reason"] == "error" and "session limit" in refusal["info"], refusal


async def test_typed_text_logs_no_barge_in_noise(deployment):
    """Issue 11 finding 7: every typed message logged 'barge-in (text): response None stopped'."""
    before = len(deployment.log_text())
    async with connect(f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}") as ws:
        await first_message(ws)
        await ws.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
        await ws.send(json.dumps({"type": "text", "payload": {"text": "what is my balance"}}))
        async with asyncio.timeout(30):
            while True:
                message = await first_message(ws)
                assert message is not None, "closed"
                if message["type"] == "transcript":
                    break
        await asyncio.sleep(1.0)
    assert "response None stopped" not in deployment.log_text()[before:]


def test_readiness_probes_during_startup_are_not_logged_as_errors(deployment):
    """Issue 11 finding 7: the expected 503s of /ready while the service warms up were ERROR lines."""
    if not deployment.ready_503s:
        pytest.skip("the deployment was ready at the first probe: no 503 to look at")
    lines = [
        line for line in deployment.log_text().splitlines() if "/api/v1/ready" in line and "ERROR" in line
    ]
    assert not lines, lines[:3]


def test_server_log_is_clean(deployment):
    # the refusals above are WARNING lines; nothing in this module provokes an ERROR on purpose
    assert_log_clean(deployment, stop=False)  # the shutdown is the next test's


async def test_a_shutdown_with_a_live_conversation_is_clean(deployment):
    """SIGTERM while a caller is mid-conversation: the caller's socket is closed, the log stays clean."""
    before = len(deployment.log_text())
    async with connect(f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}") as ws:
        await first_message(ws)
        await ws.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
        await ws.send(json.dumps({"type": "text", "payload": {"text": "i lost my card"}}))
        async with asyncio.timeout(30):
            while (message := await first_message(ws)) is not None and message["type"] != "response":
                pass
        await asyncio.to_thread(deployment.stop)
        code, _, _ = await closed_with(ws)
    assert code is not None, "the server went away without closing the socket"
    left = unexpected(deployment.log_text()[before:], KNOWN_LOG_FINDINGS)
    assert not left, "the shutdown logged errors:\n" + "\n".join(left[:20])
