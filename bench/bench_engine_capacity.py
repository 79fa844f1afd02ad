"""200 concurrent conversations streaming 20 ms frames in real time in ONE process: do we keep up?

Half the callers send 8 kHz audio (phone; resampled to 16 kHz per frame by the engine), half
16 kHz (browser). Every frame goes through the real VoiceActivityDetector (webrtcvad + energy
gate); each caller talks for 0.4-1.2 s every few seconds and gets an answer (instant scripted
STT/LLM/TTS, so the audio path and the engine are what is measured). Keeping up means: the
engine's input queues stay near empty and do not grow, and the event loop is never late by more
than a frame. Prints one JSON line.

    .venv/bin/python bench/bench_engine_capacity.py [--conversations 200] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec
from voiceagent.conversation.testing import InstantTTS, ScriptedChat, ScriptedSTT, StaticDirectory
from voiceagent.conversation.tools import ToolRegistry
from voiceagent.speech.vad import VoiceActivityDetector

FRAME_MS = 20


def frames_for(rate: int) -> tuple[bytes, bytes]:
    n = rate * FRAME_MS // 1000
    t = np.arange(n) / rate
    voice = (np.sin(2 * np.pi * 220 * t) * 6000 + np.sin(2 * np.pi * 660 * t) * 3000).astype("<i2").tobytes()
    rng = np.random.default_rng(rate)
    noise = (rng.standard_normal(n) * 30).astype("<i2").tobytes()  # line noise at about -60 dBFS
    return voice, noise


async def caller(
    i: int, seconds: float, registry: ToolRegistry, store: InMemorySessionStore, stats: dict
) -> None:
    rng = random.Random(i)
    rate = 8000 if i % 2 else 16000
    voice, noise = frames_for(rate)
    agent = AgentSpec(name="agent", prompt_template="You are helpful.", greeting="")
    scenario = ScenarioSpec(name="bench", start_agent="agent", agents=("agent",))
    conv = Conversation(
        f"cap-{i}",
        scenario="bench",
        directory=StaticDirectory([agent], scenario, registry),
        store=store,
        stt=ScriptedSTT(["hello"] * 10000, interim_after=10**9),
        tts=InstantTTS(ms_per_word=300, chunk_ms=20),
        chat=ScriptedChat(default="Sure thing, done."),
        vad=VoiceActivityDetector(16000, FRAME_MS),
        registry=registry,
        config=EngineConfig(silence_timeout_ms=lambda: 400),
    )
    loop = asyncio.get_running_loop()
    await asyncio.sleep(rng.uniform(0, 1))
    await conv.start()

    async def drain() -> None:
        async for event in conv.events():
            stats["events"] += 1
            if event.kind == "Audio":
                stats["audio_out_s"] += event.duration_s

    reader = asyncio.create_task(drain())
    start = next_at = loop.time()
    speaking_until = 0.0
    next_talk = start + rng.uniform(0.5, 3)
    while loop.time() - start < seconds:
        next_at += FRAME_MS / 1000
        delay = next_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        now = loop.time()
        if now >= next_talk:
            speaking_until = now + rng.uniform(0.4, 1.2)
            next_talk = speaking_until + rng.uniform(2, 5)
        conv.push_audio(voice if now < speaking_until else noise, rate)
        stats["frames_in"] += 1
        late_ms = (loop.time() - next_at) * 1000  # the engine processes a frame as it is pushed
        stats["max_late_ms"] = max(stats["max_late_ms"], late_ms)
    stats["dropped"] += conv.dropped_frames
    stats["turns"] += sum(1 for t in store.turns.get(conv.session_id, []) if t.role == "user")
    await conv.close()
    await reader


async def ticker(seconds: float, lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        want = loop.time() + 0.01
        await asyncio.sleep(0.01)
        lags.append((loop.time() - want) * 1000)


async def main(conversations: int, seconds: float) -> dict:
    registry, store = ToolRegistry(), InMemorySessionStore()
    stats = {
        "frames_in": 0,
        "max_late_ms": 0.0,
        "dropped": 0,
        "turns": 0,
        "events": 0,
        "audio_out_s": 0.0,
    }
    lags: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(
        ticker(seconds + 1, lags), *(caller(i, seconds, registry, store, stats) for i in range(conversations))
    )
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    q = statistics.quantiles(lags, n=100)
    expected_frames = conversations * seconds * 1000 / FRAME_MS
    return {
        "bench": "engine_capacity",
        "conversations": conversations,
        "seconds": seconds,
        "frames_in": stats["frames_in"],
        "frames_expected": int(expected_frames),
        "dropped_frames": stats["dropped"],
        "max_frame_late_ms": round(stats["max_late_ms"], 2),
        "user_turns": stats["turns"],
        "agent_audio_out_s": round(stats["audio_out_s"], 1),
        "loop_lag_p50_ms": round(q[49], 2),
        "loop_lag_p99_ms": round(q[98], 2),
        "loop_lag_max_ms": round(max(lags), 2),
        "cpu_utilisation_one_core": round(cpu / wall, 2),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ok": stats["dropped"] == 0 and q[98] < FRAME_MS,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.conversations, args.seconds))))
