"""100 concurrent simulated browser clients against ONE server process, 20 ms frames in real time.

Measures the server-added latency from the end of a caller's turn to the first ``audio`` message on
the socket. The server runs the real transport, engine, VAD (webrtcvad) and session store, with
instant scripted STT/LLM/TTS (bench/plugins/instant_providers.py), so the figure is our overhead:
"end of turn" is when the client sends the frame that completes ``VAD_SILENCE_TIMEOUT`` of silence,
and the clock stops when the first ``audio`` message of the answer arrives. Targets: p50 <= 10 ms,
p99 <= 40 ms. Prints one JSON line.

    .venv/bin/python bench/bench_browser.py [--clients 100] [--turns 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from harness import noise_frame, voice_frame  # noqa: E402
from servers import base_env, free_port, migrate, start, wait_http  # noqa: E402

FRAME_MS, RATE, SILENCE_MS = 20, 16000, 400
VOICE, NOISE = voice_frame(RATE, FRAME_MS), noise_frame(RATE, FRAME_MS)


by_turn: dict[int, list[float]] = {}


async def client(url: str, turns: int, rng: random.Random, lat: list[float], errors: list[str]) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(rng.uniform(0, 2))
    async with websockets.connect(url, max_size=2**22) as ws:
        started = json.loads(await ws.recv())
        assert started["payload"]["name"] == "session_started"
        await ws.send(json.dumps({"type": "config", "payload": {"scenario": "default", "sample_rate": RATE}}))
        state = {"turn_end": None}
        first_audio = asyncio.Event()

        async def reader() -> None:
            async for raw in ws:
                m = json.loads(raw)
                if m["type"] == "audio" and state["turn_end"] is not None and not first_audio.is_set():
                    lat.append((loop.time() - state["turn_end"]) * 1000)
                    by_turn.setdefault(state["turn"], []).append(lat[-1])
                    first_audio.set()
                elif m["type"] == "error":
                    errors.append(m["payload"]["code"])

        read_task = asyncio.create_task(reader())
        next_at = loop.time()

        async def frame(pcm: bytes) -> None:
            nonlocal next_at
            next_at += FRAME_MS / 1000
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await ws.send(pcm)

        await ws.send(json.dumps({"type": "control", "payload": {"action": "start"}}))
        for _ in range(100):  # 2 s for the greeting to play
            await frame(NOISE)
        for t in range(turns):
            state["turn"] = t
            first_audio.clear()
            state["turn_end"] = None
            for _ in range(rng.randint(20, 50)):
                await frame(VOICE)
            for i in range(SILENCE_MS // FRAME_MS):
                await frame(NOISE)
                if i == SILENCE_MS // FRAME_MS - 1:
                    state["turn_end"] = loop.time()
            for _ in range(150):  # 3 s: the answer plays, the caller listens
                await frame(NOISE)
        read_task.cancel()


async def run(base: str, clients: int, turns: int) -> tuple[list[float], list[str]]:
    lat: list[float] = []
    errors: list[str] = []
    rng = random.Random(3)
    await asyncio.gather(
        *(
            client(f"{base}/api/v1/browser/conversation", turns, random.Random(rng.random()), lat, errors)
            for _ in range(clients)
        )
    )
    return lat, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = base_env(
            Path(tmp),
            LOG_LEVEL="WARNING",
            VAD_SILENCE_TIMEOUT=str(SILENCE_MS),
            LIFECYCLE_PLUGINS="instant_providers",
            BROWSER_MAX_CONNECTIONS="1000",
            PYTHONPATH=f"{ROOT}:{ROOT / 'bench' / 'plugins'}",
        )
        migrate(env)
        port = free_port()
        proc = start("uvicorn", port, env, Path(tmp) / "server.log")
        try:
            wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=30, status=200)
            lat, errors = asyncio.run(run(f"ws://127.0.0.1:{port}", args.clients, args.turns))
        finally:
            proc.terminate()
            proc.wait(20)
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [float("nan")] * 99
    print(
        json.dumps(
            {
                "bench": "browser_turn_latency",
                "clients": args.clients,
                "turns_each": args.turns,
                "samples": len(lat),
                "expected_samples": args.clients * args.turns,
                "p50_ms": round(q[49], 2),
                "p99_ms": round(q[98], 2),
                "max_ms": round(max(lat), 2) if lat else None,
                "errors": len(errors),
                "p99_ms_by_turn": {
                    t: round(max(v) if len(v) < 2 else statistics.quantiles(v, n=100)[98], 1)
                    for t, v in sorted(by_turn.items())
                },
                "target": "p50<=10 p99<=40",
                "server": "uvicorn, 1 worker, instant providers, real VAD/engine/transport",
                "client": "another process on the same machine",
                "ok": bool(lat) and q[49] <= 10 and q[98] <= 40,
            }
        )
    )


if __name__ == "__main__":
    main()
