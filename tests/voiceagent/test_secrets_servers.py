"""Secrets never reach a log line or a response: the service in production mode under daphne (JSON
logs) and uvicorn (text logs, access log on), every secret setting set to a recognisable value,
every transport exercised against local peers that check the credentials they receive.

The HTTP API (Bearer, ``X-API-Key``, a key in the query string, a wrong key), the web pages, the
browser conversation socket and the dashboard relay opened with ``?api_key=``, a phone call placed
through the ACS peer (HMAC with ``TELEPHONY_ACCESS_KEY``) whose media stream arrives with the
provider's JWT, the AudioHook bridge (``X-API-KEY`` and a request signature) on the realtime peer,
the chat peer (``OPENAI_API_KEY``), MCP servers with bearer tokens (from the environment and added
at runtime), Redis with a password. Then the server is stopped and everything it printed (its own
lines and the server's access lines) and everything it answered is searched for every secret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import websockets
from acs_media_client import AcsMediaClient, over_websockets, silence
from acs_peer import AcsPeer, telephony_env
from audiohook_client import ORG, AudioHookClient
from audiohook_client import over_websockets as audiohook_socket
from audiohook_client_auth import signed_headers
from jwks_issuer import JwksIssuer
from mcp_peers import PeerServer, build_server
from openai_peer import OpenAIPeer, Text
from private_redis import redis_with_password
from realtime_peer import RealtimePeer
from servers import PYTHON, ROOT, base_env, free_port, migrate, start, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

AUDIENCE = "secrets-test-acs-resource"
CHAT_ANSWER = "Hello from the chat peer."
TIMEOUT = 15.0


def recognisable(name: str) -> str:
    return f"sekrit-{name}-{secrets.token_hex(8)}"


def recognisable_b64(name: str) -> str:
    """A base64 secret (HMAC keys): recognisable once encoded, as it is configured and would leak."""
    return base64.b64encode(f"sekrit-{name}-{secrets.token_hex(8)}".encode()).decode()


@dataclass
class Secrets:
    """Every secret the deployment holds, by where it comes from."""

    env: dict[str, str] = field(
        default_factory=lambda: {
            "SECRET_KEY": recognisable("secret-key") + secrets.token_hex(20),
            "API_KEYS": f"{recognisable('api-key-a')},{recognisable('api-key-b')}",
            "TELEPHONY_ACCESS_KEY": recognisable_b64("telephony-access-key"),
            "OPENAI_API_KEY": recognisable("openai-api-key"),
            "CLOUD_LLM_API_KEY": recognisable("cloud-llm-api-key"),
            "CLOUD_SPEECH_KEY": recognisable("cloud-speech-key"),
            "CLOUD_REALTIME_VOICE_API_KEY": recognisable("realtime-api-key"),
            "CONTACTCENTER_API_KEY": recognisable("contactcenter-api-key"),
            "CONTACTCENTER_CLIENT_SECRET": recognisable_b64("contactcenter-client-secret"),
            "CACHE_PASSWORD": recognisable("cache-password"),
            "MCP_ENCRYPTION_KEY": recognisable("mcp-encryption-key"),
            "MCP_SERVER_CRM_AUTH_TOKEN": recognisable("mcp-auth-token"),
        }
    )
    mcp_header: str = field(default_factory=lambda: recognisable("mcp-header"))
    runtime_mcp_token: str = field(default_factory=lambda: recognisable("runtime-mcp-token"))
    stored_key: str = ""  # made by manage.py create_api_key
    media_jwt: str = ""  # the provider's bearer token on the media stream

    @property
    def key_a(self) -> str:
        return self.env["API_KEYS"].split(",")[0]

    @property
    def key_b(self) -> str:
        return self.env["API_KEYS"].split(",")[1]

    def values(self) -> dict[str, str]:
        found = {k: v for k, v in self.env.items() if k != "API_KEYS"}
        found.update(
            API_KEY_A=self.key_a,
            API_KEY_B=self.key_b,
            MCP_SERVER_CRM_HEADERS=self.mcp_header,
            runtime_mcp_token=self.runtime_mcp_token,
            stored_api_key=self.stored_key,
            media_jwt=self.media_jwt,
        )
        return {k: v for k, v in found.items() if v}


@dataclass
class Seen:
    """Everything the service answered: HTTP bodies and headers, WebSocket messages, close reasons."""

    items: list[str] = field(default_factory=list)

    def add(self, what: str, text: str | bytes | None) -> None:
        if isinstance(text, bytes):
            text = text.decode("latin-1")
        self.items.append(f"{what}: {text}")

    def response(self, response: httpx.Response) -> httpx.Response:
        self.add(f"{response.request.method} {response.request.url.path}", response.text)  # not the query
        self.add("headers", str(dict(response.headers)))
        return response


SECRETS = Secrets()


@pytest.fixture(scope="module")
def peers():
    with contextlib.ExitStack() as stack:
        chat = stack.enter_context(OpenAIPeer(api_key=SECRETS.env["OPENAI_API_KEY"]))
        chat.default = Text(CHAT_ANSWER)
        realtime = stack.enter_context(RealtimePeer(api_key=SECRETS.env["CLOUD_REALTIME_VOICE_API_KEY"]))
        acs = stack.enter_context(AcsPeer(key=SECRETS.env["TELEPHONY_ACCESS_KEY"]))
        jwks = stack.enter_context(JwksIssuer(AUDIENCE))
        mcp = stack.enter_context(PeerServer(build_server, kind="http"))
        cache_port = stack.enter_context(redis_with_password(SECRETS.env["CACHE_PASSWORD"]))
        yield {"chat": chat, "realtime": realtime, "acs": acs, "jwks": jwks, "mcp": mcp, "cache": cache_port}


@dataclass
class Service:
    kind: str
    port: int
    log: Path
    proc: subprocess.Popen

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def production_env(root: Path, peers: dict, log_format: str) -> dict[str, str]:
    env = base_env(
        root,
        ENVIRONMENT="production",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LOG_FORMAT=log_format,
        LOG_LEVEL="INFO",
        LIFECYCLE_PLUGINS="instant_speech",
        STT_POOL_SIZE="0",
        TTS_POOL_SIZE="0",
        CACHE_HOST="127.0.0.1",
        CACHE_PORT=str(peers["cache"]),
        OPENAI_BASE_URL=peers["chat"].openai_base_url,
        OPENAI_MODEL="peer-model",
        REALTIME_PROVIDER="voicelive",
        CLOUD_REALTIME_VOICE_ENDPOINT=peers["realtime"].url,
        CLOUD_REALTIME_VOICE_MODEL="gpt-realtime",
        TELEPHONY_MEDIA_AUDIENCE=AUDIENCE,
        TELEPHONY_MEDIA_JWKS_URL=peers["jwks"].url,
        MCP_ENABLED_SERVERS="crm",
        MCP_SERVER_CRM_URL=peers["mcp"].url,
        MCP_SERVER_CRM_TRANSPORT="streamable-http",
        MCP_SERVER_CRM_HEADERS=json.dumps({"X-Custom": SECRETS.mcp_header}),
        MCP_ALLOWED_HOSTS="127.0.0.1",
        **{k: v for k, v in telephony_env(peers["acs"]).items() if k != "TELEPHONY_ACCESS_KEY"},
        **SECRETS.env,
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)  # as an operator starts it
    return env


@pytest.fixture(scope="module", params=[("daphne", "json"), ("uvicorn", "text")], ids=["daphne", "uvicorn"])
def service(request, peers, tmp_path_factory) -> Iterator[Service]:
    kind, log_format = request.param
    root = tmp_path_factory.mktemp(f"secrets-{kind}")
    env = production_env(root, peers, log_format)
    migrate(env)
    made = subprocess.run(
        [PYTHON, "manage.py", "create_api_key", "secrets-test"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    SECRETS.stored_key = made.stdout.strip().splitlines()[-1]
    assert SECRETS.stored_key.startswith("va_"), made.stdout
    port = free_port()
    log = root / "server.log"
    service = Service(kind, port, log, start(kind, port, env, log, access_log=True))
    try:
        wait_http(f"{service.http}/api/v1/ready", timeout=60, status=200)
        yield service
    finally:
        service.stop()


# --- the transports --------------------------------------------------------------------------------


async def exercise_http(service: Service, peers: dict, seen: Seen) -> None:
    key = {"Authorization": f"Bearer {SECRETS.key_a}", "X-Forwarded-Proto": "https"}
    async with httpx.AsyncClient(base_url=service.http, timeout=30, headers=key) as http:
        for path in (
            "/api/v1/health",
            "/api/v1/ready",
            "/api/v1/readiness",
            "/api/v1/pools",
            "/api/v1/appconfig",
            "/api/v1/agents",
            "/api/v1/scenarios",
            "/api/v1/calls/",
            "/api/v1/mcp/servers",
            "/api/v1/mcp/tools",
            "/api/v1/schema/",
            "/api/v1/docs/",
            "/",
            "/dashboard",
            "/admin/login/",
        ):
            response = seen.response(await http.get(path))
            assert response.status_code in (200, 503), (path, response.status_code, response.text[:300])
        added = seen.response(
            await http.post(
                "/api/v1/mcp/servers",
                json={
                    "name": "docs",
                    "url": peers["mcp"].url,
                    "transport": "streamable-http",
                    "auth_token": SECRETS.runtime_mcp_token,
                },
            )
        )
        assert added.status_code in (200, 201), added.text
        seen.response(await http.get("/api/v1/mcp/servers"))
        refresh = seen.response(await http.post("/api/v1/appconfig/refresh"))
        assert refresh.status_code == 200, refresh.text
    anonymous = {"X-Forwarded-Proto": "https"}
    async with httpx.AsyncClient(base_url=service.http, timeout=30, headers=anonymous) as http:
        # keys where a REST client must not put them, or wrong: refused, and the access line masks them
        query = f"/api/v1/agents?api_key={SECRETS.stored_key}&token={SECRETS.key_b}"
        assert seen.response(await http.get(query)).status_code == 401
        wrong = {"Authorization": f"Bearer {SECRETS.key_b}x"}
        assert seen.response(await http.get("/api/v1/agents", headers=wrong)).status_code == 401
        header_key = {"X-API-Key": SECRETS.key_b}
        response = await http.get(f"/api/v1/scenarios?access_token={SECRETS.key_a}", headers=header_key)
        assert seen.response(response).status_code == 200


async def exercise_browser_and_dashboard(service: Service, seen: Seen) -> str:
    """A typed turn answered by the chat peer, watched by a dashboard; the conversation's id."""
    relay_url = f"{service.ws}/api/v1/browser/dashboard/relay?api_key={SECRETS.stored_key}"
    async with websockets.connect(relay_url) as dashboard:
        first = json.loads(await asyncio.wait_for(dashboard.recv(), TIMEOUT))
        seen.add("dashboard", json.dumps(first))
        assert first["payload"]["name"] == "relay_connected", first
        url = f"{service.ws}/api/v1/browser/conversation?api_key={SECRETS.key_b}"
        async with websockets.connect(url) as ws:
            started = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            seen.add("browser", json.dumps(started))
            assert started["payload"]["name"] == "session_started", started
            await ws.send(json.dumps({"type": "text", "payload": {"text": "hello there"}}))
            async with asyncio.timeout(TIMEOUT):
                while True:
                    raw = await ws.recv()
                    seen.add("browser", raw)
                    if isinstance(raw, str) and CHAT_ANSWER in raw:
                        break
        with contextlib.suppress(TimeoutError):
            while True:
                seen.add("dashboard", await asyncio.wait_for(dashboard.recv(), 1.0))
    return started["session_id"]


