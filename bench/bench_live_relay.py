"""Live-mode relay overhead: 200 concurrent live conversations against the local realtime peer.

The realtime API is the local peer (tests/support/realtime_peer.py) started as a separate process,
so its work (VAD on 10k appends/s, streaming the answers) does not run on the event loop being
measured. Each conversation is a real :class:`LiveConversation` over a real SDK client (VoiceLive
through ``azure-ai-voicelive``/aiohttp, OpenAI through ``openai``/websockets), streaming 20 ms
frames of 16 kHz caller audio in real time (so the 16 -> 24 kHz resampler is in the path): 0.8 s of
speech, then silence while the peer answers with 10 audio deltas of 100 ms paced at real time,
again and again. Start times are spread over the first 2 s; frames arrive spread evenly over each
20 ms (one pacer, 1 ms slots; a late slot still yields to the loop first, as a server reads each
socket in its own callback).

Two figures per 20 ms frame, measured in-process with ``time.perf_counter``:

- ``in``: transport in -> API out: from just before ``push_audio(frame)`` until the SDK's send of
  the ``input_audio_buffer.append`` carrying it has returned (the frame is on the socket), timed
  by wrapping the connection's ``send_json``;
- ``out``: API delta -> transport out: from the moment the SDK hands us the raw
  ``response.audio.delta`` message (timed by wrapping the connection's raw receive, before JSON
  decoding) until the ``Audio`` event is read from ``events()``.

Frames whose samples the resampler holds back for a later append would not be timed from their
own push; ``in_held_frames`` counts them (0 with the live engine's cubic upsampling, which hands
out every frame's samples at once). Target: p99 <= 2 ms for both. The first 2 s after the last conversation
started are not counted (connection set-up). Event-loop lag (a 10 ms ticker's oversleep) is
reported for context. Prints one JSON line.

    .venv/bin/python bench/bench_live_relay.py [--sessions 200] [--seconds 20] [--clients voicelive,openai]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness import start_realtime_peer  # noqa: E402

from voiceagent.conversation.live import APPEND_HEAD, LiveConfig, LiveConversation  # noqa: E402
from voiceagent.conversation.session import InMemorySessionStore  # noqa: E402
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec  # noqa: E402
from voiceagent.conversation.testing import StaticDirectory  # noqa: E402
from voiceagent.conversation.tools import ToolRegistry  # noqa: E402
from voiceagent.llm.realtime import OpenAIRealtimeClient, VoiceLiveClient  # noqa: E402

KEY = "bench-realtime-key"
RATE, FRAME_MS = 16000, 20
FRAME = RATE * FRAME_MS // 1000
TONE = (np.sin(np.arange(FRAME) * 2 * np.pi * 300 / RATE) * 8000).astype("<i2").tobytes()
SILENCE = bytes(FRAME * 2)
DELTA_TYPES = (b'"response.audio.delta"', b'"response.output_audio.delta"')


class Stats:
    def __init__(self) -> None:
        self.inbound: list[float] = []
        self.outbound: list[float] = []
        self.lag: list[float] = []
        self.counting = False
        self.errors = 0
        self.held = 0
        self.barge_ins = 0


class Probe:
    """Per conversation: push times of queued appends, receipt times of audio deltas."""

    def __init__(self, stats: Stats):
        self.stats = stats
        self.pushes: deque[float] = deque()  # push times of appends not yet on the socket, in order
        self.sent = 0  # appends sent
        self.delta_received = 0.0  # receipt time of the audio delta being handled
        self.audio_received: dict[int, float] = {}  # Audio.seq -> receipt time of its delta


class InstrumentedClient:
    """The real client; each connection's send and raw receive are wrapped with timers."""

    def __init__(self, real, probes: dict[int, Probe]):
        self.real = real
        self.name = real.name
        self.probes = probes

    async def connect(self, session):
        conn = await self.real.connect(session)
        probe = self.probes[id(asyncio.current_task())]
        send_json, recv_raw = conn.send_json, conn._recv_raw

        async def timed_send_json(text: str):
            await send_json(text)
            if text.startswith(APPEND_HEAD) and probe.pushes:
                probe.sent += 1
                pushed = probe.pushes.popleft()
                if probe.stats.counting:
                    probe.stats.inbound.append((time.perf_counter() - pushed) * 1000)

        async def timed_recv_raw():
            raw = await recv_raw()
            if raw:
                head = raw[:48] if isinstance(raw, bytes) else raw[:48].encode()
                if head.startswith(b'{"type": ') and any(t in head for t in DELTA_TYPES):
                    probe.delta_received = time.perf_counter()
            return raw

        conn.send_json = timed_send_json
        conn._recv_raw = timed_recv_raw
        return conn

    async def close(self):
        await self.real.close()


