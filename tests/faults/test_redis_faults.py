"""Redis stopped and restarted under a live conversation (issue 12, point 1: "degrade, never drop").

The service as the README scales it out - ``uvicorn --workers 2`` sharing one database and one
Redis (cache and channel layer) - on a private redis-server this module stops for ~8 s and starts
again, empty, as a crashed cache comes back. A browser caller (the real conversation socket,
typed turns, agent audio coming back) is mid-conversation when Redis goes. The case asserts:

* the socket stays open and every turn typed during the outage is answered (a handoff included);
* ``GET /sessions/{id}`` answers 503 ``{"detail"}`` with ``Retry-After`` - never 500 - on either
  worker meanwhile, and ``/ready`` says 503 while Redis is down and 200 once it is back;
* afterwards every turn the caller got (user and agent) is in the session's history, the
  session's state is back in the cache (written from the worker's memory), and the server log
  holds no ERROR line or traceback.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance"
if str(ACCEPTANCE) not in sys.path:  # deployments.py, clients.py: reused, not copied
    sys.path.insert(0, str(ACCEPTANCE))

import websockets  # noqa: E402
from clients import BrowserCaller, is_type  # noqa: E402
from deployments import Deployment, assert_log_clean, clean_environ, spawn_uvicorn, wait_ready  # noqa: E402
from private_redis import RestartableRedis  # noqa: E402
from servers import ROOT, free_port, migrate  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KIND = "uvicorn-2-workers-private-redis"  # not the acceptance suite's UVICORN: nothing flushes 6379
WORKERS = 2
OUTAGE_S = 8.0
PROBE_TIMEOUT_S = 30.0  # generous limits against hangs, not measurements
TURN_TIMEOUT_S = 45.0


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RestartableRedis]:
    with RestartableRedis() as server:
        yield server


@pytest.fixture(scope="module")
def service(redis_server: RestartableRedis, tmp_path_factory) -> Iterator[Deployment]:
    """uvicorn with two workers on the private Redis (``CACHE_HOST``/``CACHE_PORT``), offline providers."""
    root = tmp_path_factory.mktemp("redis-outage")
    api_key = f"faults-{secrets.token_hex(16)}"
    env = {
        **clean_environ(),
        "DATABASE_URL": f"sqlite:///{root / 'db.sqlite3'}",
        "API_KEYS": api_key,
        "CACHE_HOST": "127.0.0.1",
        "CACHE_PORT": str(redis_server.port),
        "CACHE_DB": "0",
        "LOG_LEVEL": "INFO",
        "STT_POOL_SIZE": "1",  # the caller types: one warm decoder and synthesiser are plenty
        "TTS_POOL_SIZE": "1",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    migrate(env)
    port = free_port()
    log = root / "uvicorn.log"
    deployment = spawn_uvicorn(KIND, port, log, env, api_key)
    try:
        wait_ready(deployment)
    except BaseException:
        deployment.stop()
        print(deployment.tail())
        raise
    try:
        yield deployment
    finally:
        deployment.stop()


async def ready_status(deployment: Deployment) -> int:
    """``/ready`` on a fresh connection (the kernel spreads them over the workers)."""
    async with httpx.AsyncClient(timeout=10) as fresh:
        return (await fresh.get(f"{deployment.http}/ready")).status_code


async def wait_ready_status(deployment: Deployment, status: int, streak: int) -> None:
    """Until ``/ready`` answered ``status`` ``streak`` times in a row."""
    seen = 0
    async with asyncio.timeout(PROBE_TIMEOUT_S):
        while seen < streak:
            seen = seen + 1 if await ready_status(deployment) == status else 0
            if seen < streak:
                await asyncio.sleep(0.1)


async def session_reads(deployment: Deployment, session_id: str, count: int) -> list[httpx.Response]:
    """``GET /sessions/{id}`` ``count`` times, each on a fresh connection (both workers answer)."""
    responses = []
    for _ in range(count):
        async with httpx.AsyncClient(timeout=10) as fresh:
            url = f"{deployment.http}/sessions/{session_id}"
            responses.append(await fresh.get(url, headers=deployment.auth))
    return responses


# --- a caller who types ----------------------------------------------------------------------------
async def open_caller(deployment: Deployment) -> BrowserCaller:
    """The conversation socket, configured and started (the greeting follows)."""
    url = f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}"
    ws = await websockets.connect(url, max_size=2**22, open_timeout=30)
    caller = BrowserCaller(ws, voice="typed")  # no microphone: typed turns only
    i = await caller.inbox.wait(is_type("event", name="session_started"), timeout=30)
    caller.session_id = caller.inbox.messages[i]["session_id"]
    await send(caller, "config", {"scenario": "default"})
    await send(caller, "control", {"action": "start"})
    return caller


async def send(caller: BrowserCaller, type_: str, payload: dict) -> None:
    await caller.ws.send(json.dumps({"type": type_, "payload": payload}))


async def end_of_turn(caller: BrowserCaller, start: int) -> list[dict]:
    """Wait for the final answer, ``listening`` after it, and its audio played out (so the next turn
    does not barge in); the messages of the turn."""
    i = await caller.inbox.wait(is_type("response", final=True), start, timeout=TURN_TIMEOUT_S)
    await caller.inbox.wait(is_type("event", name="state", state="listening"), i, timeout=TURN_TIMEOUT_S)
    await asyncio.sleep(max(0.0, caller.playing_until - time.monotonic()) + 0.3)
    return caller.inbox.messages[start:]


async def type_turn(caller: BrowserCaller, text: str) -> list[tuple[str, str]]:
    """Type ``text``; the turns the caller then got: theirs and the agents' (an announced handoff's
    line and the new agent's greeting are one response: one history turn)."""
    start = len(caller.inbox.messages)
    await send(caller, "text", {"text": text})
    messages = await end_of_turn(caller, start)
    errors = [m["payload"] for m in messages if m["type"] == "error"]
    assert not errors, errors
    assert any(m["type"] == "audio" for m in messages), f"no agent audio after {text!r}"
    answers = [m["payload"]["text"] for m in messages if is_type("response", final=True)(m)]
    return [("user", text), ("assistant", " ".join(a for a in answers if a))]