async def exercise_phone_call(service: Service, peers: dict, seen: Seen) -> None:
    """A call placed through the provider, its media stream with the provider's JWT, a callback."""
    key = {"Authorization": f"Bearer {SECRETS.key_a}", "X-Forwarded-Proto": "https"}
    async with httpx.AsyncClient(base_url=service.http, timeout=30, headers=key) as http:
        placed = seen.response(
            await http.post(
                "/api/v1/calls/initiate", json={"phone_number": "+15551234567", "scenario": "default"}
            )
        )
        assert placed.status_code == 202, placed.text
        cid = placed.json()["connection_id"]
        SECRETS.media_jwt = peers["jwks"].token()
        headers = {"x-ms-call-connection-id": cid, "Authorization": f"Bearer {SECRETS.media_jwt}"}
        async with websockets.connect(
            f"{service.ws}/api/v1/media/stream?events=1", additional_headers=headers
        ) as ws:
            client = AcsMediaClient(over_websockets(ws), rate=16000)
            await client.metadata(16000)
            await client.audio_ms(silence(200, 16000))
            await client.event("agent_response", TIMEOUT)
        seen.add("media stream", json.dumps([m for m in client.wire if m.get("kind") != "AudioData"]))
        async with websockets.connect(
            f"{service.ws}/api/v1/media/stream?events=1", additional_headers={"x-ms-call-connection-id": cid}
        ) as ws:
            anonymous = AcsMediaClient(over_websockets(ws))
            closed = await anonymous.wait_closed(TIMEOUT)
        seen.add("media stream (no token)", json.dumps(closed))
        assert closed["code"] == 1008, closed
        event = peers["acs"].cloud_event("CallConnected", cid)
        callback = seen.response(await http.post("/api/v1/calls/callbacks", json=[event]))
        assert callback.status_code == 200, callback.text