def make_client(kind: str, port: int):
    base = f"http://127.0.0.1:{port}"
    if kind == "voicelive":
        return VoiceLiveClient(base, "gpt-realtime", api_key=KEY, connect_timeout=20)
    return OpenAIRealtimeClient("gpt-realtime", api_key=KEY, base_url=f"{base}/v1", connect_timeout=20)


class Caller:
    """One conversation's caller: 0.8 s of speech, then 3 s of silence (the answer arrives and plays)."""

    CYCLE, SPEECH = 190, 40  # frames

    def __init__(self, conv: LiveConversation, probe: Probe, stats: Stats):
        self.conv, self.probe, self.stats = conv, probe, stats
        self.audio_out = conv._audio_out
        self.frame = 0

    def push(self) -> None:
        pcm = TONE if self.frame % self.CYCLE < self.SPEECH else SILENCE
        self.frame += 1
        probe, queued = self.probe, len(self.audio_out)
        sent = probe.sent
        probe.pushes.append(time.perf_counter())
        self.conv.push_audio(pcm, RATE)
        if probe.sent == sent and len(self.audio_out) == queued:  # neither sent nor queued: kept for later
            probe.pushes.pop()
            if self.stats.counting:
                self.stats.held += 1


async def pacer(slots: list[list[Caller]], end_at: float) -> None:
    """Every caller sends a frame each 20 ms, callers spread over 20 one-millisecond slots (a transport
    receiving frames from many sockets, without 10 000 timers a second of benchmark overhead)."""
    loop = asyncio.get_running_loop()
    next_at, slot = loop.time(), 0
    while loop.time() < end_at:
        next_at += FRAME_MS / 1000 / len(slots)
        delay = next_at - loop.time()
        # a late slot still yields first: a server reads sockets one callback at a time, never
        # several milliseconds of frames in one go
        await asyncio.sleep(delay if delay > 0 else 0)
        for caller in slots[slot]:
            if not caller.conv.closed:
                caller.push()
        slot = (slot + 1) % len(slots)


async def run_session(
    i: int,
    client: InstrumentedClient,
    probes: dict[int, Probe],
    stats: Stats,
    slots: list[list[Caller]],
    done: asyncio.Event,
    rng: random.Random,
) -> None:
    registry, store = ToolRegistry(), InMemorySessionStore()
    agent = AgentSpec(name="agent", prompt_template="You are helpful.", greeting="")
    scenario = ScenarioSpec(name="bench", start_agent="agent", agents=("agent",))
    conv = LiveConversation(
        f"bench-{i}",
        scenario="bench",
        directory=StaticDirectory([agent], scenario, registry),
        store=store,
        client=client,
        registry=registry,
        config=LiveConfig(silence_timeout_ms=lambda: 300, connect_timeout_s=30, event_queue_size=4096),
    )
    probe = probes[id(asyncio.current_task())] = Probe(stats)
    await asyncio.sleep(rng.uniform(0, 2.0))
    await conv.start()
    if conv.closed:
        stats.errors += 1
        return

    async def reader() -> None:
        async for event in conv.events():
            if event.kind == "Audio":
                received = probe.audio_received.pop(event.seq, None)
                if received is not None and stats.counting:
                    stats.outbound.append((time.perf_counter() - received) * 1000)
            elif event.kind == "Error":
                stats.errors += 1
            elif event.kind == "StopAudio" and stats.counting:
                stats.barge_ins += 1

    on_delta = conv._on_audio_delta

    def timed_on_delta(server_event: dict) -> None:
        """Which Audio event (by seq) came of the delta received at probe.delta_received."""
        items = conv.channel._items
        last = items[-1] if items else None
        on_delta(server_event)
        items = conv.channel._items
        if items and items[-1] is not last and items[-1].kind == "Audio":
            probe.audio_received[items[-1].seq] = probe.delta_received

    conv._on_audio_delta = timed_on_delta
    read_task = asyncio.create_task(reader())
    slots[i % len(slots)].append(Caller(conv, probe, stats))
    await done.wait()
    await conv.close()
    await read_task