def _words(text: str) -> str:
    return " ".join(text.split())


async def assert_in_history(deployment: Deployment, session_id: str, heard: list[tuple[str, str]]) -> None:
    """``GET /sessions/{id}`` holds every turn the caller got, in order (waited for: an answer is
    written once its audio has played, by a background writer)."""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while True:
        response = (await session_reads(deployment, session_id, 1))[0]
        assert response.status_code == 200, response.text
        turns = [(t["role"], _words(t["content"])) for t in response.json()["history"]]
        said = [t for t in turns if t[0] in ("user", "assistant")]
        if said == [(role, _words(text)) for role, text in heard]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the history {said} is not what the caller got {heard}")
        await asyncio.sleep(0.3)


async def test_a_conversation_goes_on_through_a_redis_outage(service: Deployment, redis_server):
    caller = await open_caller(service)
    try:
        greeting = await end_of_turn(caller, 0)
        heard = [("assistant", next(m["payload"]["text"] for m in greeting if m["type"] == "response"))]
        heard += await type_turn(caller, "hello")

        redis_server.stop()
        stopped_at = time.monotonic()
        await wait_ready_status(service, 503, streak=1)  # /ready tells at once
        heard += await type_turn(caller, "how are you")
        heard += await type_turn(caller, "specialist please")  # a handoff: state saved, a record queued
        assert any(is_type("event", name="handoff")(m) for m in caller.inbox.messages)
        reads = await session_reads(service, caller.session_id, 6)
        assert [r.status_code for r in reads] == [503] * 6, [r.text for r in reads]
        assert all(set(r.json()) == {"detail"} and int(r.headers["Retry-After"]) > 0 for r in reads)
        assert "session cache" in reads[0].json()["detail"]
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped_at)))
        assert caller.inbox.closed is None, caller.inbox.closed
        assert await ready_status(service) == 503

        redis_server.start()  # empty, as a crashed cache comes back
        await wait_ready_status(service, 200, streak=4 * WORKERS)
        heard += await type_turn(caller, "how does compound interest work")
        assert caller.inbox.closed is None, caller.inbox.closed

        await assert_in_history(service, caller.session_id, heard)
        body = (await session_reads(service, caller.session_id, 1))[0].json()
        assert body["expired"] is False  # the state came back to the cache from the worker's memory
        assert body["active_agent"] == "specialist"
        assert [h["to"] for h in body["handoffs"]] == ["specialist"]
    finally:
        await caller.close()
    assert_log_clean(service)