async def exercise_audiohook(service: Service, seen: Seen) -> None:
    """A signed AudioHook session on the live engine (the realtime peer), behind a TLS proxy."""
    path, session_id = "/api/v1/contactcenter/stream", str(uuid.uuid4())
    headers = signed_headers(
        path=path,
        host=f"127.0.0.1:{service.port}",
        organization_id=ORG,
        session_id=session_id,
        correlation_id=str(uuid.uuid4()),
        api_key=SECRETS.env["CONTACTCENTER_API_KEY"],
        client_secret_b64=SECRETS.env["CONTACTCENTER_CLIENT_SECRET"],
    )
    headers["X-Forwarded-Proto"] = "https"
    async with websockets.connect(
        f"{service.ws}{path}", subprotocols=["audiohook-v2"], additional_headers=headers
    ) as ws:
        client = AudioHookClient(audiohook_socket(ws), session_id=session_id)
        await client.open()
        await client.expect("opened", timeout=TIMEOUT)
        await client.collect_audio(1.0)
        await client.send("close", {"reason": "end"})
        await client.expect("closed", timeout=TIMEOUT)
    seen.add("audiohook", json.dumps(client.messages))
    assert len(client.audio) > 0, "no greeting audio from the realtime peer"


# --- the test ---------------------------------------------------------------------------------------