async def ticker(stats: Stats, end_at: float) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < end_at:
        before = loop.time()
        await asyncio.sleep(0.01)
        if stats.counting:
            stats.lag.append((loop.time() - before - 0.01) * 1000)


def pct(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100)[q - 1], 3) if len(values) > 1 else float("nan")


async def run_client(kind: str, port: int, sessions: int, seconds: float, gc_freeze: str = "startup") -> dict:
    loop = asyncio.get_running_loop()
    stats = Stats()
    probes: dict[int, Probe] = {}
    client = InstrumentedClient(make_client(kind, port), probes)
    if gc_freeze == "startup":  # what the service does once its startup steps ran (lifecycle.py)
        gc.collect()
        gc.freeze()
    rng = random.Random(7)
    end_at = loop.time() + seconds
    slots: list[list[Caller]] = [[] for _ in range(FRAME_MS)]
    done = asyncio.Event()
    tasks = [
        asyncio.create_task(run_session(i, client, probes, stats, slots, done, rng)) for i in range(sessions)
    ]
    tick = asyncio.create_task(ticker(stats, end_at))
    pace = asyncio.create_task(pacer(slots, end_at))
    await asyncio.sleep(4.0)  # all started (0-2 s) and connected, plus 2 s
    if gc_freeze == "sessions":
        gc.collect()
        gc.freeze()  # long-lived objects (sessions, SDK clients) out of the collector's scans
    stats.counting = True
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await pace
    stats.counting = False
    cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    done.set()
    await asyncio.gather(*tasks)
    await tick
    if gc_freeze != "off":
        gc.unfreeze()
    await client.close()
    return {
        "in_samples": len(stats.inbound),
        "in_p50_ms": pct(stats.inbound, 50),
        "in_p99_ms": pct(stats.inbound, 99),
        "in_held_frames": stats.held,
        "out_samples": len(stats.outbound),
        "out_p50_ms": pct(stats.outbound, 50),
        "out_p99_ms": pct(stats.outbound, 99),
        "loop_lag_p99_ms": pct(stats.lag, 99),
        "process_cpu": round(cpu_share, 2),  # CPU seconds per second of this (measured) process
        "barge_ins": stats.barge_ins,  # the caller spoke over a (late) answer: its audio was dropped
        "errors": stats.errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", default="voicelive,openai")
    parser.add_argument("--peer-processes", type=int, default=1)
    parser.add_argument("--peer-nice", type=int, default=10, help="scheduling niceness of the peer process")
    parser.add_argument(
        "--asyncio-loop",
        action="store_true",
        help="run on the stdlib asyncio loop instead of uvloop",
    )
    parser.add_argument(
        "--gc-freeze",
        choices=("startup", "sessions", "off"),
        default="startup",
        help="startup: gc.freeze() before any session, as the service does after its startup steps "
        "(default); sessions: once the 200 sessions are up (best case); off: never",
    )
    args = parser.parse_args()
    results: dict[str, dict] = {}
    for kind in [k.strip() for k in args.clients.split(",") if k.strip()]:
        peer, port = start_realtime_peer(
            KEY, chunks=10, chunk_ms=100, interval=0.1, processes=args.peer_processes, nice=args.peer_nice
        )
        try:
            coro = run_client(kind, port, args.sessions, args.seconds, args.gc_freeze)
            # uvicorn runs the service on uvloop: measure on the same loop (--asyncio-loop: stdlib)
            results[kind] = asyncio.run(coro) if args.asyncio_loop else uvloop.run(coro)
        finally:
            peer.terminate()
            try:
                peer.wait(5)
            except subprocess.TimeoutExpired:
                peer.kill()
    target = 2.0
    ok = all(
        r["in_samples"] and r["out_samples"] and r["in_p99_ms"] <= target and r["out_p99_ms"] <= target
        for r in results.values()
    )
    print(
        json.dumps(
            {
                "bench": "live_relay",
                "sessions": args.sessions,
                "seconds": args.seconds,
                "frame_ms": FRAME_MS,
                "input_rate": RATE,
                "peer": f"separate process x{args.peer_processes}, nice {args.peer_nice}",
                "gc_freeze": args.gc_freeze,
                "loop": "asyncio" if args.asyncio_loop else "uvloop",
                "cpus": os.cpu_count(),
                "target_p99_ms": target,
                "clients": results,
                "ok": bool(results) and ok,
            }
        )
    )


if __name__ == "__main__":
    main()
