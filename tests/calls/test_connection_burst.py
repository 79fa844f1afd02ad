"""A burst of phone calls must cost bystanders nothing and every admitted call its session (issue 12, 7).

Timing lives in bench/bench_connection_burst.py; these tests pin down, without timing, what made a
burst of 300 media streams stall a bystander conversation for seconds and lose calls:

* every admitted stream synthesised the same greeting: with espeak-ng a process each, forked from
  the event loop (2-10 ms of loop each, 200 in one loop step), with Piper a worker thread each (200
  threads starving the loop of the GIL): the greeting is now synthesised once and shared (counted
  by the TTS pool's leases in ``GET /pools``), and espeak-ng processes are started one at a time;
* the local-memory session cache held 300 entries (Django's default) and culled live sessions and
  call maps once ~150 calls were up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess

import httpx
import pytest
import websockets
from django.conf import settings
from django.core.cache import caches
from servers import base_env, free_port, migrate, start, wait_http

from voiceagent.conversation.specs import VoiceSpec
from voiceagent.speech.offline_tts import EspeakTTS

ESPEAK = shutil.which("espeak-ng")
needs_espeak = pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed")
MAX_STREAMS = 12
BURST = 16  # MAX_STREAMS admitted, 4 refused
METADATA = json.dumps({"kind": "AudioMetadata", "audioMetadata": {"sampleRate": 16000, "channels": 1}})


def test_the_local_cache_keeps_a_session_and_a_call_map_for_every_admissible_conversation():
    if "locmem" not in settings.CACHES["default"]["BACKEND"]:
        pytest.skip("the local-memory cache is configured only without CACHE_HOST")
    config = settings.CONFIG
    live = config.BROWSER_MAX_CONNECTIONS + config.TELEPHONY_MAX_STREAMS + config.CONTACTCENTER_MAX_SESSIONS
    cache = caches.create_connection("default")  # a private instance of the configured cache
    keys = [f"burst-test:{kind}:{n}" for n in range(live) for kind in ("session", "call")]
    cache.set_many(dict.fromkeys(keys, {"state": "x" * 100}))
    kept = cache.get_many(keys)
    cache.delete_many(keys)
    assert len(kept) == len(keys), f"{len(keys) - len(kept)} of {len(keys)} entries culled"


@needs_espeak
@pytest.mark.slow
async def test_espeak_processes_start_one_at_a_time(monkeypatch):
    """Twelve different lines at once: never two espeak-ng starts (forks of the server) in flight."""
    real = asyncio.create_subprocess_exec
    starting, most = 0, 0

    async def counted(*args, **kwargs):
        nonlocal starting, most
        starting += 1
        most = max(most, starting)
        try:
            return await real(*args, **kwargs)
        finally:
            starting -= 1

    monkeypatch.setattr(asyncio, "create_subprocess_exec", counted)
    tts = EspeakTTS(pool_size=2)

    async def say(n: int) -> int:
        return sum([len(chunk) async for chunk in tts.synthesize(f"caller number {n}", VoiceSpec())])

    sizes = await asyncio.gather(*(say(n) for n in range(12)))
    await tts.close()
    assert all(sizes), sizes
    assert most == 1, f"{most} espeak-ng starts were in flight at once"


@pytest.fixture(params=["default", "espeak"])
def burst_server(request, tmp_path):
    """uvicorn, one worker, the offline providers (the default TTS, Piper, and espeak-ng)."""
    env = base_env(tmp_path, TELEPHONY_MAX_STREAMS=str(MAX_STREAMS), LOG_LEVEL="INFO")
    env.pop("API_KEYS", None)
    env.pop("TTS_PROVIDER", None)
    if request.param != "default":
        env["TTS_PROVIDER"] = request.param
    migrate(env)
    port = free_port()
    proc = start("uvicorn", port, env, tmp_path / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=90, status=200)
        yield f"127.0.0.1:{port}", tmp_path
    except BaseException:
        print((tmp_path / "server.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def syntheses(host: str) -> int:
    """How many syntheses the server's TTS pool has leased a slot for (``GET /pools``)."""
    return httpx.get(f"http://{host}/api/v1/pools", timeout=10).json()["pools"]["tts"]["acquired_total"]


class _Everyone:
    """Set once every call of the burst was greeted or refused: the greeted ones hang up only
    then, as callers do, not after their first chunk. (Had every caller joined so far left, the
    shared synthesis would be cancelled - a barge-in's rule - and a late call would start another.)"""

    def __init__(self, calls: int) -> None:
        self.left = calls
        self.done = asyncio.Event()

    def settled(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


async def _stream(url: str, everyone: _Everyone) -> dict:
    """One simulator call: admitted (its greeting's text and first audio) or refused (close code)."""
    seen: dict = {"greeting": None, "audio": 0}
    settled = False
    try:
        async with websockets.connect(url, open_timeout=30) as ws:
            await ws.send(METADATA)
            async with asyncio.timeout(30):
                while seen["greeting"] is None or not seen["audio"]:
                    message = json.loads(await ws.recv())
                    if message.get("kind") == "AudioData":
                        seen["audio"] += 1
                    elif message.get("type") == "agent_response":
                        seen["greeting"] = message["payload"]["text"]
                everyone.settled()
                settled = True
                await everyone.done.wait()
    except websockets.ConnectionClosed as exc:
        seen["code"] = exc.rcvd.code if exc.rcvd else None
    finally:
        if not settled:
            everyone.settled()
    return seen


@pytest.mark.slow
async def test_a_burst_of_calls_is_greeted_with_one_synthesis_and_refused_calls_leave_no_session(
    burst_server,
):
    host, root = burst_server
    url = f"ws://{host}/api/v1/media/stream?scenario=default&events=1"
    before = syntheses(host)
    everyone = _Everyone(BURST)
    results = await asyncio.gather(*(_stream(url, everyone) for _ in range(BURST)))
    greeted = [r for r in results if r["greeting"] and r["audio"]]
    refused = [r for r in results if "code" in r]
    assert len(greeted) == MAX_STREAMS, results
    assert [r["code"] for r in refused] == [1013] * (BURST - MAX_STREAMS), results
    assert len({r["greeting"] for r in greeted}) == 1
    made = syntheses(host) - before
    assert made == 1, f"the greeting was synthesised {made} times for {MAX_STREAMS} calls"
    with contextlib.closing(sqlite3.connect(root / "db.sqlite3")) as db:
        (rows,) = db.execute("SELECT COUNT(*) FROM agents_app_session WHERE transport = 'phone'").fetchone()
    assert rows == MAX_STREAMS
