"""Engine overhead and barge-in latency with 100 concurrent conversations in one process.

Providers answer instantly (scripted STT, chat and TTS from voiceagent.conversation.testing), so
the figures are the engine's own cost:

- turn latency: end-of-turn decision (VAD silence reached) -> first ``Audio`` event read by the
  transport side; target p50 <= 5 ms, p99 <= 20 ms;
- barge-in: the speech frame over the agent's audio that makes it give way (the one reaching
  ``DUCK_AFTER_MS``, 180 ms, or ``min_interruption_ms`` if shorter: shorter sounds never touch the
  agent) -> the agent's audio giving way as read by the transport side: the ``Duck`` (lowered gain
  until the words are known, voiceagent/conversation/ducking.py) or a ``StopAudio``; target p99 <=
  one VAD frame (20 ms) + 5 ms.

Every conversation streams 20 ms frames in real time; callers start at random offsets within the
first second and speak for 0.3-1.2 s, so turn ends are spread as on a real service (all
conversations ending a turn in the same millisecond is a different, synthetic test). Prints one
JSON line.

    .venv/bin/python bench/bench_engine_latency.py [--conversations 100] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voiceagent.conversation.ducking import DUCK_AFTER_MS
from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec
from voiceagent.conversation.testing import (
    EnergyVAD,
    InstantTTS,
    ScriptedChat,
    ScriptedSTT,
    StaticDirectory,
)
from voiceagent.conversation.tools import ToolRegistry
from voiceagent.conversation.turn_taking import TurnTaking

RATE, FRAME_MS = 16000, 20
FRAME = RATE * FRAME_MS // 1000
TONE = (np.sin(np.arange(FRAME) * 2 * np.pi * 300 / RATE) * 8000).astype("<i2").tobytes()
SILENCE = bytes(FRAME * 2)
SILENCE_MS = 300
# speech over the agent shorter than this is a cough or a quick "yeah" and does not stop it (issue 16)
INTERRUPTION_FRAMES = min(DUCK_AFTER_MS, TurnTaking().min_interruption_ms) // FRAME_MS


def make_conversation(i: int, registry: ToolRegistry, store: InMemorySessionStore) -> Conversation:
    agent = AgentSpec(name="agent", prompt_template="You are helpful.", greeting="")
    scenario = ScenarioSpec(name="bench", start_agent="agent", agents=("agent",))
    return Conversation(
        f"bench-{i}",
        scenario="bench",
        directory=StaticDirectory([agent], scenario, registry),
        store=store,
        stt=ScriptedSTT(["hello there"] * 1000, interim_after=10**9),
        tts=InstantTTS(ms_per_word=400, chunk_ms=20),  # 2 words -> 800 ms of agent audio per answer
        chat=ScriptedChat(default="Sure thing."),
        vad=EnergyVAD(),
        registry=registry,
        config=EngineConfig(silence_timeout_ms=lambda: SILENCE_MS),
    )


async def run_one(
    conv: Conversation, turns: int, turn_lat: list[float], barge_lat: list[float], rng: random.Random
) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(rng.uniform(0, 1.0))  # callers do not all start in the same millisecond
    await conv.start()
    state = {"barge_pushed": None, "first_audio_seen": False, "stopped": False}
    audio_seen = asyncio.Event()

    async def reader() -> None:
        async for event in conv.events():
            now = loop.time()
            if event.kind == "Audio" and not state["first_audio_seen"] and conv.turn_ended_at is not None:
                state["first_audio_seen"] = True
                turn_lat.append((now - conv.turn_ended_at) * 1000)
                audio_seen.set()
            elif state["barge_pushed"] is not None and (
                event.kind == "StopAudio" or (event.kind == "Duck" and event.gain_db < 0)
            ):
                barge_lat.append((now - state["barge_pushed"]) * 1000)
                state["barge_pushed"], state["stopped"] = None, True

    read_task = asyncio.create_task(reader())
    next_at = loop.time()

    async def frame(pcm: bytes) -> None:
        nonlocal next_at
        next_at += FRAME_MS / 1000
        delay = next_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        conv.push_audio(pcm, RATE)

    for t in range(turns):
        state["first_audio_seen"] = False
        audio_seen.clear()
        conv.turn_ended_at = None
        for _ in range(rng.randint(15, 60)):  # 0.3-1.2 s of speech
            await frame(TONE)
        for _ in range(SILENCE_MS // FRAME_MS + 1):
            await frame(SILENCE)
        for _ in range(30):  # keep streaming silence while the agent answers
            if audio_seen.is_set():
                break
            await frame(SILENCE)
        for _ in range(10):  # 200 ms into playback ...
            await frame(SILENCE)
        if t % 2 == 0:  # ... every other turn the caller barges in: speech long enough to stop it
            state["stopped"] = False
            for i in range(INTERRUPTION_FRAMES + 10):
                await frame(TONE)
                if i + 1 == INTERRUPTION_FRAMES:  # from here on it is an interruption, no cough
                    state["barge_pushed"] = loop.time()
                if state["stopped"]:
                    break
            for _ in range(SILENCE_MS // FRAME_MS + 1):
                await frame(SILENCE)
        for _ in range(45):  # let the rest play out
            await frame(SILENCE)
    await conv.close()
    await read_task


def pct(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100)[q - 1], 3) if len(values) > 1 else float("nan")


async def main(conversations: int, turns: int) -> dict:
    registry, store = ToolRegistry(), InMemorySessionStore()
    turn_lat: list[float] = []
    barge_lat: list[float] = []
    convs = [make_conversation(i, registry, store) for i in range(conversations)]
    rng = random.Random(7)
    await asyncio.gather(*(run_one(c, turns, turn_lat, barge_lat, rng) for c in convs))
    return {
        "bench": "engine_latency",
        "conversations": conversations,
        "turns_each": turns,
        "arrivals": "staggered: start offsets 0-1 s, utterances 0.3-1.2 s",
        "turn_samples": len(turn_lat),
        "turn_p50_ms": pct(turn_lat, 50),
        "turn_p99_ms": pct(turn_lat, 99),
        "turn_target": "p50<=5 p99<=20",
        "barge_in_samples": len(barge_lat),
        "barge_in_p50_ms": pct(barge_lat, 50),
        "barge_in_p99_ms": pct(barge_lat, 99),
        "barge_in_target_p99_ms": FRAME_MS + 5,
        "ok": bool(
            turn_lat
            and barge_lat
            and pct(turn_lat, 50) <= 5
            and pct(turn_lat, 99) <= 20
            and pct(barge_lat, 99) <= FRAME_MS + 5
        ),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.conversations, args.turns))))