def lines_with(text: str, secret: str) -> list[str]:
    return [line[:300] for line in text.splitlines() if secret in line]


async def test_no_secret_in_any_log_line_or_response(service, peers):
    seen = Seen()
    await exercise_http(service, peers, seen)
    session_id = await exercise_browser_and_dashboard(service, seen)
    await exercise_phone_call(service, peers, seen)
    await exercise_audiohook(service, seen)
    async with httpx.AsyncClient(base_url=service.http, timeout=30) as http:
        headers = {"Authorization": f"Bearer {SECRETS.key_a}", "X-Forwarded-Proto": "https"}
        history = seen.response(await http.get(f"/api/v1/sessions/{session_id}", headers=headers))
        assert history.status_code == 200, history.text
    service.stop()  # the log then holds the shutdown too

    # the secrets were really used: each peer received and checked its credential
    assert peers["chat"].chat_requests(), "the chat peer got no request"
    assert peers["realtime"].connections, "the realtime peer got no connection"
    assert all(r.authorized for r in peers["acs"].requests_to("/calling/callConnections")), "ACS refused"

    log = service.log.read_text(errors="replace")
    leaks = {name: lines_with(log, value) for name, value in SECRETS.values().items() if value in log}
    assert not leaks, f"{service.kind} logged secrets: {json.dumps(leaks, indent=1)}"
    answered = "\n".join(seen.items)
    leaks = {
        name: lines_with(answered, value) for name, value in SECRETS.values().items() if value in answered
    }
    assert not leaks, f"{service.kind} answered secrets: {json.dumps(leaks, indent=1)}"
    # the scan covered the access lines: they are there, masked
    assert "/api/v1/agents?api_key=***&token=***" in log, log[-3000:]
    if service.kind == "uvicorn":
        assert '"WebSocket /api/v1/browser/conversation?api_key=***"' in log, log[-3000:]
        assert '"WebSocket /api/v1/browser/dashboard/relay?api_key=***"' in log, log[-3000:]
